package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/jsonscan"
	"github.com/microbatch/microbatch/internal/reason"
)

// Event is one input record of the built-in job.
type Event struct {
	ID     int64
	Key    []byte // aliases the decoded input on the fast path; copy to keep
	Amount int64
	TS     int64 // unix milliseconds
}

// Limits of what the decoder accepts. A record outside them is rejected with
// a reason (and dead-lettered by the caller), never truncated.
const (
	// MaxRecordBytes is the largest record the decoder looks at.
	MaxRecordBytes = 64 << 10
	// MaxKeyBytes matches the width of mb_totals.k.
	MaxKeyBytes = 255
	// MaxAbsAmount bounds one event's |amount|. It does not keep totals
	// inside int64 (9.2 M events at the bound on one key pass it): totals
	// are exact whatever their size (Aggregator carries, the sinks store
	// DECIMAL or exact decimal text, checkpoint state uses exact.Int).
	MaxAbsAmount = 1_000_000_000_000
)

// DecodeError says why a record is not a valid event. Its message is what
// goes into mb_dead_letters.reason.
type DecodeError struct{ Reason string }

func (e *DecodeError) Error() string { return "decoding event: " + e.Reason }

func reject(format string, args ...any) error {
	return &DecodeError{Reason: fmt.Sprintf(format, args...)}
}

// IsDecodeError reports whether err means "bad input" (dead-letter it)
// rather than a failure of the pipeline.
func IsDecodeError(err error) bool {
	var de *DecodeError
	return errors.As(err, &de)
}

// Decode parses one record. The four fields alone, compact as Generator
// writes them or spaced as json.dumps does, take a fast path (decodeFast);
// any other valid event (escapes, extra and nested fields) takes
// decodeJSON's, which validates and captures in one pass. Neither
// allocates unless the key holds escapes. A record both refuse is left to
// decodeSlow, the encoding/json decoder that defines what is valid and
// gives the reason for rejecting it, so the accepted set, the events and
// the reasons are those of decodeSlow alone. On success ev.Key may alias
// data.
func Decode(data []byte, ev *Event) error {
	switch {
	case len(data) == 0:
		return reject("empty record")
	case len(data) > MaxRecordBytes:
		return reject("record is %d bytes, more than the %d-byte limit", len(data), MaxRecordBytes)
	}
	if !decodeFast(data, ev) && !decodeJSON(data, ev) {
		if err := decodeSlow(data, ev); err != nil {
			return err
		}
	}
	if ev.Amount > MaxAbsAmount || ev.Amount < -MaxAbsAmount {
		return reject("field \"amount\": %d is outside ±%d", ev.Amount, int64(MaxAbsAmount))
	}
	return nil
}

