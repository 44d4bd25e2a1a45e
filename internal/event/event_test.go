package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/microbatch/microbatch/internal/exact"
)

// want is an expected decoded event (Key as a string for comparison).
type want struct {
	ID     int64
	Key    string
	Amount int64
	TS     int64
}

func (w want) match(ev *Event) bool {
	return ev.ID == w.ID && string(ev.Key) == w.Key && ev.Amount == w.Amount && ev.TS == w.TS
}

func show(ev *Event) string {
	return fmt.Sprintf("{ID:%d Key:%q Amount:%d TS:%d}", ev.ID, ev.Key, ev.Amount, ev.TS)
}

var (
	key255   = strings.Repeat("k", MaxKeyBytes)
	key256   = strings.Repeat("k", MaxKeyBytes+1)
	key255mb = strings.Repeat("é", MaxKeyBytes/2) + "x" // 2*127+1 = 255 bytes, multi-byte
	// 86 escaped 3-byte runes = 258 bytes once unescaped, though the JSON
	// text of the key is much longer: the limit is on the decoded key.
	key258esc = strings.Repeat(`\u20ac`, 86)
)

type validCase struct {
	name string
	in   string
	want want
	fast bool // the fast path must accept it (canonical, compact form)
}

var validCases = []validCase{
	{"canonical", `{"id":1,"key":"k1","amount":250,"ts":1700000000000}`, want{1, "k1", 250, 1700000000000}, true},
	{"canonical reordered", `{"ts":3,"amount":2,"key":"a","id":1}`, want{1, "a", 2, 3}, true},
	{"canonical key first", `{"key":"user-42","id":7,"ts":9,"amount":0}`, want{7, "user-42", 0, 9}, true},
	{"negative values", `{"id":-5,"key":"a","amount":-100,"ts":0}`, want{-5, "a", -100, 0}, true},
	{"minus zero", `{"id":-0,"key":"a","amount":0,"ts":0}`, want{0, "a", 0, 0}, true},
	{"18 digits fast", `{"id":999999999999999999,"key":"a","amount":-999999999999,"ts":-999999999999999999}`, want{999999999999999999, "a", -999999999999, -999999999999999999}, true},
	{"key with punctuation and DEL-free ASCII", `{"id":1,"key":"a b/c:{}[],~","amount":2,"ts":3}`, want{1, "a b/c:{}[],~", 2, 3}, true},
	{"key of MaxKeyBytes", `{"id":1,"key":"` + key255 + `","amount":2,"ts":3}`, want{1, key255, 2, 3}, true},
	{"whitespace", "{ \"id\" : 1 ,\n\t\"key\" : \"a\" , \"amount\" : 2 , \"ts\" : 3 }", want{1, "a", 2, 3}, false},
	{"whitespace after colons and commas", "{\"id\":\t1,\r\n\"key\": \"a\",  \"amount\":\n2, \"ts\": 3}", want{1, "a", 2, 3}, true},
	{"leading and trailing whitespace", " \n{\"id\":1,\"key\":\"a\",\"amount\":2,\"ts\":3}\r\n ", want{1, "a", 2, 3}, false},
	{"json.dumps", `{"id": 1, "key": "k1", "amount": 250, "ts": 1700000000000}`, want{1, "k1", 250, 1700000000000}, true},
	{"key escaped", `{"id": 1, "key": "k\u00e9", "amount": 2, "ts": 3}`, want{1, "ké", 2, 3}, false},
	{"unicode key", `{"id":1,"key":"ключ-🔑","amount":2,"ts":3}`, want{1, "ключ-🔑", 2, 3}, false},
	{"escaped key", `{"id":1,"key":"a\"b\\c\/d\u00e9\n","amount":2,"ts":3}`, want{1, "a\"b\\c/dé\n", 2, 3}, false},
	{"escaped field name", `{"\u0069d":1,"key":"a","amount":2,"ts":3}`, want{1, "a", 2, 3}, false},
	{"multi-byte key of MaxKeyBytes", `{"id":1,"key":"` + key255mb + `","amount":2,"ts":3}`, want{1, key255mb, 2, 3}, false},
	{"extra unknown fields", `{"id":1,"v":2,"key":"a","meta":{"x":[1,2,{"y":null}]},"amount":2,"ts":3,"z":"s"}`, want{1, "a", 2, 3}, false},
	{"max int64", `{"id":9223372036854775807,"key":"a","amount":2,"ts":3}`, want{math.MaxInt64, "a", 2, 3}, false},
	{"min int64", `{"id":1,"key":"a","amount":2,"ts":-9223372036854775808}`, want{1, "a", 2, math.MinInt64}, false},
	// UTF-8: what is valid text stays exactly what it is.
	{"key with a real U+FFFD", canon("1", "\"page-\uFFFD\"", "2", "3"), want{1, "page-\uFFFD", 2, 3}, false},
	{"key with U+FFFD escaped", canon("1", `"page-\ufffd"`, "2", "3"), want{1, "page-\uFFFD", 2, 3}, false},
	{"key with an escaped surrogate pair", canon("1", `"\ud83d\udd11"`, "2", "3"), want{1, "🔑", 2, 3}, false},
	{"key in NFC", canon("1", "\"caf\u00e9\"", "2", "3"), want{1, "caf\u00e9", 2, 3}, false},
	{"key in NFD", canon("1", "\"cafe\u0301\"", "2", "3"), want{1, "cafe\u0301", 2, 3}, false},
	{"lone surrogate in an unknown field", `{"id":1,"key":"a","amount":2,"ts":3,"note":"\ud800"}`, want{1, "a", 2, 3}, false},
}

