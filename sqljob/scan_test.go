package sqljob

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/microbatch/microbatch/internal/jsonscan"
)

// scanOK is the oracle for the scanner: encoding/json's validity, plus
// valid UTF-8 (encoding/json accepts bytes that are not and decodes them
// to U+FFFD, which would merge keys), plus a top-level object.
func scanOK(d []byte) bool {
	return json.Valid(d) && utf8.Valid(d) && bytes.HasPrefix(bytes.TrimLeft(d, " \t\r\n"), []byte("{"))
}

var scanSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":[1,2,{"b":null}],"c":{"d":"e"}}`, `{"a":"\u00e9\ud83d\ude00"}`,
	`{"a":-0.5e-3,"b":1E+2,"c":0}`, `{"a":true,"b":false,"c":null}`, `{"a":"x\"y\\z\/\b\f\n\r\t"}`,
	"{\"a\":\"é日本\"}", `{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":"\x"}`,
	`{"a":"\u12"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", `{"a" 1}`, `{a:1}`, `[1]`, `"s"`, `1`, `{"a":1}}`,
	`{"a":1} x`, `{"a":tru}`, `{"a":nul}`, `{"a":[1,]}`, `{"a":[}`, `{"a":{"b":1}`, ``, ` `, `{"a":1e}`,
	`{"a":-}`, `{"a":"abc`, `{"a":"abcdefghijklmnopqrstuvwxyz0123456789"}`, "{\"a\":\"abcdefgh\x80ijkl\"}",
	`{"k":"` + string(bytes.Repeat([]byte("ab"), 40)) + `"}`,
	`{"a":"x","b":{"c":[1,{"c":2}],"z":[}},"d":{"e":{"f":"y","g":[01]}}}`, `{"b":[{"c":1}],"d":{"e":[1,2]}}`,
	`{"d":{"e":{"f":{"x":[true,{"y":null}]}}},"b":{"c":{"q":"\u00e9"}}}`, `{"d":{"e":"s","x":[1 2]}}`,
}

// checkScan: the scanner's syntax verdict is encoding/json's, both with a
// root that reads nothing (every value is only checked) and with one that
// reads a, b.c and d.e.f (objects on the path are walked member by member,
// the rest checked whole). With a path, a record may also be refused for
// what it holds there (a member twice, a lone surrogate), never for syntax.
func checkScan(t *testing.T, d []byte) {
	t.Helper()
	want := scanOK(d)
	var s scanner
	if err := s.scan(d, &pathNode{field: -1}); (err == nil) != want {
		t.Fatalf("scan(%q) = %v, want ok=%v", d, err, want)
	}
	root := &pathNode{field: -1}
	var fields, nodes int
	for _, path := range [][]string{{"a"}, {"b", "c"}, {"d", "e", "f"}, {"d", "e"}} {
		root.add(path, &fields, &nodes)
	}
	s = scanner{f: make([]val, fields), seen: make([]bool, nodes)}
	err := s.scan(d, root)
	var se *jsonscan.SyntaxError
	switch syntax := errors.As(err, &se) || err == errNotObject; {
	case err == nil && !want:
		t.Fatalf("scan(%q) with a path accepted it; encoding/json refuses it", d)
	case syntax && want:
		t.Fatalf("scan(%q) with a path = %v; encoding/json accepts it", d, err)
	}
}

func TestScannerAgreesWithEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(d []byte) { t.Helper(); checkScan(t, d) }
	alphabet := []byte(`{}[]":,\ u0123456789abcdefnrtlsE.+-` + "\x00\x1f\x7f\x80\xc3\xa9\xff")
	for _, seed := range scanSeeds {
		check([]byte(seed))
		// Mutations: a byte replaced, inserted or deleted.
		for range 300 {
			d := []byte(seed)
			switch op := rng.IntN(3); {
			case op == 0 && len(d) > 0:
				d[rng.IntN(len(d))] = alphabet[rng.IntN(len(alphabet))]
			case op == 1:
				i := rng.IntN(len(d) + 1)
				d = append(d[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, d[i:]...)...)
			case len(d) > 0:
				i := rng.IntN(len(d))
				d = append(d[:i], d[i+1:]...)
			}
			check(d)
		}
	}
	for _, r := range wideRecords(200) {
		check(r)
	}
}

func FuzzScanner(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) { checkScan(t, d) })
}

// TestFieldsAgreeWithEncodingJSON: what the scanner captures is what
// encoding/json decodes, escapes and nesting included.
func TestFieldsAgreeWithEncodingJSON(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT a, b.c AS bc, d->>'$.e.f' AS ef, COUNT(*) AS n FROM x GROUP BY a, bc, ef", Options{})
	for _, rec := range []string{
		`{"a":"plain","b":{"c":"x"},"d":{"e":{"f":"y"}}}`,
		`{"a":"tab\there \u00e9 \ud83d\ude00 \"q\" \\ \/","b":{"z":1,"c":"\u0041"},"d":{"e":{"f":"\n"}}}`,
		`{"\u0061":"escaped name","b":{"c":"2"},"d":{"e":{"f":"3"}}}`,
		`{"a": "spaced" , "b" : { "c" : "s" } , "d" : { "e" : { "f" : "t" } } }`,
		`{"b":{"c":"k"},"d":{"e":{"f":"v"}},"a":"last"}`,
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(rec), &m); err != nil {
			t.Fatal(err)
		}
		want := []string{
			m["a"].(string),
			m["b"].(map[string]any)["c"].(string),
			m["d"].(map[string]any)["e"].(map[string]any)["f"].(string),
		}
		a := q.NewAggregate()
		if err := a.Add([]byte(rec)); err != nil {
			t.Fatalf("Add(%s): %v", rec, err)
		}
		rows := a.Rows()
		for i, w := range want {
			if rows[0][i] != w {
				t.Errorf("%s: key %d = %q, want %q", rec, i, rows[0][i], w)
			}
		}
	}
}
