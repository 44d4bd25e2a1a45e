package event

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// The workloads of the decoder benchmark and the differential test: what
// `produce --format` writes (compact, spaced as Python's json.dumps writes
// it, wide), and a wide record of another producer's shape (arrays,
// fractions, two levels of nesting, fields in varying order).

func compactRecords(n int) [][]byte { return benchRecords(n, 1000) }

// formatRecords are records as `produce --format f` writes them.
func formatRecords(f Format) func(n int) [][]byte {
	return func(n int) [][]byte {
		g := NewGenerator(2, 1000)
		recs := make([][]byte, n)
		for i := range recs {
			id, k, a := g.Next()
			recs[i] = AppendFormat(nil, f, 2, id, k, a, 1700000000000+int64(i))
		}
		return recs
	}
}

var workloads = []struct {
	name string
	recs func(n int) [][]byte
}{
	{"compact", compactRecords},
	{"spaced", formatRecords(FormatSpaced)},
	{"wide", OtherProducerWide}, // arrays, fractions, two levels of nesting
	{"wide-produced", formatRecords(FormatWide)},
}

// decodeStrict is Decode by encoding/json alone (decodeSlow) within
// Decode's limits: what Decode must agree with, whichever of its faster
// paths takes a record.
func decodeStrict(data []byte, ev *Event) error {
	switch {
	case len(data) == 0:
		return reject("empty record")
	case len(data) > MaxRecordBytes:
		return reject("record is %d bytes, more than the %d-byte limit", len(data), MaxRecordBytes)
	}
	if err := decodeSlow(data, ev); err != nil {
		return err
	}
	if ev.Amount > MaxAbsAmount || ev.Amount < -MaxAbsAmount {
		return reject("field \"amount\": %d is outside ±%d", ev.Amount, int64(MaxAbsAmount))
	}
	return nil
}

func sameEvent(a, b *Event) bool {
	return a.ID == b.ID && bytes.Equal(a.Key, b.Key) && a.Amount == b.Amount && a.TS == b.TS
}

// deep nests a valid event's extra field n levels deep.
func deep(n int) string {
	return `{"id":1,"key":"a","amount":2,"ts":3,"x":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`
}