type rejectCase struct {
	name   string
	in     string
	reason []string // substrings the DecodeError reason must contain
}

func canon(id, key, amount, ts string) string {
	return `{"id":` + id + `,"key":` + key + `,"amount":` + amount + `,"ts":` + ts + `}`
}

var bigRecord = func() string {
	// A syntactically valid event padded to 1,000,000 bytes.
	head := `{"id":1,"key":"a","amount":2,"ts":3,"pad":"`
	tail := `"}`
	return head + strings.Repeat("x", 1_000_000-len(head)-len(tail)) + tail
}()

var rejectCases = []rejectCase{
	{"empty", ``, []string{"empty"}},
	{"not JSON", `hello`, []string{"JSON"}},
	{"truncated object", `{"id":1,"key":"a"`, []string{"JSON"}},
	{"truncated canonical", `{"id":1,"key":"a","amount":2,"ts":`, []string{"JSON"}},
	{"JSON array", `[1,2,3]`, []string{"JSON object"}},
	{"JSON array of event", `[` + canon("1", `"a"`, "2", "3") + `]`, []string{"JSON object"}},
	{"JSON null", `null`, nil},
	{"JSON string", `"{\"id\":1}"`, []string{"JSON object"}},
	{"JSON number", `42`, []string{"JSON object"}},
	{"JSON true", `true`, []string{"JSON object"}},
	{"id as numeric string", canon(`"7"`, `"a"`, "2", "3"), []string{`"id"`}},
	{"id as non-numeric string", canon(`"abc"`, `"a"`, "2", "3"), []string{`"id"`}},
	{"ts as numeric string", canon("1", `"a"`, "2", `"1700000000000"`), []string{`"ts"`}},
	{"id as bool", canon("true", `"a"`, "2", "3"), []string{`"id"`}},
	{"id as object", canon(`{"v":1}`, `"a"`, "2", "3"), []string{`"id"`}},
	{"amount as float", canon("1", `"a"`, "1.5", "3"), []string{`"amount"`}},
	{"amount as 1.0", canon("1", `"a"`, "1.0", "3"), []string{`"amount"`}},
	{"amount with exponent", canon("1", `"a"`, "1e3", "3"), []string{`"amount"`}},
	{"ts as float", canon("1", `"a"`, "2", "3.25"), []string{`"ts"`}},
	{"key as number", canon("1", "5", "2", "3"), []string{`"key"`}},
	{"key as array", canon("1", `["a"]`, "2", "3"), []string{`"key"`}},
	{"key as null", canon("1", "null", "2", "3"), []string{`"key"`}},
	{"missing id", `{"key":"a","amount":2,"ts":3}`, []string{`"id"`}},
	{"missing key", `{"id":1,"amount":2,"ts":3}`, []string{`"key"`}},
	{"missing amount", `{"id":1,"key":"a","ts":3}`, []string{`"amount"`}},
	{"missing ts", `{"id":1,"key":"a","amount":2}`, []string{`"ts"`}},
	{"empty object", `{}`, []string{"missing"}},
	{"key empty", canon("1", `""`, "2", "3"), []string{`"key"`, "empty"}},
	{"key too long", canon("1", `"`+key256+`"`, "2", "3"), []string{`"key"`, "256"}},
	{"key too long once unescaped", canon("1", `"`+key258esc+`"`, "2", "3"), []string{`"key"`, "258"}},
	{"record over MaxRecordBytes", bigRecord, []string{"1000000", strconv.Itoa(MaxRecordBytes)}},
	{"trailing garbage", canon("1", `"a"`, "2", "3") + ` x`, []string{"trailing"}},
	{"two objects", canon("1", `"a"`, "2", "3") + canon("2", `"b"`, "2", "3"), []string{"trailing"}},
	{"trailing comma", canon("1", `"a"`, "2", "3") + `,`, []string{"trailing"}},
	{"trailing close brace", canon("1", `"a"`, "2", "3") + `}`, []string{"trailing"}},
	{"trailing close bracket", canon("1", `"a"`, "2", "3") + `]`, []string{"trailing"}},
	{"id overflows int64", canon("9223372036854775808", `"a"`, "2", "3"), []string{`"id"`}},
	{"amount underflows int64", canon("1", `"a"`, "-9223372036854775809", "3"), []string{`"amount"`}},
	{"ts far out of range", canon("1", `"a"`, "2", "123456789012345678901234567890"), []string{`"ts"`}},
	{"leading zero", canon("01", `"a"`, "2", "3"), []string{"JSON"}},
	{"plus sign", canon("+1", `"a"`, "2", "3"), []string{"JSON"}},
	{"unterminated key", `{"id":1,"key":"a,"amount":2,"ts":3}`, []string{"JSON"}},
	{"raw control char in key", "{\"id\":1,\"key\":\"a\x01b\",\"amount\":2,\"ts\":3}", []string{"JSON"}},
	{"single quotes", `{'id':1,'key':'a','amount':2,'ts':3}`, []string{"JSON"}},
	// Not UTF-8: encoding/json would read each of these keys as "page-\uFFFD"
	// (or "\uFFFD"), merging them with one another.
	{"key with byte 0xff", canon("1", "\"page-\xff\"", "2", "3"), []string{`"key"`, "UTF-8", `page-\xff`}},
	{"key with byte 0xfe", canon("1", "\"page-\xfe\"", "2", "3"), []string{`"key"`, "UTF-8", `page-\xfe`}},
	{"key with a truncated sequence", canon("1", "\"caf\xc3\"", "2", "3"), []string{`"key"`, "UTF-8", `caf\xc3`}},
	{"key with an overlong encoding", canon("1", "\"a\xc0\xafb\"", "2", "3"), []string{`"key"`, "UTF-8"}},
	{"key with a surrogate in UTF-8 bytes", canon("1", "\"\xed\xa0\x80\"", "2", "3"), []string{`"key"`, "UTF-8"}},
	{"key with a lone high surrogate escape", canon("1", `"page-\ud800"`, "2", "3"), []string{`"key"`, `\ud800`, "surrogate"}},
	{"key with a lone low surrogate escape", canon("1", `"\uDC00page"`, "2", "3"), []string{`"key"`, `\uDC00`, "surrogate"}},
	{"key with a high surrogate before a letter", canon("1", `"\ud83dx"`, "2", "3"), []string{`"key"`, `\ud83d`}},
	{"key with two high surrogates", canon("1", `"\ud83d\ud83d"`, "2", "3"), []string{`"key"`, `\ud83d`}},
	{"key with a reversed pair", canon("1", `"\udd11\ud83d"`, "2", "3"), []string{`"key"`, `\udd11`}},
	{"key with a surrogate after a good pair", canon("1", `"\ud83d\udd11\ud800"`, "2", "3"), []string{`"key"`, `\ud800`}},
	{"another field with byte 0xff", `{"id":1,"key":"a","amount":2,"ts":3,"note":"` + "\xff\"}", []string{"UTF-8", "0xff", "offset 44"}},
	{"key not a string, not UTF-8", canon("1", "[\"\xff\"]", "2", "3"), []string{`"key"`, `\xff`}},
}

