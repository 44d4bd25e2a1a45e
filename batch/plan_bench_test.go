package batch

import (
	"fmt"
	"testing"
)

// BenchmarkPlan plans one batch for topics of growing width.
func BenchmarkPlan(b *testing.B) {
	for _, parts := range []int{4, 64, 1024} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			next := make(map[int32]int64, parts)
			bounds := make(map[int32]Bounds, parts)
			for p := range int32(parts) {
				next[p] = int64(p) * 1000
				bounds[p] = Bounds{Start: 0, End: int64(p)*1000 + 500_000}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Plan("events", next, bounds, 100_000); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
