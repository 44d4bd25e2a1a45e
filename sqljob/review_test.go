package sqljob

import "testing"

// A number is refused for its value, never for how many zeros it is
// written with: trailing zeros after the point are no digits of the value,
// and an exponent can bring zeros before it back into range.
func TestParseDecTrailingZeros(t *testing.T) {
	for in, want := range map[string]string{
		"1.0000000000000000000000":      "1",
		"12.50000000000000000000000000": "12.5",
		"100000000000000000000000e-10":  "10000000000000",
		"0.00000000000000000000000000":  "0",
		"0e5000":                        "0",
		"-0.0e-5000":                    "0",
		"100.005":                       "100.005",
		"1.05":                          "1.05",
		"1000":                          "1000",
		"0.5":                           "0.5",
		"120e-1":                        "12",
	} {
		d, err := parseDec([]byte(in))
		if err != nil || d.String() != want {
			t.Errorf("parseDec(%s) = %s, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"10000000000000000000", "0.0000000001", "1e-10", "1e5000", "12345678901234567890"} {
		if d, err := parseDec([]byte(in)); err == nil {
			t.Errorf("parseDec(%s) = %s, want it refused", in, d)
		}
	}
}