// decodeSlow is the authority on validity: a JSON object with all four
// fields, integers written as JSON numbers (not strings, not 1.0 or 1e3)
// that fit in int64, and a string key.
func decodeSlow(data []byte, ev *Event) error {
	var raw struct {
		ID     json.RawMessage `json:"id"`
		Key    json.RawMessage `json:"key"`
		Amount json.RawMessage `json:"amount"`
		TS     json.RawMessage `json:"ts"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return reject("not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return reject("trailing data after the JSON object")
	}
	if err := checkUTF8(data, raw.Key); err != nil {
		return err
	}
	var err error
	if ev.ID, err = intField("id", raw.ID); err != nil {
		return err
	}
	if ev.Amount, err = intField("amount", raw.Amount); err != nil {
		return err
	}
	if ev.TS, err = intField("ts", raw.TS); err != nil {
		return err
	}
	if len(raw.Key) == 0 {
		return reject("missing field \"key\"")
	}
	var key string
	if raw.Key[0] != '"' || json.Unmarshal(raw.Key, &key) != nil {
		return reject("field \"key\": wrong type: want a JSON string, got %s", clip(raw.Key))
	}
	return setKey(ev, []byte(key))
}

// intField parses a field that must be a JSON integer. The raw text is
// already valid JSON (the decoder checked), so ParseInt only has to refuse
// strings, null, fractions, exponents and overflow.
func intField(name string, raw json.RawMessage) (int64, error) {
	if len(raw) == 0 {
		return 0, reject("missing field %q", name)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, reject("field %q: wrong type or range: want an int64 JSON number, got %s", name, clip(raw))
	}
	return v, nil
}

// utf8Rule is why a record that is not UTF-8 is bad input.
const utf8Rule = "JSON text must be UTF-8, RFC 8259"

// checkUTF8 rejects a record that is not valid UTF-8 and a key that names
// a UTF-16 surrogate on its own ("\ud800"). encoding/json accepts both and
// decodes every such sequence to U+FFFD, so keys that differ only there
// ("page-\xff", "page-\xfe") would become one key and their totals would
// merge. A key that really holds U+FFFD, raw or as "\ufffd", is valid and
// distinct from all others. Lone surrogates elsewhere (an unknown field's
// string) are valid JSON syntax and stay accepted: only the key is kept.
func checkUTF8(data, key []byte) error {
	if !utf8.Valid(key) {
		return reject("field \"key\" is not valid UTF-8 (%s): %s", utf8Rule, clip(key))
	}
	if esc, ok := loneSurrogate(key); ok {
		return reject("field \"key\" holds %s, a UTF-16 surrogate without its pair, which is no character (%s): %s", esc, utf8Rule, clip(key))
	}
	if !utf8.Valid(data) {
		at := 0
		for at < len(data) {
			r, n := utf8.DecodeRune(data[at:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			at += n
		}
		return reject("record is not valid UTF-8: byte 0x%02x at offset %d (%s)", data[at], at, utf8Rule)
	}
	return nil
}

// loneSurrogate finds a \uXXXX escape of a surrogate that is not the high
// half of a pair followed by its low half. lit is a JSON string literal
// that the JSON decoder already checked, so its escapes are well formed.
func loneSurrogate(lit []byte) (string, bool) {
	for i := 0; i+1 < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		i++ // the escaped character, skipped by the loop when not 'u'
		if lit[i] != 'u' || i+4 >= len(lit) {
			continue
		}
		r := jsonscan.HexRune(lit[i+1 : i+5])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if i+6 < len(lit) && lit[i+1] == '\\' && lit[i+2] == 'u' &&
			utf16.DecodeRune(r, jsonscan.HexRune(lit[i+3:i+7])) != utf8.RuneError {
			i += 6
			continue
		}
		return string(lit[i-5 : i+1]), true
	}
	return "", false
}

// clip shortens a value quoted in a reason, escaping bytes that are not
// UTF-8, so that the reason is valid text.
func clip(b []byte) string { return reason.Clip(string(b), 64) }

func setKey(ev *Event, key []byte) error {
	switch {
	case len(key) == 0:
		return reject("field \"key\" is empty")
	case len(key) > MaxKeyBytes:
		return reject("field \"key\" is %d bytes, more than %d", len(key), MaxKeyBytes)
	}
	ev.Key = key
	return nil
}

// decodeFast accepts only the four fields, each once, in any order, with
// integers of up to 18 digits and an ASCII key without escapes: the compact
// form {"id":1,"key":"a","amount":2,"ts":3} and the same with JSON
// whitespace after the colons and commas, as Python's json.dumps writes it
// ({"id": 1, "key": "a", "amount": 2, "ts": 3}). It is several times
// faster than decodeJSON on them. It returns false for anything else
// (whitespace elsewhere too: looking for it at every token would cost the
// compact form), leaving the verdict to decodeJSON and decodeSlow, so it
// can never accept what encoding/json would reject.
func decodeFast(d []byte, ev *Event) bool {
	if len(d) < 2 || d[0] != '{' || d[len(d)-1] != '}' {
		return false
	}
	var seen uint8
	i := 1
	for {
		if i >= len(d) || d[i] != '"' {
			return false
		}
		end := bytes.IndexByte(d[i+1:], '"')
		if end < 0 {
			return false
		}
		name := d[i+1 : i+1+end]
		i += end + 2
		if i >= len(d) || d[i] != ':' {
			return false
		}
		i = jsonscan.SkipSpace(d, i+1)
		var bit uint8
		switch string(name) {
		case "id":
			bit = 1
		case "key":
			bit = 2
		case "amount":
			bit = 4
		case "ts":
			bit = 8
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if bit == 2 {
			if i >= len(d) || d[i] != '"' {
				return false
			}
			j := i + 1
			for j < len(d) && d[j] != '"' {
				if c := d[j]; c < 0x20 || c >= 0x80 || c == '\\' {
					return false
				}
				j++
			}
			if j >= len(d) || j == i+1 || j-i-1 > MaxKeyBytes {
				return false
			}
			ev.Key = d[i+1 : j]
			i = j + 1
		} else {
			v, n, ok := parseInt(d[i:])
			if !ok {
				return false
			}
			switch bit {
			case 1:
				ev.ID = v
			case 4:
				ev.Amount = v
			case 8:
				ev.TS = v
			}
			i += n
		}
		if i >= len(d) {
			return false
		}
		if d[i] == '}' {
			return i == len(d)-1 && seen == 15
		}
		if d[i] != ',' {
			return false
		}
		i = jsonscan.SkipSpace(d, i+1)
	}
}

// parseInt reads a JSON integer (-?(0|[1-9][0-9]*)) that fits in int64.
func parseInt(d []byte) (v int64, n int, ok bool) {
	neg := false
	if n < len(d) && d[n] == '-' {
		neg = true
		n++
	}
	start := n
	var u uint64
	for n < len(d) && d[n] >= '0' && d[n] <= '9' {
		if n-start >= 18 { // leave the overflow edge to the slow path
			return 0, 0, false
		}
		u = u*10 + uint64(d[n]-'0')
		n++
	}
	if n == start || (d[start] == '0' && n-start > 1) {
		return 0, 0, false
	}
	if n < len(d) && (d[n] == '.' || d[n] == 'e' || d[n] == 'E') {
		return 0, 0, false
	}
	if u > math.MaxInt64 {
		return 0, 0, false
	}
	if neg {
		return -int64(u), n, true
	}
	return int64(u), n, true
}

// Append writes ev in the compact canonical form.
func Append(dst []byte, id int64, key string, amount, ts int64) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"key":`...)
	dst = appendJSONString(dst, key)
	dst = append(dst, `,"amount":`...)
	dst = strconv.AppendInt(dst, amount, 10)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '}')
}

// AppendOutput writes one output record of the built-in job's checkpoint
// mode: the event and its key's running count and total after it. The
// total is a JSON integer of any size: it never wraps.
func AppendOutput(dst []byte, id int64, key string, amount, ts, count int64, total exact.Int) []byte {
	dst = Append(dst, id, key, amount, ts)
	dst = append(dst[:len(dst)-1], `,"count":`...)
	dst = strconv.AppendInt(dst, count, 10)
	dst = append(dst, `,"total":`...)
	dst = total.Append(dst)
	return append(dst, '}')
}

// Output is an output record of checkpoint mode, as AppendOutput writes it.
type Output struct {
	ID     int64     `json:"id"`
	Key    string    `json:"key"`
	Amount int64     `json:"amount"`
	TS     int64     `json:"ts"`
	Count  int64     `json:"count"` // the key's events so far, this one included
	Total  exact.Int `json:"total"` // the key's amount so far, this one included
}

// appendJSONString quotes s as JSON (strconv.Quote's Go escapes such as \x01
// are not JSON). Plain printable ASCII, the generator's keys, is copied.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
