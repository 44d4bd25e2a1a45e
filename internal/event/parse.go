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

// decodeJSON decodes any JSON form of an event with gjson, without
// allocating unless the key holds escapes. It returns false for anything it
// does not accept, leaving the verdict and the reason to decodeSlow; what
// it accepts, and the event it fills in, are exactly decodeSlow's
// (FuzzDecodeAgreesWithStrict checks both directions).
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
	// A '{' or '[' inside a string counts too: the bound only needs to be
	// safe, and a record near 10,000 brackets is left to decodeSlow.
	if bytes.Count(data, []byte{'{'})+bytes.Count(data, []byte{'['}) > maxNesting {
		return false
	}
	if !utf8.Valid(data) {
		return false
	}
	// gjson reads strings; this one aliases data, which is not modified
	// while Decode runs, and no part of it outlives the call (the key is
	// taken from data by offset).
	s := unsafe.String(unsafe.SliceData(data), len(data))
	if !gjson.Valid(s) {
		return false
	}
	root := gjson.Parse(s)
	if !root.IsObject() {
		return false
	}
	var last [4]gjson.Result // the last value of id, key, amount, ts
	var seen uint8
	root.ForEach(func(name, v gjson.Result) bool {
		if f := fieldOf(name.Str); f != 0 {
			seen |= f
			last[bitIndex(f)] = v
		}
		return true
	})
	if seen != allFields {
		return false
	}
	var ok bool
	if ev.ID, ok = intValue(last[0]); !ok {
		return false
	}
	if ev.Amount, ok = intValue(last[2]); !ok {
		return false
	}
	if ev.TS, ok = intValue(last[3]); !ok {
		return false
	}
	k := last[1]
	if k.Type != gjson.String {
		return false
	}
	lit := data[k.Index : k.Index+len(k.Raw)] // the string literal, quotes included
	if _, lone := loneSurrogate(lit); lone {
		return false
	}
	var key []byte
	if bytes.IndexByte(lit, '\\') < 0 {
		key = lit[1 : len(lit)-1] // aliases data, as the fast path's key does
	} else {
		key = []byte(k.Str) // gjson's unescaped copy
	}
	if len(key) == 0 || len(key) > MaxKeyBytes {
		return false
	}
	ev.Key = key
	return true
}

// fieldOf says which event field a JSON member name sets, the way
// encoding/json matches a name to a struct field: exactly, or else equal
// under Unicode simple case folding (strings.EqualFold is that relation for
// valid UTF-8, which the record is by then).
func fieldOf(name string) uint8 {
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
	// Folded forms are at most 2 bytes longer than the ASCII names
	// (K KELVIN SIGN and ſ LONG S are 3 bytes, their ASCII pair 1 byte).
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
// fractions, exponents and overflow, as intField does.
func intValue(v gjson.Result) (int64, bool) {
	if v.Type != gjson.Number {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Raw, 10, 64)
	return n, err == nil
}
