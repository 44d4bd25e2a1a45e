package exact

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
)

// Int is an exact integer. The zero value is 0. Copies may share the
// big.Int of a large value; no method changes a big.Int in place, so a copy
// is as independent as an int64.
type Int struct {
	small int64
	big   *big.Int // non-nil only when the value is outside int64
}

// New returns v as an Int.
func New(v int64) Int { return Int{small: v} }

// FromBig returns the value of b (copied).
func FromBig(b *big.Int) Int {
	if b.IsInt64() {
		return Int{small: b.Int64()}
	}
	return Int{big: new(big.Int).Set(b)}
}

// Add adds v.
func (x *Int) Add(v int64) {
	if x.big == nil {
		s := x.small + v
		// Overflow iff both operands have the sign the sum lacks.
		if (x.small^s)&(v^s) >= 0 {
			x.small = s
			return
		}
	}
	x.setBig(new(big.Int).Add(x.Big(), big.NewInt(v)))
}

// AddInt adds y.
func (x *Int) AddInt(y Int) {
	if y.big == nil {
		x.Add(y.small)
		return
	}
	x.setBig(new(big.Int).Add(x.Big(), y.big))
}

// setBig stores b (owned by x from now on), back in int64 if it fits, so
// that every value has one form.
func (x *Int) setBig(b *big.Int) {
	if b.IsInt64() {
		*x = Int{small: b.Int64()}
		return
	}
	*x = Int{big: b}
}

// Int64 returns the value and true if it fits in an int64.
func (x Int) Int64() (int64, bool) { return x.small, x.big == nil }

// Big returns the value as a new big.Int.
func (x Int) Big() *big.Int {
	if x.big == nil {
		return big.NewInt(x.small)
	}
	return new(big.Int).Set(x.big)
}

// Cmp compares x and y: -1, 0 or +1.
func (x Int) Cmp(y Int) int {
	if x.big == nil && y.big == nil {
		switch {
		case x.small < y.small:
			return -1
		case x.small > y.small:
			return 1
		}
		return 0
	}
	return x.Big().Cmp(y.Big())
}

// Equal reports whether x and y have the same value.
func (x Int) Equal(y Int) bool { return x.Cmp(y) == 0 }

// String is the value in decimal.
func (x Int) String() string { return string(x.Append(nil)) }

// Append appends the value in decimal.
func (x Int) Append(dst []byte) []byte {
	if x.big == nil {
		return strconv.AppendInt(dst, x.small, 10)
	}
	return x.big.Append(dst, 10)
}

// Value is what database/sql drivers take: an int64 while it fits, the
// decimal text beyond (MySQL converts it to the DECIMAL column exactly;
// SQLite stores it as TEXT in a column without numeric affinity).
func (x Int) Value() any {
	if x.big == nil {
		return x.small
	}
	return x.big.String()
}

// ErrSyntax means a text is not a decimal integer.
var ErrSyntax = errors.New("exact: not a decimal integer")

// Parse reads a decimal integer of any size: an optional sign and digits,
// nothing else (no spaces, underscores, fractions or exponents).
func Parse(s string) (Int, error) {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return Int{small: v}, nil
	}
	if !isDecimal(s) {
		return Int{}, fmt.Errorf("%w: %q", ErrSyntax, clip(s))
	}
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return Int{}, fmt.Errorf("%w: %q", ErrSyntax, clip(s))
	}
	var x Int
	x.setBig(b)
	return x, nil
}

func isDecimal(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// MarshalJSON writes the value as a JSON integer, whatever its size.
func (x Int) MarshalJSON() ([]byte, error) { return x.Append(nil), nil }

// UnmarshalJSON reads a JSON integer of any size (not a string, a
// fraction or an exponent: a total is never written so).
func (x *Int) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "" || s[0] == '+' {
		return fmt.Errorf("%w: %q", ErrSyntax, clip(s))
	}
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*x = v
	return nil
}