// edgeCases are records where a JSON parser is likely to differ from
// encoding/json plus decodeSlow's rules.
var edgeCases = []string{
	// Field names: encoding/json matches them case-insensitively, under
	// Unicode simple folding, after unescaping; the last of a name wins.
	`{"ID":1,"Key":"a","AMOUNT":2,"Ts":3}`,
	"{\"id\":1,\"\u212aey\":\"kelvin\",\"amount\":2,\"t\u017f\":3}", // K KELVIN SIGN, ſ LONG S
	"{\"\u0130d\":1,\"key\":\"a\",\"amount\":2,\"ts\":3}",           // İ does not fold to i
	`{"\u0069\u0044":1,"\u004bey":"a","amount":2,"ts":3}`,
	`{"id":1,"id":2,"key":"a","amount":2,"ts":3}`,
	`{"id":1,"ID":"x","key":"a","amount":2,"ts":3}`,
	`{"id":"x","Id":7,"key":"a","amount":2,"ts":3}`,
	`{"id":1,"key":"a","key":"b","amount":2,"ts":3}`,
	`{"id":1,"key":"a","KEY":5,"amount":2,"ts":3}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"ts":null}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"id":1e3}`,
	`{"id ":1,"key":"a","amount":2,"ts":3}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"":0}`,
	// Numbers.
	canon("-0", `"a"`, "-0", "0"),
	canon("1e3", `"a"`, "2", "3"),
	canon("1E3", `"a"`, "2", "3"),
	canon("1.0", `"a"`, "2", "3"),
	canon("-1.5e-3", `"a"`, "2", "3"),
	canon("01", `"a"`, "2", "3"),
	canon("-01", `"a"`, "2", "3"),
	canon("-", `"a"`, "2", "3"),
	canon("1.", `"a"`, "2", "3"),
	canon(".5", `"a"`, "2", "3"),
	canon("0x10", `"a"`, "2", "3"),
	canon("Infinity", `"a"`, "2", "3"),
	canon("NaN", `"a"`, "2", "3"),
	canon("9223372036854775807", `"a"`, "1000000000000", "-9223372036854775808"),
	canon("9223372036854775808", `"a"`, "2", "3"),
	canon("1", `"a"`, "1000000000001", "3"),
	canon("1", `"a"`, "-1000000000000", "3"),
	canon("99999999999999999999999999999999", `"a"`, "2", "3"),
	// null and wrong types.
	canon("null", `"a"`, "2", "3"),
	canon("1", `null`, "2", "3"),
	canon("1", `"a"`, "2", "true"),
	canon("1", `{"a":1}`, "2", "3"),
	canon("1", `["\ud800"]`, "2", "3"),
	canon("1", `{"\ud800":1}`, "2", "3"),
	canon("[1]", `"a"`, "2", "3"),
	// Keys: escapes, surrogates, limits.
	canon("1", `"\u043a\u043b\u044e\u0447"`, "2", "3"),
	canon("1", `"\ud83d\udd11"`, "2", "3"),
	canon("1", `"\ud800"`, "2", "3"),
	canon("1", `"\ud800\u0041"`, "2", "3"),
	canon("1", `"\u0000"`, "2", "3"),
	canon("1", `"\/\b\f\n\r\t\"\\"`, "2", "3"),
	canon("1", `"\x"`, "2", "3"),
	canon("1", `"\u12"`, "2", "3"),
	canon("1", `"\u12G4"`, "2", "3"),
	canon("1", "\"a\tb\"", "2", "3"),
	canon("1", "\"a\x7fb\"", "2", "3"),
	canon("1", `"`+strings.Repeat(`\u00e9`, 127)+`x"`, "2", "3"),
	canon("1", `"`+strings.Repeat(`\u00e9`, 128)+`"`, "2", "3"),
	canon("1", `"`+strings.Repeat(`\\`, 255)+`"`, "2", "3"),
	canon("1", `"`+strings.Repeat(`\\`, 256)+`"`, "2", "3"),
	`{"id":1,"key":"a","amount":2,"ts":3,"note":"` + "\xff\"}",
	`{"id":1,"key":"a","amount":2,"ts":3,"note":"\ud800"}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"note\ud800":1}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"note":"\u12"}`,
	// Top level, whitespace, trailing data.
	`null`, `[]`, `{}`, `"x"`, `1`, `true`, ` `, "\t\r\n",
	"\ufeff" + canon("1", `"a"`, "2", "3"),
	" \t\r\n" + canon("1", `"a"`, "2", "3") + " \t\r\n",
	"\v" + canon("1", `"a"`, "2", "3"),
	canon("1", `"a"`, "2", "3") + "\x00",
	canon("1", `"a"`, "2", "3") + "\u00a0",
	canon("1", `"a"`, "2", "3") + ` {}`,
	canon("1", `"a"`, "2", "3") + `,`,
	`{"id":1,"key":"a","amount":2,"ts":3,}`,
	`{,"id":1,"key":"a","amount":2,"ts":3}`,
	`{"id":1,"key":"a","amount":2,"ts":3`,
	`{"id":1 "key":"a","amount":2,"ts":3}`,
	`{"id"::1,"key":"a","amount":2,"ts":3}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[1,2,]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[,]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":tru}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":nul}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{"a"}}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{"a":}}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{1:2}}`,
	// Nesting: encoding/json stops at 10,000; brackets inside strings do
	// not nest.
	deep(300), deep(301), deep(10000), deep(10001),
	`{"id":1,"key":"a","amount":2,"ts":3,"x":"` + strings.Repeat("[", 10001) + `"}`,
	`{"id":1,"key":"` + strings.Repeat("{", 200) + `","amount":2,"ts":3,"x":["` + strings.Repeat("]", 10001) + `"]}`,
	// What the one-pass validator checks in values it only skips: numbers,
	// escapes, control characters, UTF-8 and brackets inside nested values.
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[01]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{"a":-0}}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[1.]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[.5]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[1e]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{"a":[1e+5,-1E-0]}}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":["\u12"]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{"\u12G4":1}}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{"a":"\udc00\ud800"}}`,
	"{\"id\":1,\"key\":\"a\",\"amount\":2,\"ts\":3,\"x\":[\"a\x01\"]}",
	"{\"id\":1,\"key\":\"a\",\"amount\":2,\"ts\":3,\"x\":{\"a\x1f\":1}}",
	"{\"id\":1,\"key\":\"a\",\"amount\":2,\"ts\":3,\"x\":[\"\xc3\"]}",
	"{\"id\":1,\"key\":\"a\",\"amount\":2,\"ts\":3,\"x\":[\"\xed\xa0\x80\"]}",
	"{\"id\":1,\"key\":\"a\",\"amount\":2,\"ts\":3,\"x\":[1,\xff]}",
	"{\"id\":1,\"key\":\"a\",\"amount\":2,\"ts\":3}\xff",
	"{\"id\":1,\"key\":\"a\xe9\",\"amount\":2,\"ts\":3}",
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":{]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[[true,false,null],{"a":{}}]}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[tRue]}`,
	`{"id":1,"key":"a","amount":2,"ts":3}}`,
	`{"id":1,"key":"a","amount":2,"ts":3} x`,
	`{"id":1,"key":"a","amount":2,"ts":3}{"id":1,"key":"a","amount":2,"ts":3}`,
	" {\n\t\"id\" :\r1 ,\"key\"\t: \"a\" , \"amount\":2,\"ts\":3 , \"x\" : [ 1 , { \"y\" : null } ] } \n",
	`{"id":1,"key":"a","amount":2,"ts":3,"x":[1 2]}`,
	// Names that unescape or fold to "key" (\u212a is the Kelvin sign),
	// and duplicates of them: the last counts.
	`{"id":1,"\u006b\u0065\u0079":"a","amount":2,"ts":3}`,
	`{"id":1,"\u212aey":"a","amount":2,"ts":3}`,
	`{"id":1,"\u212Aey":"a","K\u0045Y":"b","amount":2,"ts":3}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"\u006bey":"\ud83d\udd11"}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"\u006bey":"\ud83d"}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"\u006bey\ud800":"b"}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"\u006be\u0079 ":"b"}`,
	// Nesting past the 128 levels the validator keeps in registers, and at
	// and over the limit with objects and arrays mixed.
	deep(129), deep(130), deep(200),
	`{"id":1,"key":"a","amount":2,"ts":3,"x":` + strings.Repeat(`{"a":[`, 4999) + strings.Repeat(`]}`, 4999) + `}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":` + strings.Repeat(`{"a":[`, 4999) + `{}` + strings.Repeat(`]}`, 4999) + `}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":` + strings.Repeat(`{"a":[`, 5000) + strings.Repeat(`]}`, 5000) + `}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":` + strings.Repeat(`{"a":[`, 100) + strings.Repeat(`}]`, 100) + `}`,
	`{"id":1,"key":"a","amount":2,"ts":3,"x":` + strings.Repeat(`[`, 300) + `01` + strings.Repeat(`]`, 300) + `}`,
	// Escapes in names and values the decoder skips.
	`{"n\u00e4me":"M\u00fcnchen","id":1,"\u0074s":3,"k\u0065y":"a","amount":2,"\"":"\\\""}`,
	`{"id":1,"key":"a\"b\\","amount":2,"ts":3,"x":["\"]",{"\\":"}"}]}`,
}

