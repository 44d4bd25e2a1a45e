package strategies

import (
	"fmt"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers"
)

func rowJobWork(t *testing.T, sql string) *queryWork {
	t.Helper()
	q, err := sqljob.Compile(sql, sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return SQLTransform(q).work.(*queryWork)
}

type rec struct {
	p     int32
	off   int64
	key   string // "": no key
	value string // "-": a tombstone
}

func (r rec) record() *batch.Record {
	b := &batch.Record{Partition: r.p, Offset: r.off, Timestamp: time.UnixMilli(1700000000000 + r.off)}
	if r.key != "" {
		b.Key = []byte(r.key)
	}
	if r.value != "-" {
		b.Value = []byte(r.value)
	}
	return b
}

// A row job's parts: an append keeps every accepted record's row in read
// order (equal records are two rows) and merged parts follow each other;
// an upsert keeps each key's latest row (a later part's wins) sorted by
// key, a tombstone's row as a writers.Delete. Checkpoint mode's
// decodeAny and rowsOf give the same rows.
func TestSQLTransformRowJob(t *testing.T) {
	for _, c := range []struct {
		name, sql string
		a, b      []rec
		want      string
	}{
		{"append", "INSERT INTO t SELECT id, _partition AS p, _offset AS o FROM e WHERE id <> 0",
			[]rec{{0, 5, "", `{"id":2}`}, {0, 6, "", `{"id":0}`}, {0, 7, "", `{"id":2}`}},
			[]rec{{1, 3, "", `{"id":1}`}},
			`[[2 0 5] [2 0 7] [1 1 3]]`},
		{"upsert", "REPLACE INTO t (PRIMARY KEY (k)) SELECT _key AS k, v, _offset AS o FROM e",
			[]rec{{0, 1, "b", `{"v":1}`}, {0, 2, "a", `{"v":2}`}, {0, 3, "b", `{"v":3}`}, {0, 4, "c", `{"v":4}`}, {0, 5, "c", "-"}},
			[]rec{{1, 1, "a", `{"v":5}`}, {1, 2, "d", "-"}},
			`[[a 5 1] [b 3 3] [c DELETE <nil>] [d DELETE <nil>]]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := rowJobWork(t, c.sql)
			pa, pb := w.newPart("job"), w.newPart("job")
			var items []any
			for _, r := range c.a {
				if err := pa.add(r.record()); err != nil {
					t.Fatal(err)
				}
				it, err := w.decodeAny(r.record())
				if err != nil {
					t.Fatal(err)
				}
				items = append(items, it)
			}
			for _, r := range c.b {
				if err := pb.add(r.record()); err != nil {
					t.Fatal(err)
				}
				it, err := w.decodeAny(r.record())
				if err != nil {
					t.Fatal(err)
				}
				items = append(items, it)
			}
			pa.merge(pb)
			rows, err := pa.rows()
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(rows); got != c.want {
				t.Errorf("rows %s, want %s", got, c.want)
			}
			rows, err = w.rowsOf(items)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(rows); got != c.want {
				t.Errorf("checkpoint rows %s, want %s", got, c.want)
			}
			u := w.upsert()
			for _, row := range rows {
				if err := u.Validate(); err != nil && u.Merge != writers.MergeAppend {
					t.Fatal(err)
				}
				if len(row) != len(u.Keys)+len(u.Values) {
					t.Fatalf("row %v of upsert %+v", row, u)
				}
			}
			pa.reset()
			if rows, _ := pa.rows(); rows != nil {
				t.Errorf("after reset: %v", rows)
			}
		})
	}
}

// An aggregate job reads the record's own fields too.
func TestSQLTransformRecordFields(t *testing.T) {
	w := rowJobWork(t, "INSERT INTO t SELECT _partition AS p, COUNT(*) AS n FROM e GROUP BY p")
	p := w.newPart("job")
	for _, r := range []rec{{0, 1, "", `{}`}, {2, 1, "", `{}`}, {2, 2, "", `{}`}} {
		if err := p.add(r.record()); err != nil {
			t.Fatal(err)
		}
	}
	if rows, _ := p.rows(); fmt.Sprint(rows) != "[[0 1] [2 2]]" {
		t.Errorf("rows %v", rows)
	}
}
