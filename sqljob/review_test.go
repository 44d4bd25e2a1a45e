package sqljob

import (
	"strings"
	"testing"
)

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

// A member on a path the query reads that appears twice in one object is
// refused, as a field read twice is, also where the query reads inside it:
// MariaDB's JSON_EXTRACT takes the first c here, MySQL and encoding/json
// the last (so c->>'$.id' is 1 or NULL).
func TestDuplicateMemberOnPathIsRefused(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT c->>'$.id' AS id, COUNT(*) AS n FROM x GROUP BY id", Options{})
	a := q.NewAggregate()
	for _, rec := range []string{`{"c":{"id":"1"},"c":5}`, `{"c":5,"c":{"id":"1"}}`, `{"c":{"id":"1"},"c":{"x":2}}`, `{"c":{"id":"1","id":"2"}}`} {
		if err := a.Add([]byte(rec)); !IsRejection(err) || !strings.Contains(err.Error(), "appears twice") {
			t.Errorf("Add(%s) = %v, want it refused", rec, err)
		}
	}
	// Members off the path may repeat (the query doesn't read them), and
	// one name may appear once at each level.
	addAll(t, a, `{"d":1,"d":2,"c":{"id":"1","x":1,"x":2},"id":"c"}`, `{"c":{"c":{"id":3},"id":"1"}}`)
	if rows := strings.TrimSpace(rowsText(a.Rows())); rows != "1|2" {
		t.Errorf("rows %s, want 1|2", rows)
	}
}