// seedRecords is the differential test's corpus: samples of the three
// workloads, the decoder's table cases and the edge cases.
func seedRecords() [][]byte {
	var seeds [][]byte
	for _, w := range workloads {
		seeds = append(seeds, w.recs(20)...)
	}
	for _, tc := range validCases {
		seeds = append(seeds, []byte(tc.in))
	}
	for _, tc := range rejectCases {
		seeds = append(seeds, []byte(tc.in))
	}
	for _, s := range edgeCases {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// checkAgreesWithStrict is the differential property: Decode accepts
// exactly what decodeStrict (the encoding/json decoder) accepts, with the
// same event and, for a rejection, the same reason; and decodeJSON, the
// one-pass path on its own, agrees with decodeSlow both ways. It reports
// whether decodeJSON accepted data.
func checkAgreesWithStrict(t *testing.T, data []byte) bool {
	t.Helper()
	orig := bytes.Clone(data)
	var got, want Event
	err := Decode(data, &got)
	werr := decodeStrict(data, &want)
	if !bytes.Equal(data, orig) {
		t.Fatalf("Decode modified its input %q", orig)
	}
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("%q: Decode = %s, %v; strict decoder = %s, %v", clipQ(data), show(&got), err, show(&want), werr)
	case err == nil && !sameEvent(&got, &want):
		t.Fatalf("%q: Decode = %s; strict decoder = %s", clipQ(data), show(&got), show(&want))
	case err != nil && err.Error() != werr.Error():
		t.Fatalf("%q: Decode's reason %q; strict decoder's %q", clipQ(data), err, werr)
	case err != nil && !IsDecodeError(err):
		t.Fatalf("%q: %v is not a DecodeError", clipQ(data), err)
	}
	if len(data) == 0 || len(data) > MaxRecordBytes {
		return false
	}
	var jev, sev Event
	jok := decodeJSON(data, &jev)
	serr := decodeSlow(data, &sev)
	switch {
	case jok && serr != nil:
		t.Fatalf("%q: decodeJSON accepted it as %s, decodeSlow rejected it: %v", clipQ(data), show(&jev), serr)
	case jok && !sameEvent(&jev, &sev):
		t.Fatalf("%q: decodeJSON = %s; decodeSlow = %s", clipQ(data), show(&jev), show(&sev))
	case !jok && serr == nil:
		t.Fatalf("%q: decodeJSON refused it, decodeSlow accepted it as %s", clipQ(data), show(&sev))
	}
	return jok
}

func clipQ(b []byte) []byte {
	if len(b) > 300 {
		return append(b[:300:300], "…"...)
	}
	return b
}

// FuzzDecodeAgreesWithStrict: the one-pass decoder accepts and
// rejects exactly what the encoding/json decoder does, with the same event
// and reason. `go test` runs its seeds; TestDecodeAgreesWithStrict runs it
// over 20,000 mutations every time; `go test -fuzz` explores further.
func FuzzDecodeAgreesWithStrict(f *testing.F) {
	for _, s := range seedRecords() {
		if len(s) <= 2*MaxRecordBytes { // the 1 MB record only slows the fuzzer
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkAgreesWithStrict(t, data) })
}

// mutationTokens are what the mutator inserts or overwrites with: JSON
// syntax, whitespace, escapes, names that fold to the event's fields,
// numbers the int rule refuses, and bytes that are not UTF-8.
var mutationTokens = []string{
	"{", "}", "[", "]", `"`, ":", ",", " ", "\t", "\n", "\r", "\v", "\x00", "\x7f",
	"\\", `\u`, `\ud800`, `\udc00`, `\ud83d\udd11`, `\u0069`, `\"`, `\\`, `\/`, `\n`,
	"0", "1", "9", "-", "+", ".", "e", "E", "-0", "1e3", "1.0", "01", "9223372036854775808", "99999999999999999999",
	"null", "true", "false", `"id"`, `"ID"`, `"Key"`, "\"\u212aey\"", "\"t\u017f\"", `"amount"`, `"ts"`, `"x"`,
	`"id":1,`, `"key":"b",`, `"key":5,`, `"amount":null,`, `"ts":"3",`, `"n":{"a":[1,{}]},`,
	"\xff", "\xc3", "\xc3\xa9", "\xed\xa0\x80", "\ufeff", "é", "🔑",
}

// mutate applies one (or, a third of the time, two or three) random edits to a copy of b.
func mutate(rng *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	edits := 1
	if rng.IntN(3) == 0 {
		edits += 1 + rng.IntN(2)
	}
	for range edits {
		tok := mutationTokens[rng.IntN(len(mutationTokens))]
		if len(b) == 0 {
			b = append(b, tok...)
			continue
		}
		i := rng.IntN(len(b))
		switch rng.IntN(7) {
		case 5: // flip the case of a letter: names fold, values don't
			if c := b[i] | 0x20; c >= 'a' && c <= 'z' {
				b[i] ^= 0x20
			}
		case 6: // a digit for a digit
			if b[i] >= '0' && b[i] <= '9' {
				b[i] = '0' + byte(rng.IntN(10))
			}
		case 0: // overwrite
			j := min(len(b), i+len(tok))
			b = append(b[:i], append([]byte(tok), b[j:]...)...)
		case 1, 2: // insert
			b = append(b[:i], append([]byte(tok), b[i:]...)...)
		case 3: // delete a span
			j := min(len(b), i+1+rng.IntN(4))
			b = append(b[:i], b[j:]...)
		case 4: // duplicate a span
			j := i + rng.IntN(min(len(b)-i, 40)+1)
			b = append(b[:j], append(bytes.Clone(b[i:j]), b[j:]...)...)
		}
	}
	return b
}

// TestDecodeAgreesWithStrict runs the differential property of
// FuzzDecodeAgreesWithStrict over its seeds and 20,000 deterministic
// mutations of them, so that every `go test` explores beyond the seeds in
// bounded time. It fails if the mutations are too tame to reach both
// verdicts of the one-pass path.
func TestDecodeAgreesWithStrict(t *testing.T) {
	seeds := seedRecords()
	rng := rand.New(rand.NewPCG(17, 1))
	var accepted, rejected int
	for _, s := range seeds {
		checkAgreesWithStrict(t, s)
	}
	var bases [][]byte // mutating the 1 MB record only costs time
	for _, s := range seeds {
		if len(s) <= 2*MaxRecordBytes {
			bases = append(bases, s)
		}
	}
	const n = 20000
	for range n {
		if checkAgreesWithStrict(t, mutate(rng, bases[rng.IntN(len(bases))])) {
			accepted++
		} else {
			rejected++
		}
	}
	if accepted < n/10 || rejected < n/10 {
		t.Fatalf("mutations are vacuous: decodeJSON accepted %d and refused %d of %d", accepted, rejected, n)
	}
	t.Logf("decodeJSON accepted %d and refused %d of %d mutations", accepted, rejected, n)
}

// TestDecodeWorkloads: every record of the three workloads decodes on the
// one-pass path without encoding/json, to the event the strict decoder reads,
// and without allocating.
func TestDecodeWorkloads(t *testing.T) {
	for _, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			recs := w.recs(1000)
			for _, r := range recs {
				var jev, sev Event
				if !decodeJSON(r, &jev) {
					t.Fatalf("decodeJSON refused %s", r)
				}
				if err := decodeSlow(r, &sev); err != nil || !sameEvent(&jev, &sev) {
					t.Fatalf("%s: decodeJSON = %s; decodeSlow = %s, %v", r, show(&jev), show(&sev), err)
				}
			}
			var ev Event
			i := 0
			allocs := testing.AllocsPerRun(1000, func() {
				if err := Decode(recs[i%len(recs)], &ev); err != nil {
					t.Fatal(err)
				}
				i++
			})
			if allocs != 0 {
				t.Fatalf("Decode allocates %v times per record", allocs)
			}
		})
	}
}

