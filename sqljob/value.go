package sqljob

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"time"

	"github.com/microbatch/microbatch/internal/reason"
)

// kind is a value's type. Records hold JSON, so a field's type is known
// only per record: each operation checks the kinds it gets, and a record
// whose field has a kind the query can't use is dead-lettered with the
// reason.
type kind uint8

const (
	kNull kind = iota // SQL NULL: a missing field or JSON null
	kBool
	kNum
	kStr
	kJSON // an object or array, as its JSON text
	kTime // a window's start (TUMBLE), in unix milliseconds
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "JSON object or array", "time"}[k]
}

// val is one value during evaluation. s aliases the record (or the
// scanner's buffer) and is only valid while the record is evaluated.
type val struct {
	k       kind
	b       bool
	present bool   // set by the scanner: the field was in the record
	nOK     bool   // kNum: n holds the number (s parsed, or computed)
	s       []byte // kStr: text; kNum: JSON literal (nil for a computed number); kJSON: text
	n       dec    // kNum: the number once nOK; kTime: n.m is unix milliseconds
}

func numVal(d dec) val { return val{k: kNum, n: d, nOK: true} }

func timeVal(ms int64) val { return val{k: kTime, n: dec{m: ms}} }

// maxScale is the most digits after the point a number may have: the
// sinks keep sums, minima and maxima as DECIMAL(38,9).
const maxScale = 9

// dec is an exact decimal m / 10^sc.
type dec struct {
	m  int64
	sc uint8
}

var pow10 = [...]int64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
	10000000000, 100000000000, 1000000000000, 10000000000000, 100000000000000, 1000000000000000,
	10000000000000000, 100000000000000000, 1000000000000000000}

// num is v as a number; what says what the value is, for the reason.
func (v *val) num(what string) (dec, error) {
	if v.k != kNum {
		return dec{}, fmt.Errorf("%s is a %s (%s), not a number", what, v.k, v.show())
	}
	if v.nOK {
		return v.n, nil
	}
	d, err := parseDec(v.s)
	if err != nil {
		return dec{}, fmt.Errorf("%s: %w", what, err)
	}
	return d, nil
}

// show is a short text of v for a reason.
func (v *val) show() string {
	switch v.k {
	case kNull:
		return "null"
	case kBool:
		return strconv.FormatBool(v.b)
	case kStr:
		return strconv.Quote(reason.Clip(string(v.s), 40))
	case kNum, kJSON:
		if v.s != nil {
			return reason.Clip(string(v.s), 40)
		}
		return v.n.String()
	case kTime:
		return time.UnixMilli(v.n.m).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	return "?"
}

// parseDec reads a JSON number literal exactly. Exponents are applied
// (1.5e3 is 1500); a number with more than maxScale digits after the
// point (trailing zeros aside), or whose digits don't fit in int64, is
// refused: it has no exact place in a DECIMAL(38,9) column.
func parseDec(s []byte) (dec, error) {
	i, neg := 0, false
	if i < len(s) && s[i] == '-' {
		neg, i = true, 1
	}
	var m uint64
	sc, over := 0, false
	frac := false
	// Zeros are held back until a digit other than zero follows, so that
	// trailing zeros (1.000…0, 1000…0e-30) never overflow m: those after
	// the point are dropped, those before it scale the number.
	zeros, intZeros := 0, 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			frac = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if c == '0' {
			zeros++
			if !frac {
				intZeros++
			}
			continue
		}
		sc += zeros - intZeros // the held-back zeros after the point
		for ; zeros > 0; zeros-- {
			if m > math.MaxUint64/10 {
				over = true
			}
			m *= 10
		}
		intZeros = 0
		if m > (math.MaxUint64-9)/10 {
			over = true
		}
		m = m*10 + uint64(c-'0')
		if frac {
			sc++
		}
	}
	sc -= intZeros
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') && m != 0 {
		e, err := strconv.Atoi(string(s[i+1:]))
		if err != nil || e > 1000 || e < -1000 {
			return dec{}, fmt.Errorf("number %s is out of range", reason.Clip(string(s), 40))
		}
		exp = e
	}
	sc -= exp
	for sc > 0 && m%10 == 0 && m != 0 {
		m /= 10
		sc--
	}
	if m == 0 {
		sc = 0
	}
	for sc < 0 && !over {
		if m > math.MaxUint64/10 {
			over = true
			break
		}
		m *= 10
		sc++
	}
	if over || m > math.MaxInt64 {
		return dec{}, fmt.Errorf("number %s is out of range (over 19 digits)", reason.Clip(string(s), 40))
	}
	if sc > maxScale {
		return dec{}, fmt.Errorf("number %s has more than %d digits after the point", reason.Clip(string(s), 40), maxScale)
	}
	v := int64(m)
	if neg {
		v = -v
	}
	return dec{m: v, sc: uint8(sc)}, nil
}