func TestDecodeValid(t *testing.T) {
	for _, tc := range validCases {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.in)
			var ev Event
			if err := Decode(data, &ev); err != nil {
				t.Fatalf("Decode(%q) = %v, want success", tc.in, err)
			}
			if !tc.want.match(&ev) {
				t.Fatalf("Decode(%q) = %s, want %+v", tc.in, show(&ev), tc.want)
			}
			var fev Event
			if got := decodeFast(data, &fev); got != tc.fast {
				t.Fatalf("decodeFast(%q) = %v, want %v", tc.in, got, tc.fast)
			}
			if tc.fast && !tc.want.match(&fev) {
				t.Fatalf("decodeFast(%q) = %s, want %+v", tc.in, show(&fev), tc.want)
			}
			var sev Event
			if err := decodeSlow(data, &sev); err != nil || !tc.want.match(&sev) {
				t.Fatalf("decodeSlow(%q) = %s, %v; want %+v", tc.in, show(&sev), err, tc.want)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tc := range rejectCases {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.in)
			var ev Event
			err := Decode(data, &ev)
			if err == nil {
				t.Fatalf("Decode(%.200q) = %s, want a DecodeError", tc.in, show(&ev))
			}
			if !IsDecodeError(err) {
				t.Fatalf("IsDecodeError(%v) = false", err)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Reason == "" {
				t.Fatalf("error %v carries no reason", err)
			}
			if !strings.HasPrefix(err.Error(), "decoding event: ") {
				t.Errorf("error %q does not start with %q", err, "decoding event: ")
			}
			for _, s := range tc.reason {
				if !strings.Contains(de.Reason, s) {
					t.Errorf("reason %q does not contain %q", de.Reason, s)
				}
			}
			if !utf8.ValidString(de.Reason) {
				t.Errorf("reason %q is not valid UTF-8", de.Reason)
			}
			if len(data) <= MaxRecordBytes && decodeFast(data, &ev) {
				t.Errorf("decodeFast accepted %.200q", tc.in)
			}
		})
	}
}

