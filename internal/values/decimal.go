package values

// IsDecimal reports whether s is a decimal number as per-column upserts
// take it: an optional sign, digits, and optionally a point and digits
// ("-12.50", "123", "+0.000000001"); no exponent, spaces or bare point.
func IsDecimal(s string) bool {
	_, _, _, ok := splitDecimal(s)
	return ok
}

// CompareDecimal compares the decimals a and b (both IsDecimal) exactly:
// -1, 0 or +1. Leading zeros, trailing fraction zeros and the sign of
// zero make no difference ("-0.0" == "0", "12.5" == "12.50").
func CompareDecimal(a, b string) int {
	na, ia, fa, _ := splitDecimal(a)
	nb, ib, fb, _ := splitDecimal(b)
	if ia == "" && fa == "" {
		na = false // zero has no sign
	}
	if ib == "" && fb == "" {
		nb = false
	}
	if na != nb {
		if na {
			return -1
		}
		return 1
	}
	c := compareMagnitude(ia, fa, ib, fb)
	if na {
		return -c
	}
	return c
}

// splitDecimal splits a decimal into its sign, its integer digits without
// leading zeros and its fraction digits without trailing zeros.
func splitDecimal(s string) (neg bool, intDigits, fracDigits string, ok bool) {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intDigits, s = s[:i], s[i:]
	if intDigits == "" {
		return false, "", "", false
	}
	if s != "" {
		if s[0] != '.' || len(s) == 1 {
			return false, "", "", false
		}
		fracDigits = s[1:]
		for j := 0; j < len(fracDigits); j++ {
			if !isDigit(fracDigits[j]) {
				return false, "", "", false
			}
		}
	}
	for len(intDigits) > 0 && intDigits[0] == '0' {
		intDigits = intDigits[1:]
	}
	for len(fracDigits) > 0 && fracDigits[len(fracDigits)-1] == '0' {
		fracDigits = fracDigits[:len(fracDigits)-1]
	}
	return neg, intDigits, fracDigits, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// compareMagnitude compares two unsigned decimals given as trimmed integer
// and fraction digits.
func compareMagnitude(ia, fa, ib, fb string) int {
	if len(ia) != len(ib) {
		if len(ia) < len(ib) {
			return -1
		}
		return 1
	}
	if ia != ib {
		if ia < ib {
			return -1
		}
		return 1
	}
	// Trimmed fractions compare as strings: a prefix is the smaller.
	switch {
	case fa < fb:
		return -1
	case fa > fb:
		return 1
	}
	return 0
}

// Mergeable reports whether v can be merged exactly by a per-column
// upsert's MergeAdd, MergeMin or MergeMax: nil (no value), a Go integer of
// any size, or a decimal string (IsDecimal).
func Mergeable(v any) bool {
	switch x := v.(type) {
	case nil, uint, uint64:
		return true
	case string:
		return IsDecimal(x)
	}
	_, ok := Int64(v)
	return ok
}

// HasFraction reports whether decimal s (IsDecimal) has a non-zero
// fraction.
func HasFraction(s string) bool {
	_, _, f, _ := splitDecimal(s)
	return f != ""
}

// CanonicalDecimal is decimal s (IsDecimal) in one form per value: no
// '+', no leading zeros, no trailing fraction zeros, no point without a
// fraction, zero unsigned ("-012.50" -> "-12.5", "-0.0" -> "0").
func CanonicalDecimal(s string) (string, bool) {
	neg, i, f, ok := splitDecimal(s)
	if !ok {
		return "", false
	}
	if i == "" {
		i = "0"
	}
	out := i
	if f != "" {
		out += "." + f
	}
	if neg && out != "0" {
		out = "-" + out
	}
	return out, true
}
