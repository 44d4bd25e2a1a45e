package event

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseFormat(t *testing.T) {
	for _, f := range Formats {
		got, err := ParseFormat(string(f))
		if err != nil || got != f {
			t.Errorf("ParseFormat(%q) = %q, %v", f, got, err)
		}
	}
	if got, err := ParseFormat(""); err != nil || got != FormatCompact {
		t.Errorf(`ParseFormat("") = %q, %v; want compact`, got, err)
	}
	if _, err := ParseFormat("jsonl"); err == nil || !strings.Contains(err.Error(), `"jsonl"`) {
		t.Errorf(`ParseFormat("jsonl") = %v; want an error naming it`, err)
	}
}

// TestFormatCompactIsAppend: compact is today's bytes exactly.
func TestFormatCompactIsAppend(t *testing.T) {
	got := AppendFormat(nil, FormatCompact, 7, 42, "k3", 17, 1700000000000)
	if want := Append(nil, 42, "k3", 17, 1700000000000); !bytes.Equal(got, want) {
		t.Fatalf("compact wrote %s, want %s", got, want)
	}
}

// TestFormatSpacedIsJSONDumps compares with what Python's json.dumps
// writes (outputs taken from python3 -c 'import json; print(json.dumps({...}))').
func TestFormatSpacedIsJSONDumps(t *testing.T) {
	for _, c := range []struct {
		key  string
		want string
	}{
		{"k1", `{"id": 1, "key": "k1", "amount": 5, "ts": 6}`},
		{"k\"\\\n\r\t\b\f\x01\x7f é😀", `{"id": 1, "key": "k\"\\\n\r\t\b\f\u0001\u007f \u00e9\ud83d\ude00", "amount": 5, "ts": 6}`},
	} {
		if got := string(AppendFormat(nil, FormatSpaced, 7, 1, c.key, 5, 6)); got != c.want {
			t.Errorf("spaced %q:\n got %s\nwant %s", c.key, got, c.want)
		}
	}
}

// TestFormatsDecodeAlike: every format of the generator's sequence decodes
// to the same events (so verify's totals hold whatever the format), and the
// wide format has its promised shape.
func TestFormatsDecodeAlike(t *testing.T) {
	const n = 2000
	for _, f := range Formats {
		t.Run(string(f), func(t *testing.T) {
			g := NewGenerator(7, 100)
			var size int
			idPos := map[int]bool{}
			for range n {
				id, key, amount := g.Next()
				ts := 1700000000000 + id
				b := AppendFormat(nil, f, 7, id, key, amount, ts)
				if again := AppendFormat(nil, f, 7, id, key, amount, ts); !bytes.Equal(b, again) {
					t.Fatalf("event %d: two writes differ:\n%s\n%s", id, b, again)
				}
				if !json.Valid(b) {
					t.Fatalf("event %d: not valid JSON: %s", id, b)
				}
				var ev Event
				if err := Decode(b, &ev); err != nil {
					t.Fatalf("event %d: %v: %s", id, err, b)
				}
				if ev.ID != id || string(ev.Key) != key || ev.Amount != amount || ev.TS != ts {
					t.Fatalf("event %d decoded as %d %q %d %d: %s", id, ev.ID, ev.Key, ev.Amount, ev.TS, b)
				}
				size += len(b)
				idPos[bytes.Index(b, []byte(`"id":`))] = true
			}
			avg := size / n
			if f != FormatWide {
				return
			}
			if avg < 500 || avg > 700 {
				t.Errorf("wide records average %d bytes, want about 600", avg)
			}
			if len(idPos) < 10 {
				t.Errorf(`"id" stood at only %d different places in %d wide records: the field order does not vary`, len(idPos), n)
			}
			var top map[string]any
			if err := json.Unmarshal(AppendFormat(nil, f, 7, 1, "k1", 1, 1), &top); err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, v := range top {
				switch v.(type) {
				case string:
					kinds["string"] = true
				case float64:
					kinds["number"] = true
				case bool:
					kinds["bool"] = true
				case nil:
					kinds["null"] = true
				case map[string]any:
					kinds["object"] = true
				}
			}
			if len(top) < 14 || len(kinds) != 5 {
				t.Errorf("a wide record has %d fields of kinds %v, want about 14 of all five kinds", len(top), kinds)
			}
		})
	}
}
