package event

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/microbatch/microbatch/internal/jsonscan"
)

// maxNesting is encoding/json's nesting limit (its scanner's
// maxNestingDepth): a record nested deeper is not accepted by decodeSlow.
const maxNesting = jsonscan.MaxNesting

// Fields of the event, as bits of a set.
const (
	fieldID uint8 = 1 << iota
	fieldKey
	fieldAmount
	fieldTS
	allFields = fieldID | fieldKey | fieldAmount | fieldTS
)

// decodeJSON decodes any JSON form of an event, without allocating unless
// the key holds escapes. It returns false for anything it does not accept,
// leaving the verdict and the reason to decodeSlow; what it accepts, and
// the event it fills in, are exactly decodeSlow's
// (FuzzDecodeAgreesWithStrict checks both directions).
//
// It reads the record once (members): the walk that finds the top-level
// members and the last value of each event field also checks the JSON
// syntax of everything, strictly as encoding/json does, and that the
// strings are UTF-8 (outside strings JSON allows only ASCII), with the
// validator the SQL jobs' scanner uses (internal/jsonscan). Values are
// only checked, never decoded, except the four fields' at the end.
//
// encoding/json rules it keeps: the input is one JSON value (whitespace
// around it allowed) nested at most maxNesting deep; field names match
// case-insensitively under Unicode simple folding ("ID", "Key" with a
// Kelvin sign), escaped or not; of fields named twice the last counts;
// unknown fields of any type are skipped. decodeSlow's own rules: all of
// the text is UTF-8, id/amount/ts are JSON integers that fit int64 (no
// 1.0, no 1e3), key is a string without lone surrogate escapes whose
// decoded form is 1..MaxKeyBytes bytes.
func decodeJSON(data []byte, ev *Event) bool {
	last, ok := members(data)
	if !ok {
		return false
	}
	if ev.ID, ok = intValue(last[0].of(data)); !ok {
		return false
	}
	if ev.Amount, ok = intValue(last[2].of(data)); !ok {
		return false
	}
	if ev.TS, ok = intValue(last[3].of(data)); !ok {
		return false
	}
	lit := last[1].of(data) // the key's literal, quotes included
	if len(lit) < 2 || lit[0] != '"' {
		return false
	}
	key := lit[1 : len(lit)-1] // aliases data, as the fast path's key does
	if bytes.IndexByte(key, '\\') >= 0 {
		var err error
		if key, err = jsonscan.Unescape(nil, key); err != nil {
			return false // a lone surrogate: decodeSlow says so
		}
	}
	if len(key) == 0 || len(key) > MaxKeyBytes {
		return false
	}
	ev.Key = key
	return true
}

// span is where a value lies in the record: data[start:end].
type span struct{ start, end int }

func (s span) of(data []byte) []byte { return data[s.start:s.end] }

// members checks that d is one JSON object, valid JSON and UTF-8 nested
// at most maxNesting deep, with whitespace around it at most, and returns
// the span of the last value of id, key, amount and ts (in bitIndex
// order). It returns false if d is not such an object or one of the four
// is missing.
func members(d []byte) (last [4]span, ok bool) {
	var (
		seen uint8
		esc  bool
		err  error
	)
	i := jsonscan.SkipSpace(d, 0)
	if i == len(d) || d[i] != '{' {
		return last, false
	}
	if i = jsonscan.SkipSpace(d, i+1); i < len(d) && d[i] == '}' {
		return last, false // no members: the four are missing
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return last, false
		}
		name := span{start: i}
		if i, esc, err = jsonscan.ScanString(d, i); err != nil {
			return last, false
		}
		name.end = i
		if i = jsonscan.SkipSpace(d, i); i == len(d) || d[i] != ':' {
			return last, false
		}
		v := span{start: jsonscan.SkipSpace(d, i+1)}
		if v.end, err = jsonscan.SkipValue(d, v.start, 1, maxNesting); err != nil {
			return last, false
		}
		if f := fieldOf(name.of(d), esc); f != 0 {
			seen |= f
			last[bitIndex(f)] = v
		}
		if i = jsonscan.SkipSpace(d, v.end); i < len(d) && d[i] == ',' {
			i = jsonscan.SkipSpace(d, i+1)
			continue
		}
		if i == len(d) || d[i] != '}' {
			return last, false
		}
		return last, seen == allFields && jsonscan.SkipSpace(d, i+1) == len(d)
	}
}

// fieldOf says which event field a JSON member name sets, the way
// encoding/json matches a name to a struct field: exactly, or else equal
// under Unicode simple case folding (strings.EqualFold is that relation for
// valid UTF-8, which the name is), after unescaping. lit is the name's
// string literal, quotes included, checked by jsonscan.ScanString; esc
// says whether it holds escapes.
func fieldOf(lit []byte, esc bool) uint8 {
	name := unsafe.String(unsafe.SliceData(lit[1:]), len(lit)-2)
	switch name {
	case "id":
		return fieldID
	case "key":
		return fieldKey
	case "amount":
		return fieldAmount
	case "ts":
		return fieldTS
	}
	// Only i, k, a, t and their capitals fold to the first letters of the
	// names among ASCII letters (K KELVIN SIGN is not ASCII).
	if len(name) == 0 {
		return 0
	}
	if c := name[0]; c < utf8.RuneSelf && c != '\\' {
		if c |= 0x20; c != 'i' && c != 'k' && c != 'a' && c != 't' {
			return 0
		}
	}
	// A name that unescapes to at most 8 bytes is at most 8 escapes of 6.
	if len(lit) > 2+8*6 {
		return 0
	}
	if esc {
		var buf [2 + 8*6]byte
		unescaped, err := jsonscan.Unescape(buf[:0], lit[1:len(lit)-1])
		if err != nil {
			return 0 // a lone surrogate: encoding/json reads U+FFFD, which folds to no letter
		}
		name = unsafe.String(unsafe.SliceData(unescaped), len(unescaped))
	}
	// Folded forms are at most 2 bytes longer than the ASCII names
	// (K KELVIN SIGN is 3 bytes, ſ LONG S 2, their ASCII pair 1 byte).
	if len(name) > len("amount")+2 {
		return 0
	}
	switch {
	case strings.EqualFold(name, "id"):
		return fieldID
	case strings.EqualFold(name, "key"):
		return fieldKey
	case strings.EqualFold(name, "amount"):
		return fieldAmount
	case strings.EqualFold(name, "ts"):
		return fieldTS
	}
	return 0
}

func bitIndex(f uint8) int {
	switch f {
	case fieldID:
		return 0
	case fieldKey:
		return 1
	case fieldAmount:
		return 2
	}
	return 3
}

// intValue reads a JSON number that is an integer in int64's range. The
// text is a valid JSON value (jsonscan checked), so ParseInt refuses exactly
// fractions, exponents and overflow, as intField does; parseInt, the
// compact path's, takes the common case without it.
func intValue(raw []byte) (int64, bool) {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, false
	}
	if v, n, ok := parseInt(raw); ok && n == len(raw) {
		return v, true
	}
	v, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(raw), len(raw)), 10, 64)
	return v, err == nil
}