func TestIsDecodeError(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("decoding event: looks like one"), false},
		{&DecodeError{Reason: "x"}, true},
		{fmt.Errorf("partition 3: %w", &DecodeError{Reason: "x"}), true},
	}
	for _, tc := range tests {
		if got := IsDecodeError(tc.err); got != tc.want {
			t.Errorf("IsDecodeError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestDecodeFastAgreesWithSlow generates canonical records (which the fast
// path must accept) and random mutations of them; whenever the fast path
// accepts, the slow path must accept with the same values.
func TestDecodeFastAgreesWithSlow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ints := []int64{0, 1, -1, 9, 10, -10, 999999999999999999, -999999999999999999,
		100000000000000000, math.MaxInt64, math.MinInt64, math.MaxInt32, 1700000000000}
	randInt := func() int64 {
		if rng.IntN(3) == 0 {
			return ints[rng.IntN(len(ints))]
		}
		return rng.Int64N(2_000_000) - 1_000_000
	}
	const keyChars = "abcXYZ019 _-./:;{}[],~!#$%&'()*+<=>?@^`|"
	randKey := func() string {
		n := 1 + rng.IntN(20)
		if rng.IntN(50) == 0 {
			n = MaxKeyBytes - 1 + rng.IntN(3) // around the limit
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = keyChars[rng.IntN(len(keyChars))]
		}
		return string(b)
	}
	mutate := func(b []byte) []byte {
		b = bytes.Clone(b)
		for range 1 + rng.IntN(3) {
			if len(b) == 0 {
				return b
			}
			i := rng.IntN(len(b))
			const alphabet = "{}\":,-0123456789 .eE\\u\x00\x7f\xc3\xa9idkeyamountts"
			switch rng.IntN(4) {
			case 0: // replace
				b[i] = alphabet[rng.IntN(len(alphabet))]
			case 1: // insert
				b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
			case 2: // delete
				b = append(b[:i], b[i+1:]...)
			case 3: // duplicate a span
				j := i + rng.IntN(len(b)-i)
				b = append(b[:j], append(bytes.Clone(b[i:j]), b[j:]...)...)
			}
		}
		return b
	}

	// Whitespace after the colons and commas: none (compact) half of the
	// time, else json.dumps's or any JSON whitespace.
	spaces := []string{"", "", "", " ", " ", "\t", "\n", "\r\n", "  \t"}
	var ws func() string
	var canonical, mutated, fastAccepted int
	for n := range 20000 {
		if ws = func() string { return "" }; n%2 == 1 {
			ws = func() string { return spaces[rng.IntN(len(spaces))] }
		}
		w := want{randInt(), randKey(), randInt(), randInt()}
		fields := []string{
			`"id":` + ws() + strconv.FormatInt(w.ID, 10),
			`"key":` + ws() + `"` + w.Key + `"`,
			`"amount":` + ws() + strconv.FormatInt(w.Amount, 10),
			`"ts":` + ws() + strconv.FormatInt(w.TS, 10),
		}
		rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
		rec := []byte("{" + fields[0] + "," + ws() + fields[1] + "," + ws() + fields[2] + "," + ws() + fields[3] + "}")

		// Unmutated: the fast path takes it, spaced or not, unless a
		// number has 19 digits or the key is over the limit (both left to
		// the slow path).
		var fev Event
		fastOK := decodeFast(rec, &fev)
		wantFast := len(w.Key) <= MaxKeyBytes
		for _, v := range []int64{w.ID, w.Amount, w.TS} {
			if v >= 1e18 || v <= -1e18 { // 19 digits
				wantFast = false
			}
		}
		if fastOK != wantFast {
			t.Fatalf("decodeFast(%q) = %v, want %v", rec, fastOK, wantFast)
		}
		if fastOK {
			canonical++
			if !w.match(&fev) {
				t.Fatalf("decodeFast(%q) = %s, want %+v", rec, show(&fev), w)
			}
		}
		var ev Event
		valid := len(w.Key) <= MaxKeyBytes && w.Amount <= MaxAbsAmount && w.Amount >= -MaxAbsAmount
		if err := Decode(rec, &ev); (err == nil) != valid || (err == nil && !w.match(&ev)) {
			t.Fatalf("Decode(%q) = %s, %v; want %+v", rec, show(&ev), err, w)
		}

		m := mutate(rec)
		mutated++
		var mf Event
		if !decodeFast(m, &mf) {
			continue
		}
		fastAccepted++
		var ms Event
		if err := decodeSlow(m, &ms); err != nil {
			t.Fatalf("decodeFast accepted %q as %s, decodeSlow rejected it: %v", m, show(&mf), err)
		}
		if mf.ID != ms.ID || !bytes.Equal(mf.Key, ms.Key) || mf.Amount != ms.Amount || mf.TS != ms.TS {
			t.Fatalf("%q: decodeFast = %s, decodeSlow = %s", m, show(&mf), show(&ms))
		}
	}
	if canonical < 10000 || fastAccepted == 0 {
		t.Fatalf("property test is vacuous: %d canonical records and %d of %d mutations took the fast path",
			canonical, fastAccepted, mutated)
	}
	t.Logf("%d canonical records, %d/%d mutations accepted by the fast path", canonical, fastAccepted, mutated)
}

// FuzzDecode checks that Decode never panics, that every rejection is a
// DecodeError, that an accepted key is a valid, non-empty, bounded UTF-8
// string, and that the fast path never accepts what the slow path rejects
// or reads different values.
func FuzzDecode(f *testing.F) {
	for _, tc := range validCases {
		f.Add([]byte(tc.in))
	}
	for _, tc := range rejectCases {
		if len(tc.in) <= 2*MaxRecordBytes {
			f.Add([]byte(tc.in))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		var ev Event
		err := Decode(data, &ev)
		if !bytes.Equal(data, orig) {
			t.Fatalf("Decode modified its input")
		}
		if err != nil {
			if !IsDecodeError(err) {
				t.Fatalf("Decode(%q) returned a non-DecodeError: %v", data, err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("Decode(%q): reason %q is not valid UTF-8", data, err)
			}
		} else {
			switch {
			case !utf8.Valid(data):
				t.Fatalf("Decode(%q) accepted a record that is not UTF-8", data)
			case len(ev.Key) == 0:
				t.Fatalf("Decode(%q) accepted an empty key", data)
			case len(ev.Key) > MaxKeyBytes:
				t.Fatalf("Decode(%q) accepted a %d-byte key", data, len(ev.Key))
			case !utf8.Valid(ev.Key):
				t.Fatalf("Decode(%q) accepted key %q, not valid UTF-8", data, ev.Key)
			}
		}
		if len(data) > MaxRecordBytes {
			return
		}
		var fev Event
		if !decodeFast(data, &fev) {
			return
		}
		if err != nil && fev.Amount <= MaxAbsAmount && fev.Amount >= -MaxAbsAmount {
			t.Fatalf("decodeFast accepted %q but Decode rejected it: %v", data, err)
		}
		var sev Event
		if err := decodeSlow(data, &sev); err != nil {
			t.Fatalf("decodeFast accepted %q as %s, decodeSlow rejected it: %v", data, show(&fev), err)
		}
		if fev.ID != sev.ID || !bytes.Equal(fev.Key, sev.Key) || fev.Amount != sev.Amount || fev.TS != sev.TS {
			t.Fatalf("%q: decodeFast = %s, decodeSlow = %s", data, show(&fev), show(&sev))
		}
	})
}

// FuzzDecodeStrict checks the decoder's promise that what it accepts is
// exactly valid JSON with the right field types: an accepted record is
// valid JSON, an object, and id/amount/ts are JSON numbers (not strings).
// Its seeds are valid records only; rejections have to be found.
func FuzzDecodeStrict(f *testing.F) {
	for _, tc := range validCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev Event
		if Decode(data, &ev) != nil {
			return
		}
		if !json.Valid(data) || !utf8.Valid(data) {
			t.Fatalf("Decode accepted %q, which is not valid JSON text (UTF-8)", data)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatalf("Decode accepted %q, which is not a JSON object: %v", data, err)
		}
		for name, raw := range obj {
			switch strings.ToLower(name) {
			case "id", "amount", "ts":
				if c := bytes.TrimSpace(raw); len(c) == 0 || (c[0] != '-' && (c[0] < '0' || c[0] > '9')) {
					t.Fatalf("Decode accepted %q: field %q is %s, not a JSON number", data, name, raw)
				}
			case "key":
				if c := bytes.TrimSpace(raw); len(c) == 0 || c[0] != '"' {
					t.Fatalf("Decode accepted %q: field %q is %s, not a JSON string", data, name, raw)
				}
			}
		}
	})
}

func TestAppendRoundTripFast(t *testing.T) {
	tests := []want{
		{0, "k0", 1, 0},
		{1, "k1", 1000, 1700000000000},
		{-1, "a", -1, -1},
		{999999999999999999, "key with spaces", -999999999999999999, 123},
		{42, key255, 7, 8},
		{42, "{}[],:~", 7, 8},
	}
	for _, w := range tests {
		t.Run(w.Key[:min(len(w.Key), 16)], func(t *testing.T) {
			rec := Append([]byte("prefix"), w.ID, w.Key, w.Amount, w.TS)
			if !bytes.HasPrefix(rec, []byte("prefix")) {
				t.Fatalf("Append dropped dst: %q", rec)
			}
			rec = rec[len("prefix"):]
			var ev Event
			if !decodeFast(rec, &ev) {
				t.Fatalf("decodeFast rejected Append output %q", rec)
			}
			if !w.match(&ev) {
				t.Fatalf("Append/decodeFast round trip: got %s, want %+v (record %q)", show(&ev), w, rec)
			}
			if testing.AllocsPerRun(100, func() { decodeFast(rec, &ev) }) != 0 {
				t.Errorf("decodeFast allocates on %q", rec)
			}
		})
	}
}

// TestAppendRoundTripAnyKey: Append promises the canonical JSON form for any
// key, so whatever it writes must decode back (on any path) to the same
// values.
func TestAppendRoundTripAnyKey(t *testing.T) {
	tests := []struct {
		name string
		w    want
	}{
		{"extreme ints", want{math.MinInt64, "a", MaxAbsAmount, math.MinInt64}},
		{"lowest amount", want{math.MaxInt64, "a", -MaxAbsAmount, math.MaxInt64}},
		{"quote and backslash", want{1, `a"b\c`, 2, 3}},
		{"unicode", want{1, "ключ-🔑", 2, 3}},
		{"tab and newline", want{1, "a\tb\nc", 2, 3}},
		{"U+2028", want{1, "a\u2028b", 2, 3}},
		{"control char 0x01", want{1, "a\x01b", 2, 3}},
		{"vertical tab", want{1, "a\vb", 2, 3}},
		{"DEL", want{1, "a\x7fb", 2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := Append(nil, tc.w.ID, tc.w.Key, tc.w.Amount, tc.w.TS)
			if !json.Valid(rec) {
				t.Errorf("Append wrote invalid JSON: %q", rec)
			}
			var ev Event
			if err := Decode(rec, &ev); err != nil {
				t.Fatalf("Decode(Append(...) = %q): %v", rec, err)
			}
			if !tc.w.match(&ev) {
				t.Fatalf("round trip: got %s, want %+v", show(&ev), tc.w)
			}
		})
	}
}

func TestAggregator(t *testing.T) {
	type in struct {
		key    string
		amount int64
	}
	tests := []struct {
		name   string
		events []in
		want   []Total
	}{
		{"empty", nil, nil},
		{"one", []in{{"a", 5}}, []Total{{"a", 1, 5}}},
		{"first-seen order and sums", []in{{"b", 1}, {"a", 2}, {"b", 3}, {"c", -4}, {"a", 10}},
			[]Total{{"b", 2, 4}, {"a", 2, 12}, {"c", 1, -4}}},
		{"keys differ by case and trailing space", []in{{"a", 1}, {"A", 2}, {"a ", 3}, {"a", 4}},
			[]Total{{"a", 2, 5}, {"A", 1, 2}, {"a ", 1, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAggregator()
			buf := make([]byte, 0, 64)
			for _, e := range tc.events {
				// The key aliases a reused buffer, as on the decoder's fast path.
				buf = append(buf[:0], e.key...)
				a.Add(&Event{Key: buf, Amount: e.amount})
				for i := range buf {
					buf[i] = '!'
				}
			}
			got := a.Totals()
			if a.Len() != len(tc.want) || len(got) != len(tc.want) {
				t.Fatalf("Len() = %d, len(Totals()) = %d, want %d: %+v", a.Len(), len(got), len(tc.want), got)
			}
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Errorf("Totals()[%d] = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
			a.Reset()
			if a.Len() != 0 || len(a.Totals()) != 0 {
				t.Fatalf("after Reset: Len() = %d, Totals() = %+v", a.Len(), a.Totals())
			}
			// Reusable after Reset, with no memory of earlier sums.
			a.Add(&Event{Key: []byte("a"), Amount: 7})
			a.Add(&Event{Key: []byte("z"), Amount: 1})
			if got := a.Totals(); len(got) != 2 || got[0] != (Total{"a", 1, 7}) || got[1] != (Total{"z", 1, 1}) {
				t.Fatalf("after Reset and Add: %+v", got)
			}
		})
	}
}

func TestAggregatorAddExistingKeyDoesNotAllocate(t *testing.T) {
	a := NewAggregator()
	for i := range 100 {
		a.Add(&Event{Key: []byte("key-" + strconv.Itoa(i)), Amount: 1})
	}
	// A different backing array than the stored key, as a new record would have.
	ev := &Event{Key: []byte("key-57"), Amount: 2}
	allocs := testing.AllocsPerRun(1000, func() { a.Add(ev) })
	if allocs != 0 {
		t.Fatalf("Add of an existing key: %v allocations per run, want 0", allocs)
	}
	if a.Len() != 100 {
		t.Fatalf("Len() = %d, want 100", a.Len())
	}
	for _, tt := range a.Totals() {
		if tt.Key == "key-57" && tt.Events != 1002 { // 1 + 1000 runs + 1 warm-up
			t.Fatalf("key-57 counted %d events, want 1002", tt.Events)
		}
	}
}

func TestGeneratorDeterministic(t *testing.T) {
	tests := []struct {
		seed  uint64
		nkeys int
		count int
	}{
		{1, 10, 1000},
		{42, 1, 100},
		{0, 1000, 5000},
		{math.MaxUint64, 3, 300},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("seed=%d/keys=%d", tc.seed, tc.nkeys), func(t *testing.T) {
			g1, g2 := NewGenerator(tc.seed, tc.nkeys), NewGenerator(tc.seed, tc.nkeys)
			other := NewGenerator(tc.seed+1, tc.nkeys)
			keys := make(map[string]bool)
			differs := false
			for i := range tc.count {
				id1, k1, a1 := g1.Next()
				id2, k2, a2 := g2.Next()
				if id1 != id2 || k1 != k2 || a1 != a2 {
					t.Fatalf("event %d: (%d,%q,%d) vs (%d,%q,%d) from the same seed", i, id1, k1, a1, id2, k2, a2)
				}
				if id1 != int64(i) {
					t.Fatalf("event %d has id %d", i, id1)
				}
				if a1 < 1 || a1 > 1000 {
					t.Fatalf("event %d amount %d outside 1..1000", i, a1)
				}
				n, err := strconv.Atoi(strings.TrimPrefix(k1, "k"))
				if !strings.HasPrefix(k1, "k") || err != nil || n < 0 || n >= tc.nkeys {
					t.Fatalf("event %d key %q outside k0..k%d", i, k1, tc.nkeys-1)
				}
				keys[k1] = true
				_, ko, ao := other.Next()
				if ko != k1 || ao != a1 {
					differs = true
				}
			}
			if !differs {
				t.Errorf("seed %d and %d produced the same sequence", tc.seed, tc.seed+1)
			}
			if tc.nkeys <= 10 && len(keys) != tc.nkeys {
				t.Errorf("used %d of %d keys in %d events", len(keys), tc.nkeys, tc.count)
			}
		})
	}
}

func TestGeneratorClampsKeys(t *testing.T) {
	for _, n := range []int{0, -5} {
		g := NewGenerator(7, n)
		for range 50 {
			if _, k, _ := g.Next(); k != "k0" {
				t.Fatalf("NewGenerator(7, %d) produced key %q, want only k0", n, k)
			}
		}
	}
}

func TestExpectedTotals(t *testing.T) {
	tests := []struct {
		seed  uint64
		nkeys int
		count int64
	}{
		{1, 10, 0},
		{1, 10, 1},
		{1, 10, 1000},
		{99, 1000, 20000},
		{3, 0, 10},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("seed=%d/keys=%d/n=%d", tc.seed, tc.nkeys, tc.count), func(t *testing.T) {
			g := NewGenerator(tc.seed, tc.nkeys)
			var sum Expected
			for range tc.count {
				_, _, amount := g.Next()
				sum.Events++
				sum.Amount += amount
			}
			if got := ExpectedTotals(tc.seed, tc.nkeys, tc.count); got != sum {
				t.Fatalf("ExpectedTotals = %+v, summing Next gives %+v", got, sum)
			}
			if tc.count > 0 && sum.Amount < tc.count {
				t.Fatalf("amounts are 1..1000, yet %d events sum to %d", tc.count, sum.Amount)
			}
		})
	}
}

func benchRecords(n, nkeys int) [][]byte {
	g := NewGenerator(1, nkeys)
	recs := make([][]byte, n)
	for i := range recs {
		id, k, a := g.Next()
		recs[i] = Append(nil, id, k, a, 1700000000000+int64(i))
	}
	return recs
}

func BenchmarkDecode(b *testing.B)     { benchDecode(b, Decode) }
func BenchmarkDecodeSlow(b *testing.B) { benchDecode(b, decodeSlow) }

// benchDecode decodes canonical records with decode (the fast path, or the
// encoding/json path it falls back to).
func benchDecode(b *testing.B, decode func([]byte, *Event) error) {
	recs := benchRecords(1024, 1000)
	var ev Event
	b.ReportAllocs()
	b.SetBytes(int64(len(recs[0])))
	i := 0
	for b.Loop() {
		if err := decode(recs[i&1023], &ev); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkDecodeAggregate decodes and sums one partition's batch, per
// batch size (1,000 keys). The aggregator is reused across batches, as a
// task's is across attempts.
func BenchmarkDecodeAggregate(b *testing.B) {
	for _, size := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			recs := benchRecords(size, 1000)
			a := NewAggregator()
			var ev Event
			b.ReportAllocs()
			for b.Loop() {
				a.Reset()
				for _, r := range recs {
					if err := Decode(r, &ev); err != nil {
						b.Fatal(err)
					}
					a.Add(&ev)
				}
				if a.Len() == 0 || a.Len() > 1000 {
					b.Fatalf("%d keys, want 1..1000", a.Len())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/event")
		})
	}
}

// BenchmarkAppendOutput encodes checkpoint mode's output record.
func BenchmarkAppendOutput(b *testing.B) {
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendOutput(buf[:0], 123456789, "key-0042", -4711, 1764489600000, 1234, exact.New(987654))
	}
}

// TestDecodeAmountRange: amounts beyond ±MaxAbsAmount are rejected on both
// paths, so that sums can't overflow the totals' BIGINT and stop the job.
func TestDecodeAmountRange(t *testing.T) {
	for _, amount := range []int64{MaxAbsAmount + 1, -MaxAbsAmount - 1, math.MaxInt64, math.MinInt64} {
		for _, rec := range []string{
			fmt.Sprintf(`{"id":1,"key":"k","amount":%d,"ts":2}`, amount),
			fmt.Sprintf(`{ "id": 1, "key": "k", "amount": %d, "ts": 2 }`, amount),
		} {
			var ev Event
			err := Decode([]byte(rec), &ev)
			if err == nil || !strings.Contains(err.Error(), `"amount"`) {
				t.Errorf("Decode(%s) = %v, want a rejection naming amount", rec, err)
			}
		}
	}
	var ev Event
	if err := Decode([]byte(fmt.Sprintf(`{"id":1,"key":"k","amount":%d,"ts":2}`, -MaxAbsAmount)), &ev); err != nil || ev.Amount != -MaxAbsAmount {
		t.Errorf("Decode at the bound: %v, amount %d", err, ev.Amount)
	}
}