// TestDecodeJSONSkipsOtherValues: the values of fields other than the four
// are skipped, not decoded: escaped strings (Python's json.dumps escapes
// every non-ASCII character), fractions, exponents and nested values cost
// no allocation, nor do escaped names, and brackets inside strings do not
// count as nesting.
func TestDecodeJSONSkipsOtherValues(t *testing.T) {
	recs := []string{
		`{"id": 1, "key": "k1", "amount": 5, "ts": 3, "city": "M\u00fcnchen", "note": "\"quoted\" \\ \ud83d\ude00"}`,
		`{"caf\u00e9": 1, "id": 1, "key": "k1", "amount": 5, "ts": 3, "price": 1.5e-3, "big": 1e400, "geo": {"lat": -48.8, "tags": ["\u00e9", [true, false, null]]}}`,
		`{"id":1,"key":"k1","amount":5,"ts":3,"x":"` + strings.Repeat("[", maxNesting+1) + `"}`,
		// Names with escapes that may be one of the four (they start like
		// one) are unescaped on the stack, whether they are one or not.
		`{"\u0069d":1,"k\u0065y":"k1","\u0061mount":5,"\u0074s":3}`,
		`{"id":1,"\u212aey":"k1","amount":5,"t\u017f":3,"k\u00e9y":2,"\u0069dx":4}`,
	}
	for _, r := range recs {
		data := []byte(r)
		var ev Event
		if !decodeJSON(data, &ev) || !(want{1, "k1", 5, 3}).match(&ev) {
			t.Fatalf("decodeJSON(%.100s) = %s", r, show(&ev))
		}
		if allocs := testing.AllocsPerRun(100, func() { decodeJSON(data, &ev) }); allocs != 0 {
			t.Errorf("decodeJSON(%.100s) allocates %v times", r, allocs)
		}
	}
}

