package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"testing"
)

// special8's lowest mark is the first byte a string scan must look at,
// for every byte value in every position (and nothing is marked in plain
// text).
func TestSpecial8(t *testing.T) {
	isSpecial := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	for pos := range 8 {
		for c := range 256 {
			for _, fill := range []byte{'a', ' ', '~', '!', '#', '[', ']'} {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(c)
				m := special8(binary.LittleEndian.Uint64(b[:]))
				want := -1
				for i := range b {
					if isSpecial(b[i]) {
						want = i
						break
					}
				}
				got := -1
				if m != 0 {
					got = bits.TrailingZeros64(m) >> 3
				}
				if got != want {
					t.Fatalf("special8(%q): first mark at %d, want %d", b, got, want)
				}
			}
		}
	}
}

// nonDigit8's lowest mark is the first byte that is not a digit, for
// every byte value in every place.
func TestNonDigit8(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			for _, fill := range []byte{'0', '5', '9'} {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(c)
				want := -1
				for i := range b {
					if b[i] < '0' || b[i] > '9' {
						want = i
						break
					}
				}
				got := -1
				if m := nonDigit8(binary.LittleEndian.Uint64(b[:])); m != 0 {
					got = bits.TrailingZeros64(m) >> 3
				}
				if got != want {
					t.Fatalf("nonDigit8(%q): first mark at %d, want %d", b, got, want)
				}
			}
		}
	}
}
