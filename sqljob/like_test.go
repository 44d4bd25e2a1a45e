package sqljob

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// likeRecursive is the definition of LIKE, written the obvious way (and
// exponential in the number of %): the reference for like.
func likeRecursive(s, p []byte) bool {
	for len(p) > 0 {
		switch p[0] {
		case '%':
			for len(p) > 0 && p[0] == '%' {
				p = p[1:]
			}
			if len(p) == 0 {
				return true
			}
			for i := 0; ; {
				if likeRecursive(s[i:], p) {
					return true
				}
				if i == len(s) {
					return false
				}
				_, n := utf8.DecodeRune(s[i:])
				i += n
			}
		case '_':
			if len(s) == 0 {
				return false
			}
			_, n := utf8.DecodeRune(s)
			s, p = s[n:], p[1:]
		default:
			c := p[0]
			if c == '\\' && len(p) > 1 {
				p = p[1:]
				c = p[0]
			}
			if len(s) == 0 || s[0] != c {
				return false
			}
			s, p = s[1:], p[1:]
		}
	}
	return len(s) == 0
}

func TestLikeAgreesWithItsDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	alpha := []string{"a", "b", "é", "%", "_", "\\"}
	gen := func(n int, pattern bool) []byte {
		var b []byte
		for range rng.IntN(n) {
			k := rng.IntN(len(alpha))
			if !pattern && k >= 3 {
				k = rng.IntN(3)
			}
			b = append(b, alpha[k]...)
		}
		return b
	}
	for range 200000 {
		s, p := gen(8, false), gen(6, true)
		if got, want := like(s, p), likeRecursive(s, p); got != want {
			t.Fatalf("like(%q, %q) = %v, want %v", s, p, got, want)
		}
	}
	for _, c := range []struct {
		s, p string
		want bool
	}{
		{"abc", "a%c", true}, {"abc", "a_c", true}, {"ac", "a_c", false}, {"aéc", "a_c", true},
		{"a%c", `a\%c`, true}, {"abc", `a\%c`, false}, {"", "%", true}, {"", "", true}, {"x", "", false},
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "%a%a%a%a%a%a%a%a%a%a%c", false},
	} {
		if got := like([]byte(c.s), []byte(c.p)); got != c.want {
			t.Errorf("like(%q, %q) = %v, want %v", c.s, c.p, got, c.want)
		}
	}
}

// A product is exact whenever its exact value fits: zeros after the point
// are dropped before the fit is judged.
func TestMulDropsZerosBeforeItJudgesTheFit(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"123456789.123456789", "100", "12345678912.3456789"},
		{"0.000000002", "500000000", "1"},
		{"-1.5", "2", "-3"},
		{"0.1", "0.2", "0.02"},
		{"0", "123.45", "0"},
	} {
		a, _ := parseDec([]byte(c.a))
		b, _ := parseDec([]byte(c.b))
		got, err := a.mul(b)
		if err != nil || got.String() != c.want {
			t.Errorf("%s * %s = %v, %v; want %s", c.a, c.b, got, err, c.want)
		}
	}
	a, _ := parseDec([]byte("9223372036854775807"))
	if _, err := a.mul(dec{m: 2}); err == nil {
		t.Error("MaxInt64 * 2 did not overflow")
	}
	x, _ := parseDec([]byte("0.000000001"))
	if _, err := x.mul(x); err == nil {
		t.Error("a product with 18 digits after the point was accepted")
	}
}