// TestDecodeJSONFoldedNames: decodeJSON matches names as encoding/json
// does (folded, escaped, last wins) and leaves what is nested too deep to
// decodeSlow, whose reason names the depth.
func TestDecodeJSONFoldedNames(t *testing.T) {
	tests := []struct {
		in   string
		want want
	}{
		{`{"ID": 1, "Key": "a", "AMOUNT": 2, "Ts": 3}`, want{1, "a", 2, 3}},
		{"{\"id\":1,\"\u212aey\":\"b\",\"amount\":2,\"t\u017f\":3}", want{1, "b", 2, 3}},
		{`{"\u0069d":1,"key":"a\u00e9\ud83d\udd11","amount":2,"ts":3}`, want{1, "aé🔑", 2, 3}},
		{`{"id":1,"key":"a","amount":2,"ts":3,"id":5,"Key":"z"}`, want{5, "z", 2, 3}},
	}
	for _, tc := range tests {
		var ev Event
		if !decodeJSON([]byte(tc.in), &ev) || !tc.want.match(&ev) {
			t.Errorf("decodeJSON(%s) = %s, want %+v", tc.in, show(&ev), tc.want)
		}
	}
	var ev Event
	for _, in := range []string{deep(10001), "{\"\u0130d\":1,\"key\":\"a\",\"amount\":2,\"ts\":3}"} {
		if decodeJSON([]byte(in), &ev) {
			t.Errorf("decodeJSON accepted %.80s", in)
		}
	}
	var de *DecodeError
	if err := Decode([]byte(deep(10001)), &ev); !errors.As(err, &de) || !strings.Contains(de.Reason, "exceeded max depth") {
		t.Errorf("Decode of a record nested 10,001 deep: %v", err)
	}
}

// BenchmarkDecodeWorkloads measures, per workload, Decode against
// encoding/json alone (decodeSlow) and the one-pass path alone (decodeJSON).
func BenchmarkDecodeWorkloads(b *testing.B) {
	decoders := []struct {
		name string
		fn   func([]byte, *Event) error
	}{
		{"Decode", Decode},
		{"encoding_json", decodeSlow},
		{"decodeJSON_only", func(d []byte, ev *Event) error {
			if !decodeJSON(d, ev) {
				return errors.New("refused")
			}
			return nil
		}},
	}
	for _, w := range workloads {
		recs := w.recs(1000)
		var size int
		for _, r := range recs {
			size += len(r)
		}
		for _, d := range decoders {
			b.Run(w.name+"/"+d.name, func(b *testing.B) {
				var ev Event
				b.ReportAllocs()
				b.SetBytes(int64(size / len(recs)))
				i := 0
				for b.Loop() {
					if err := d.fn(recs[i%len(recs)], &ev); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
