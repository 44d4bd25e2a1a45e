package sqlsink

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/writers"
)

// The checkpoint-mode writers write row jobs through the same statements:
// the write-ahead sink keeps appends and deletes in the checkpoint's JSON
// and applies them once on recovery, the XA writer in its transaction.

// rowJobWrites are an append (equal rows twice, strings that read like a
// Delete's encoding) and an upsert with deletes into tables of the test;
// want is what the tables hold after them, keyed first holding a, b, c.
func rowJobWrites(t *testing.T, w *Writer) (plain, keyed string, writes []walUpsert, want func(t *testing.T)) {
	t.Helper()
	plain, keyed = rowTable(t, w, false), rowTable(t, w, true)
	if err := w.Upsert(t.Context(), replaceOf(keyed), [][]any{{"j", "a", 1, "a1"}, {"j", "b", 1, "b1"}, {"j", "c", 1, "c1"}}); err != nil {
		t.Fatal(err)
	}
	writes = []walUpsert{
		{Upsert: appendOf(plain), Rows: [][]any{
			{"j", "x", int64(1), `{"delete":true}`}, {"j", "x", int64(1), `{"delete":true}`},
			{"j", "y", nil, "DELETE"}, {"j", "z", int64(2), nil},
		}},
		{Upsert: replaceOf(keyed), Rows: [][]any{
			{"j", "a", writers.Delete, nil}, {"j", "b", int64(2), "b2"}, {"j", "b", writers.Delete, nil},
			{"j", "c", writers.Delete, nil}, {"j", "c", int64(3), `{"delete":true}`}, {"j", "d", int64(4), "d4"},
		}},
	}
	n := func(i int64) *int64 { return &i }
	s := func(s string) *string { return &s }
	want = func(t *testing.T) {
		t.Helper()
		wantCounts(t, rowCounts(t, w, plain), map[string]int{
			rowText("j", "x", n(1), s(`{"delete":true}`)): 2,
			rowText("j", "y", nil, s("DELETE")):           1,
			rowText("j", "z", n(2), nil):                  1,
		})
		wantCounts(t, rowCounts(t, w, keyed), map[string]int{
			rowText("j", "c", n(3), s(`{"delete":true}`)): 1,
			rowText("j", "d", n(4), s("d4")):              1,
		})
	}
	return plain, keyed, writes, want
}

// A checkpoint's Delete rows are tagged {"delete": true} in its JSON, which
// no value reads as; a restarted writer applies the checkpoint from that
// JSON alone, once: recovering it again appends nothing twice.
func TestWALRowJob(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		_, _, writes, want := rowJobWrites(t, w)
		l := NewWAL(w, job, 0)
		if err := l.Recover(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		if err := l.Begin(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		for _, u := range writes {
			if err := l.Upsert(t.Context(), u.Upsert, u.Rows); err != nil {
				t.Fatal(err)
			}
		}
		p, err := l.PreCommit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(p.Data), `{"delete":true}`); got != 3 {
			t.Fatalf("checkpoint data has %d Delete tags, want 3: %s", got, p.Data)
		}
		var saved writers.Pending // through the checkpoint's JSON, as recovery reads it
		if b, err := json.Marshal(p); err != nil {
			t.Fatal(err)
		} else if err := json.Unmarshal(b, &saved); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := NewWAL(w, job, 0).Recover(t.Context(), []writers.Pending{saved}); err != nil {
				t.Fatal(err)
			}
			want(t)
		}
	})
}

// A value of an object form the WAL does not know is an error, not a value.
func TestWALUnknownTag(t *testing.T) {
	for _, v := range []any{map[string]any{"delete": false}, map[string]any{"delete": "true"}, map[string]any{"remove": true}} {
		if got, err := walValue(v); err == nil {
			t.Errorf("walValue(%v) = %v, want an error", v, got)
		}
	}
}

func TestXARowJob(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	_, _, writes, want := rowJobWrites(t, w)
	x := newTestXA(t, w, job, 0)
	if err := x.Recover(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if err := x.Begin(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	for _, u := range writes {
		if err := x.Upsert(t.Context(), u.Upsert, u.Rows); err != nil {
			t.Fatal(err)
		}
	}
	p, err := x.PreCommit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	want(t)
}
