package jsonscan

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// SkipSpace returns the index of the first byte from d[i] on that is not
// JSON whitespace (space, tab, CR, LF: no other), or len(d).
func SkipSpace(d []byte, i int) int {
	for i < len(d) && d[i] <= ' ' && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// ValueStart reports whether a JSON value may start with byte c.
func ValueStart(c byte) bool {
	return c == '{' || c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || (c >= '0' && c <= '9')
}

// QuoteByte names byte c in a message: the character if it is printable
// ASCII, else its hex value.
func QuoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// ScanLiteral checks the true, false or null at i and returns the index
// after it.
func ScanLiteral(d []byte, i int) (int, error) {
	switch c := d[i]; {
	case c == 't' && hasWord(d, i, "true"):
		return i + 4, nil
	case c == 'f' && hasWord(d, i, "false"):
		return i + 5, nil
	case c == 'n' && hasWord(d, i, "null"):
		return i + 4, nil
	case c == 't' || c == 'f' || c == 'n':
		return i, ErrorAt(i, "invalid literal")
	default:
		return i, ErrorAt(i, "unexpected "+QuoteByte(c))
	}
}

func hasWord(d []byte, i int, word string) bool {
	return len(d)-i >= len(word) && string(d[i:i+len(word)]) == word
}

// ScanNumber checks the JSON number at i (-?(0|[1-9][0-9]*)(.[0-9]+)?
// ([eE][+-]?[0-9]+)?) and returns the index after it.
func ScanNumber(d []byte, i int) (int, error) {
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = skipDigits(d, i)
	default:
		return i, ErrorAt(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		start := i
		if i = skipDigits(d, i); i == start {
			return i, ErrorAt(i, "invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		start := i
		if i = skipDigits(d, i); i == start {
			return i, ErrorAt(i, "invalid number")
		}
	}
	return i, nil
}

// skipDigits returns the index of the first byte from i that is not a
// decimal digit, looking at eight bytes at a time (epoch milliseconds
// have thirteen).
func skipDigits(d []byte, i int) int {
	for i+8 <= len(d) {
		if m := nonDigit8(binary.LittleEndian.Uint64(d[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

// nonDigit8 marks (with its high bit) each byte of the eight in x that is
// not '0'–'9': below '0', b-'0' borrows; above '9', b+0x46 reaches 0x80;
// from 0x80, b is marked itself. A borrow or carry can mark a byte above
// a marked one, never below: the lowest mark is exact.
func nonDigit8(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return ((x - ones*'0') | (x + ones*0x46) | x) & highs
}

// ScanString checks the string literal at i ('"'): escapes, control
// characters and UTF-8. It returns the index after its closing quote and
// whether it holds escapes.
func ScanString(d []byte, i int) (int, bool, error) {
	esc := false
	i++
	for {
		// Skip plain bytes eight at a time; stop at the first byte that
		// needs a look.
		if i+8 <= len(d) {
			m := special8(binary.LittleEndian.Uint64(d[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(d) && d[i] != '"' && d[i] != '\\' && d[i] >= 0x20 && d[i] < utf8.RuneSelf {
				i++
			}
			if i >= len(d) {
				return i, esc, ErrorAt(i, "unterminated string")
			}
		}
		switch c := d[i]; {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(d) {
				return i, esc, ErrorAt(i, "unterminated string")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !IsHex4(d[i+2:i+6]) {
					return i, esc, ErrorAt(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, esc, ErrorAt(i, "invalid escape")
			}
		case c < 0x20:
			return i, esc, ErrorAt(i, "control character in a string")
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return i, esc, ErrorAt(i, fmt.Sprintf("byte 0x%02x is not UTF-8", c))
			}
			i += size
		}
	}
}

// special8 marks (with its high bit) each byte of the eight in x that
// needs a look: '"', '\\', below 0x20, from 0x80. For an ASCII byte b,
// b-1 (of b^'"', b^'\\') and b-0x20 only reach the high bit when b is
// the byte looked for; every non-ASCII byte is marked by x itself. A
// borrow can mark a byte above a marked one, never below: the lowest
// mark is exact, and without a mark there is no borrow.
func special8(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"') // zero bytes where x has '"'
	b := x ^ (ones * '\\')
	return ((q - ones) | (b - ones) | (x - ones*0x20) | x) & highs
}

// IsHex4 reports whether b's first four bytes are hex digits.
func IsHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// HexRune reads the four hex digits of a JSON \u escape (already
// checked to be hex digits).
func HexRune(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Unescape appends the text of string literal content lit (between the
// quotes, checked by ScanString) to dst. A \u escape of a UTF-16
// surrogate without its pair is refused: decoders turn every one into
// U+FFFD, so strings that differ only there would become one.
func Unescape(dst, lit []byte) ([]byte, error) {
	for i := 0; i < len(lit); i++ {
		c := lit[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		switch lit[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := HexRune(lit[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 < len(lit) && lit[i+1] == '\\' && lit[i+2] == 'u' && IsHex4(lit[i+3:i+7]) {
					if p := utf16.DecodeRune(r, HexRune(lit[i+3:i+7])); p != utf8.RuneError {
						dst = utf8.AppendRune(dst, p)
						i += 6
						continue
					}
				}
				return dst, fmt.Errorf("a string holds \\u%04x, a UTF-16 surrogate without its pair, which is no character", r)
			}
			dst = utf8.AppendRune(dst, r)
		default: // " \ /
			dst = append(dst, lit[i])
		}
	}
	return dst, nil
}