var errOverflow = fmt.Errorf("arithmetic overflow (past 19 digits)")

// scaleTo returns d with scale sc (>= d.sc).
func (d dec) scaleTo(sc uint8) (int64, bool) {
	if sc == d.sc {
		return d.m, true
	}
	p := pow10[sc-d.sc]
	hi, lo := bits.Mul64(uint64(abs(d.m)), uint64(p))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	if d.m < 0 {
		return -int64(lo), true
	}
	return int64(lo), true
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func (d dec) add(e dec) (dec, error) {
	sc := max(d.sc, e.sc)
	a, ok1 := d.scaleTo(sc)
	b, ok2 := e.scaleTo(sc)
	s := a + b
	if !ok1 || !ok2 || (a^s)&(b^s) < 0 {
		return dec{}, errOverflow
	}
	return dec{m: s, sc: sc}.trim(), nil
}

func (d dec) neg() (dec, error) {
	if d.m == math.MinInt64 {
		return dec{}, errOverflow
	}
	return dec{m: -d.m, sc: d.sc}, nil
}

func (d dec) mul(e dec) (dec, error) {
	if d.m == math.MinInt64 || e.m == math.MinInt64 {
		return dec{}, errOverflow
	}
	// The exact 128-bit product, with the zeros after the point dropped
	// before it must fit: 123456789.123456789 * 100 is exact.
	hi, lo := bits.Mul64(uint64(abs(d.m)), uint64(abs(e.m)))
	sc := d.sc + e.sc
	for sc > 0 {
		qhi := hi / 10
		qlo, rem := bits.Div64(hi%10, lo, 10)
		if rem != 0 {
			break
		}
		hi, lo, sc = qhi, qlo, sc-1
	}
	if hi != 0 || lo > math.MaxInt64 {
		return dec{}, errOverflow
	}
	r := dec{m: int64(lo), sc: sc}
	if (d.m < 0) != (e.m < 0) {
		r.m = -r.m
	}
	if r.m == 0 {
		r.sc = 0
	}
	if r.sc > maxScale {
		return dec{}, fmt.Errorf("a product has more than %d digits after the point", maxScale)
	}
	return r, nil
}

// trim drops trailing zeros after the point.
func (d dec) trim() dec {
	for d.sc > 0 && d.m%10 == 0 {
		d.m /= 10
		d.sc--
	}
	if d.m == 0 {
		d.sc = 0
	}
	return d
}

func (d dec) cmp(e dec) int {
	sc := max(d.sc, e.sc)
	a, ok1 := d.scaleTo(sc)
	b, ok2 := e.scaleTo(sc)
	if ok1 && ok2 {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	return d.big(sc).Cmp(e.big(sc))
}

// big is d scaled to sc as a big.Int.
func (d dec) big(sc uint8) *big.Int {
	b := big.NewInt(d.m)
	return b.Mul(b, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(sc-d.sc)), nil))
}

func (d dec) String() string { return string(d.append(nil)) }

// append writes d's decimal text: digits, and after the point only the
// digits its scale holds.
func (d dec) append(dst []byte) []byte {
	if d.sc == 0 {
		return strconv.AppendInt(dst, d.m, 10)
	}
	u := uint64(abs(d.m))
	if d.m == math.MinInt64 {
		u = 1 << 63
	}
	if d.m < 0 {
		dst = append(dst, '-')
	}
	p := uint64(pow10[d.sc])
	dst = strconv.AppendUint(dst, u/p, 10)
	dst = append(dst, '.')
	f := strconv.FormatUint(u%p, 10)
	for range int(d.sc) - len(f) {
		dst = append(dst, '0')
	}
	return append(dst, f...)
}

// truth is v as a condition: true, false, or null (unknown). Numbers are
// true when not zero, as in MySQL.
func truth(v *val, what string) (t, null bool, err error) {
	switch v.k {
	case kNull:
		return false, true, nil
	case kBool:
		return v.b, false, nil
	case kNum:
		d, err := v.num(what)
		return d.m != 0, false, err
	}
	return false, false, fmt.Errorf("%s is a %s (%s), not a condition", what, v.k, v.show())
}

// keyText appends v's text as a group key: a string's text, a number as
// written in the record (or its decimal text when computed), true/false,
// an object or array as its JSON text.
func (v *val) keyText(dst []byte) []byte {
	switch v.k {
	case kStr, kJSON:
		return append(dst, v.s...)
	case kNum:
		if v.s != nil {
			return append(dst, v.s...)
		}
		return v.n.append(dst)
	case kBool:
		return strconv.AppendBool(dst, v.b)
	}
	return dst
}
