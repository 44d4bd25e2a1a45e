package values

import (
	"math/big"
	"testing"
)

func TestIsDecimal(t *testing.T) {
	for _, s := range []string{"0", "-12.50", "123", "0.000000001", "+7", "-0", "007.100", "100000000000000000000.000000001"} {
		if !IsDecimal(s) {
			t.Errorf("IsDecimal(%q) = false", s)
		}
	}
	for _, s := range []string{"", "-", "+", ".5", "5.", "1e3", "1.5e3", " 1", "1 ", "1_000", "0x10", "1.2.3", "--1", "abc", "1,5", "NaN", "Inf"} {
		if IsDecimal(s) {
			t.Errorf("IsDecimal(%q) = true", s)
		}
	}
}

// TestCompareDecimal checks CompareDecimal against math/big.Rat on pairs
// drawn from values that differ in sign, length, leading and trailing
// zeros and only far into the fraction.
func TestCompareDecimal(t *testing.T) {
	vals := []string{"0", "-0", "0.0", "+0", "1", "-1", "10", "9.999999999", "10.000000001", "-10.000000001", "12.5", "12.50",
		"-12.5", "0.1", "0.01", "0.10", "-0.01", "007", "7.0", "100000000000000000000.000000001", "100000000000000000000",
		"-99999999999999999999999999999.999999999", "18446744073709551616", "18446744073709551615.5"}
	for _, a := range vals {
		for _, b := range vals {
			ra, _ := new(big.Rat).SetString(a)
			rb, _ := new(big.Rat).SetString(b)
			if got, want := CompareDecimal(a, b), ra.Cmp(rb); got != want {
				t.Errorf("CompareDecimal(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestHasFraction(t *testing.T) {
	for s, want := range map[string]bool{"1": false, "1.0": false, "-3.000": false, "0.5": true, "-2.01": true, "0.000000001": true} {
		if got := HasFraction(s); got != want {
			t.Errorf("HasFraction(%q) = %v", s, got)
		}
	}
}

func TestCanonicalDecimal(t *testing.T) {
	for in, want := range map[string]string{
		"-012.50": "-12.5", "-0.0": "0", "+7": "7", "0.000000001": "0.000000001", "100": "100",
		"12.500000000": "12.5", "123456789012345678901234567890.100": "123456789012345678901234567890.1",
	} {
		if got, ok := CanonicalDecimal(in); !ok || got != want {
			t.Errorf("CanonicalDecimal(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "1e3", "abc", "1.", ".5"} {
		if _, ok := CanonicalDecimal(bad); ok {
			t.Errorf("CanonicalDecimal(%q) accepted", bad)
		}
	}
}
