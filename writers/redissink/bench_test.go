package redissink

import (
	"fmt"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/record"
)

// BenchmarkRedisFold folds a batch of 4 ranges of 1,000 keys each into
// totals that exist: the script's time, during which it holds Redis.
func BenchmarkRedisFold(b *testing.B) {
	w, err := Open(b.Context(), testutil.NeedServer(b, testutil.EnvRedis))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	job, err := w.Job(fmt.Sprintf("bench-fold-%d", b.N))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	defer func() {
		if keys, _ := w.Client().Keys(ctx, "mb:{"+job.Name()+"}:*").Result(); len(keys) > 0 {
			w.Client().Del(ctx, keys...)
		}
	}()
	epoch, err := job.Claim(ctx)
	if err != nil {
		b.Fatal(err)
	}
	const parts, keys = 4, 1000
	start := map[int32]int64{}
	for p := range parts {
		start[int32(p)] = 0
	}
	if err := job.InitOffsets(ctx, "in", start); err != nil {
		b.Fatal(err)
	}
	totals := make([]Total, keys)
	for i := range totals {
		totals[i] = Total{Key: fmt.Sprintf("key-%04d", i), Events: 3, Amount: int64(1000 + i)}
	}
	batch := func(id int64) []record.Range {
		ranges := make([]record.Range, parts)
		for p := range ranges {
			ranges[p] = record.Range{Topic: "in", Partition: int32(p), From: (id - 1) * 10, To: id * 10}
		}
		if err := job.LogPlan(ctx, epoch, id, ranges); err != nil {
			b.Fatal(err)
		}
		for _, r := range ranges {
			if err := job.WriteContribution(ctx, epoch, r, totals, nil); err != nil {
				b.Fatal(err)
			}
		}
		return ranges
	}
	if _, err := job.Fold(ctx, epoch, 1, batch(1)); err != nil { // the totals exist from here on
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		id := int64(i) + 2
		ranges := batch(id)
		b.StartTimer()
		if n, err := job.Fold(ctx, epoch, id, ranges); err != nil || n != parts {
			b.Fatalf("Fold = %d, %v", n, err)
		}
	}
}
