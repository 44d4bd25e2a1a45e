package writers

import (
	"fmt"
	"testing"

	"github.com/microbatch/microbatch/offsets"
)

// BenchmarkUpsertSQL builds the multi-row upsert statement of a batch, per
// number of rows (distinct keys in a partition's batch).
func BenchmarkUpsertSQL(b *testing.B) {
	for _, d := range []offsets.Dialect{offsets.MySQL, offsets.SQLite} {
		w := NewSQL(nil, d)
		for _, rows := range []int{10, 1000, 7500} {
			b.Run(fmt.Sprintf("%s/rows=%d", d, rows), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if len(w.upsertSQL(Totals, rows)) == 0 {
						b.Fatal("empty statement")
					}
				}
			})
		}
	}
}
