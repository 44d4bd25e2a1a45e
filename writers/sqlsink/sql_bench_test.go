package sqlsink

import (
	"fmt"
	"testing"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// BenchmarkUpsertSQL builds the multi-row upsert statement of a batch, per
// number of rows (distinct keys in a partition's batch).
func BenchmarkUpsertSQL(b *testing.B) {
	for _, d := range []offsets.Dialect{offsets.MySQL, offsets.SQLite} {
		w := New(nil, d)
		for _, rows := range []int{10, 1000, 7500} {
			b.Run(fmt.Sprintf("%s/rows=%d", d, rows), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if len(w.upsertSQL(writers.Totals, rows)) == 0 {
						b.Fatal("empty statement")
					}
				}
			})
		}
	}
}

// BenchmarkUpsertSQLite adds a batch of 1,000 keys into mb_totals rows
// that exist (the update path, where SQLite sums with mb_add), one
// transaction per batch, on a SQLite file.
func BenchmarkUpsertSQLite(b *testing.B) {
	w, err := Open(b.Context(), "sqlite://"+b.TempDir()+"/bench.db")
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateTables(b.Context()); err != nil {
		b.Fatal(err)
	}
	rows := make([][]any, 1000)
	for i := range rows {
		rows[i] = []any{"bench", fmt.Sprintf("key-%04d", i), int64(3), int64(1000 + i)}
	}
	upsert := func() {
		tx, err := w.Begin(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Upsert(b.Context(), writers.Totals, rows); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	upsert()
	b.ReportAllocs()
	for b.Loop() {
		upsert()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
}
