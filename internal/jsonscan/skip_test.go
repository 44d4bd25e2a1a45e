package jsonscan

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// valid is the oracle: encoding/json's syntax plus UTF-8 everywhere
// (encoding/json lets bytes that are not UTF-8 through inside strings).
func valid(d []byte) bool { return json.Valid(d) && utf8.Valid(d) }

// nest wraps v in n containers, arrays and objects alternating.
func nest(n int, v string) string {
	var open, closing strings.Builder
	for i := range n {
		if i%2 == 0 {
			open.WriteString("[")
		} else {
			open.WriteString(`{"a":`)
		}
	}
	for i := n - 1; i >= 0; i-- {
		if i%2 == 0 {
			closing.WriteString("]")
		} else {
			closing.WriteString("}")
		}
	}
	return open.String() + v + closing.String()
}

// skipCases are values where a validator is likely to differ from
// encoding/json, inside containers as well as alone.
var skipCases = []string{
	`0`, `-0`, `01`, `-01`, `-`, `1.`, `.5`, `1e`, `1e+`, `1E-2`, `1.5e3`, `-0.0e0`, `+1`, `0x1`, `1 2`,
	`true`, `tru`, `false`, `nul`, `null`, `NaN`, `Infinity`, `t`,
	`""`, `"a`, `"\u12"`, `"\u12G4"`, `"\ud800"`, `"\udc00\ud800"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`,
	"\"a\tb\"", "\"a\x00\"", "\"a\x1f\"", "\"a\x7f\"", "\"\xff\"", "\"\xc3\"", "\"\xc3\xa9\"", "\"\xed\xa0\x80\"",
	"\"\xf4\x90\x80\x80\"", "\"\xe2\x82\"", `"12345678\`, `"1234567"`, `"12345678"`,
	"\xff", "\ufeff1",
	`[]`, `[1,]`, `[,]`, `[1 2]`, `[1,2]`, `[`, `]`, `[}`, `{]`, `{}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{1:2}`,
	`{"a":1 "b":2}`, `{"a"::1}`, `{"a":1}}`, `[[]]]`, `{"a":[1,{"b":[true,false,null]}]}`,
	" [ 1 , { \"a\" : \"b\" } ] ", "[\v1]", "[\u00a01]", `{"\u00e9":[]}`, "{\"\xff\":1}",
	nest(127, "1"), nest(128, "1"), nest(129, "1"), nest(200, "1"), nest(200, "01"), nest(200, `"\u12"`),
	nest(150, "1") + "]", strings.Replace(nest(150, "1"), "}", "]", 1), strings.Replace(nest(150, "1"), "]", "}", 1),
	nest(MaxNesting, "1"), nest(MaxNesting+1, "1"), nest(MaxNesting, "[]"), nest(MaxNesting-1, "[]"),
}

// TestSkipValueAgreesWithJSON: SkipValue accepts a value, alone or nested
// in others, exactly when encoding/json (plus UTF-8) does, and ends where
// the value ends.
func TestSkipValueAgreesWithJSON(t *testing.T) {
	for _, v := range skipCases {
		for _, d := range []string{v, `[` + v + `]`, `{"x":` + v + `}`, `{"x":[0,` + v + `,{}]}`} {
			checkSkip(t, []byte(d))
		}
	}
}

func checkSkip(t *testing.T, d []byte) {
	t.Helper()
	want := valid(d)
	i := SkipSpace(d, 0)
	end, err := SkipValue(d, i, 0, MaxNesting)
	got := err == nil && SkipSpace(d, end) == len(d)
	if got != want {
		t.Fatalf("%.120q: SkipValue = %d, %v; encoding/json valid = %v", d, end, err, want)
	}
	if err != nil {
		if _, ok := err.(*SyntaxError); !ok {
			t.Fatalf("%.120q: %v is not a *SyntaxError", d, err)
		}
	}
}

// TestSkipValueLimit: a container that would be the limit+1-th open is
// refused where it starts, the one before accepted, whatever the depth the
// caller is at and on both sides of the small stack's 128 levels.
func TestSkipValueLimit(t *testing.T) {
	for _, limit := range []int{1, 2, 64, 128, 129, 512, MaxNesting} {
		for _, depth := range []int{0, 1} {
			n := limit - depth // containers that fit
			if _, err := SkipValue([]byte(nest(n, "1")), 0, depth, limit); err != nil {
				t.Errorf("limit %d, depth %d: %d levels refused: %v", limit, depth, n, err)
			}
			over := nest(n+1, "1")
			at := len(over[:strings.IndexByte(over, '1')]) - len(nest(1, "")[:1]) // the innermost's start
			if n%2 == 1 {
				at = strings.IndexByte(over, '1') - len(`{"a":`)
			}
			_, err := SkipValue([]byte(over), 0, depth, limit)
			se, ok := err.(*SyntaxError)
			if !ok || se.Msg != "nested deeper than "+strconv.Itoa(limit) || se.At != at {
				t.Errorf("limit %d, depth %d: %d levels: %v, want nested deeper than %d at byte %d", limit, depth, n+1, err, limit, at)
			}
		}
	}
}

// FuzzSkipValue: the differential property of TestSkipValueAgreesWithJSON
// on any bytes.
func FuzzSkipValue(f *testing.F) {
	for _, v := range skipCases {
		if len(v) < 1000 {
			f.Add([]byte(v))
		}
	}
	f.Fuzz(func(t *testing.T, d []byte) { checkSkip(t, d) })
}
