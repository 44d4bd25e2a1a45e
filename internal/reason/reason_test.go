package reason

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSafe(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"valid, short", "bad key", 64, "bad key"},
		{"valid, exact fit", "abcd", 4, "abcd"},
		{"valid, cut", "abcdef", 4, "abcd"},
		{"invalid bytes escaped", "page-\xff and \xfe", 64, `page-\xff and \xfe`},
		{"truncated sequence escaped", "caf\xc3", 64, `caf\xc3`},
		{"lone continuation byte", "a\x80b", 64, `a\x80b`},
		{"surrogate encoded in UTF-8 (CESU)", "\xed\xa0\x80", 64, `\xed\xa0\x80`},
		{"valid U+FFFD kept", "a\uFFFDb", 64, "a\uFFFDb"},
		{"NUL escaped (PostgreSQL's text can't hold it)", "a\x00b", 64, `a\x00b`},
		{"cut inside a 2-byte character", "x" + strings.Repeat("é", 3), 4, "xé"},
		{"cut inside a 4-byte character", "ab🔑", 5, "ab"},
		{"cut inside an escape", "ab\xff", 4, "ab"},
		{"cut right after an escape", "ab\xffc", 6, `ab\xff`},
		{"zero max", "abc", 0, ""},
		{"negative max", "abc", -1, ""},
		{"empty", "", 10, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Safe(tc.in, tc.max)
			if got != tc.want {
				t.Errorf("Safe(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
			if !utf8.ValidString(got) || len(got) > max(tc.max, 0) {
				t.Errorf("Safe(%q, %d) = %q: not valid UTF-8 or over the bound", tc.in, tc.max, got)
			}
			if again := Safe(got, tc.max); again != got {
				t.Errorf("Safe is not idempotent: %q then %q", got, again)
			}
		})
	}
}

func TestClip(t *testing.T) {
	if got := Clip("short", 64); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	if got := Clip(`"`+strings.Repeat("é", 40)+`"`, 64); got != `"`+strings.Repeat("é", 31)+"…" {
		t.Errorf("Clip cut = %q", got)
	}
	if got := Clip("\"page-\xff\"", 64); got != `"page-\xff"` {
		t.Errorf("Clip(invalid) = %q", got)
	}
}

// FuzzSafe: whatever the input, the result is valid UTF-8 within the
// bound, a fixed point, and the input's valid text comes through: Safe
// never drops or changes a valid character it keeps.
func FuzzSafe(f *testing.F) {
	for _, s := range []string{"", "abc", "page-\xff", "é\xc3", "🔑\x80\xed\xa0\x80", "\\xff"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n % 300
		got := Safe(s, n)
		if !utf8.ValidString(got) || len(got) > max(n, 0) {
			t.Fatalf("Safe(%q, %d) = %q", s, n, got)
		}
		if Safe(got, n) != got {
			t.Fatalf("Safe(%q, %d) = %q is not a fixed point", s, n, got)
		}
		if utf8.ValidString(s) && !strings.HasPrefix(s, got) {
			t.Fatalf("Safe(%q, %d) = %q is not a prefix of valid input", s, n, got)
		}
	})
}
