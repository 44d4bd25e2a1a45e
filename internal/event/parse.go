package event

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// maxNesting is encoding/json's nesting limit (its scanner's
// maxNestingDepth): a record nested deeper is not accepted by decodeSlow,
// and gjson has no limit of its own.
const maxNesting = 10000

// Fields of the event, as bits of a set.
const (
	fieldID uint8 = 1 << iota
	fieldKey
	fieldAmount
	fieldTS
	allFields = fieldID | fieldKey | fieldAmount | fieldTS
)

// decodeJSON decodes any JSON form of an event, without allocating unless
// the key, or a member name that may be one of the four, holds escapes. It
// returns false for anything it does not accept, leaving the verdict and
// the reason to decodeSlow; what it accepts, and the event it fills in,
// are exactly decodeSlow's (FuzzDecodeAgreesWithStrict checks both
// directions).
//
// gjson.Valid is the judge of JSON syntax. Around it, one walk over the
// record (members) finds the top-level members and the last value of each
// event field, measures the nesting depth and notes whether any string
// holds a byte that is not ASCII; values are only skipped, never decoded,
// except the four fields' at the end. So a valid record costs two passes:
// the walk and gjson.Valid (a third, utf8.Valid, only if it is not ASCII).
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
	// gjson reads strings; this one aliases data, which is not modified
	// while Decode runs, and no part of it outlives the call (the key is
	// taken from data by offset, or copied).
	if !ok || !gjson.Valid(unsafe.String(unsafe.SliceData(data), len(data))) {
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
	if bytes.IndexByte(lit, '\\') >= 0 {
		if _, lone := loneSurrogate(lit); lone {
			return false
		}
		key = []byte(gjson.Parse(unsafe.String(unsafe.SliceData(lit), len(lit))).Str)
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

// members walks the top-level members of the object that d should be, and
// returns the span of the last value of id, key, amount and ts (in
// bitIndex order). It returns false if one of them is missing, if the
// object nests deeper than maxNesting, if d is not UTF-8 or is not an
// object. It reads any input safely, but its spans are right only for
// valid JSON, so gjson.Valid must accept d too: a string is skipped up to
// its closing quote, an object or array up to its closing bracket, a
// number or literal up to the next delimiter.
func members(d []byte) (last [4]span, ok bool) {
	var seen uint8
	var high byte // the bytes of all strings OR-ed: bit 7 is set if one is not ASCII
	i := skipSpace(d, 0)
	if i == len(d) || d[i] != '{' {
		return last, false
	}
	for i = skipSpace(d, i+1); i < len(d) && d[i] == '"'; {
		name := span{start: i}
		i, high = skipString(d, i+1, high)
		name.end = i
		if i = skipSpace(d, i); i == len(d) || d[i] != ':' {
			return last, false
		}
		v := span{start: skipSpace(d, i+1)}
		switch i = v.start; {
		case i == len(d):
		case d[i] == '"':
			i, high = skipString(d, i+1, high)
		case d[i] == '{' || d[i] == '[':
			if i, high, ok = skipNested(d, i, high); !ok {
				return last, false
			}
		default: // a number, true, false or null
			for i < len(d) && d[i] > ' ' && d[i] != ',' && d[i] != '}' {
				i++
			}
		}
		v.end = i
		if f := fieldOf(name.of(d)); f != 0 {
			seen |= f
			last[bitIndex(f)] = v
		}
		if i = skipSpace(d, i); i < len(d) && d[i] == ',' {
			i = skipSpace(d, i+1)
		} else {
			break
		}
	}
	// Outside strings, gjson.Valid accepts only ASCII.
	if seen != allFields || high >= utf8.RuneSelf && !utf8.Valid(d) {
		return last, false
	}
	return last, true
}

// skipString returns the index after the closing quote of the string whose
// text starts at d[i], and high OR-ed with the bytes of the string. An
// unterminated string ends at len(d).
func skipString(d []byte, i int, high byte) (int, byte) {
	for ; i < len(d); i++ {
		c := d[i]
		high |= c
		switch c {
		case '"':
			return i + 1, high
		case '\\':
			i++
		}
	}
	return len(d), high
}

// skipNested returns the index after the object or array that starts at
// d[i], a member's value, or false if it is nested so deep that the record
// would be deeper than maxNesting.
func skipNested(d []byte, i int, high byte) (int, byte, bool) {
	depth := 1 // the record's object
	for ; i < len(d); i++ {
		switch d[i] {
		case '"':
			i, high = skipString(d, i+1, high)
			i--
		case '{', '[':
			if depth++; depth > maxNesting {
				return i, high, false
			}
		case '}', ']':
			if depth--; depth == 1 {
				return i + 1, high, true
			}
		}
	}
	return len(d), high, true
}

// skipSpace returns the index of the first byte from d[i] on that is not
// JSON whitespace, or len(d).
func skipSpace(d []byte, i int) int {
	for i < len(d) && d[i] <= ' ' && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// fieldOf says which event field a JSON member name sets, the way
// encoding/json matches a name to a struct field: exactly, or else equal
// under Unicode simple case folding (strings.EqualFold is that relation for
// valid UTF-8, which the record is by then), after unescaping. lit is the
// name's string literal, quotes included.
func fieldOf(lit []byte) uint8 {
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
	if bytes.IndexByte(lit, '\\') >= 0 {
		name = gjson.Parse(unsafe.String(unsafe.SliceData(lit), len(lit))).Str // an unescaped copy
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
// text is valid JSON (gjson.Valid checked), so ParseInt refuses exactly
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
