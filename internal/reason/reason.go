package reason

import (
	"strings"
	"unicode/utf8"
)

// Safe returns s with every byte that is not part of a valid UTF-8
// sequence, and every NUL (which PostgreSQL's text types can't hold),
// written as \xNN (lower-case hex, as Go's %q does), cut to at
// most max bytes at a character boundary; an escape is never cut in half.
// The result is valid UTF-8, and Safe of it (with the same max) is itself.
func Safe(s string, max int) string {
	out, _ := safe(s, max)
	return out
}

// Clip is Safe for a piece of input quoted in a reason: if s had to be cut
// to max bytes, "…" follows.
func Clip(s string, max int) string {
	out, cut := safe(s, max)
	if cut {
		out += "…"
	}
	return out
}

func safe(s string, max int) (string, bool) {
	if max < 0 {
		max = 0
	}
	if len(s) <= max && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s, false
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(min(len(s)+8, max))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		invalid := r == utf8.RuneError && n == 1 || r == 0
		width := n
		if invalid {
			width = len(`\xff`)
		}
		if b.Len()+width > max {
			return b.String(), true
		}
		if invalid {
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String(), false
}
