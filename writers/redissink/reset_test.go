package redissink

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
)

// wantResetState checks what a reset to epoch newEpoch leaves besides the
// offsets: the pending range's contribution and every logged range gone,
// the new epoch the job's and the partitions'.
func wantResetState(t *testing.T, w *Sink, job *Job, pending record.Range, newEpoch int64) {
	t.Helper()
	ctx := t.Context()
	c := w.Client()
	if n := c.Exists(ctx, job.keys.contrib(pending)).Val(); n != 0 {
		t.Fatal("the pending range's contribution survived the reset")
	}
	if n := c.HLen(ctx, job.keys.planParts()).Val(); n != 0 {
		t.Fatalf("plan:parts has %d entries after the reset, want 0", n)
	}
	if e := c.Get(ctx, job.keys.epoch()).Val(); e != fmt.Sprint(newEpoch) {
		t.Fatalf("job epoch = %s, want %d", e, newEpoch)
	}
	after, err := job.Positions(ctx, "in")
	if err != nil || len(after) != 3 {
		t.Fatalf("Positions after reset = %v, %v; want 3 partitions", after, err)
	}
	for p, got := range after {
		if got.Epoch != newEpoch || got.Logged != nil {
			t.Fatalf("partition %d after reset: %+v, want epoch %d and no logged range", p, got, newEpoch)
		}
	}
}

// TestRedisResetOffsets resets a job with a folded batch on two partitions
// and a logged, written, but not folded range on one of them, then checks
// that the old run is fenced and that a new run plans, writes and folds
// from the reset offsets without tripping over the old plan.
func TestRedisResetOffsets(t *testing.T) {
	w := openRedisSink(t)
	ctx := t.Context()
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 2, 100)
	one := func(r record.Range) []Total {
		return []Total{{Key: "k", Events: r.To - r.From, Amount: 2 * (r.To - r.From)}}
	}
	for _, r := range ranges {
		mustWrite(t, w, job, epoch, r, one(r), nil)
	}
	mustFold(t, w, job, epoch, 1, ranges, 2)
	pending := record.Range{Topic: "in", Partition: 0, From: 100, To: 150}
	if err := job.LogPlan(ctx, epoch, 2, []record.Range{pending}); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, job, epoch, pending, one(pending), nil)

	pos, err := job.Positions(ctx, "in")
	if err != nil {
		t.Fatalf("Positions: %v", err)
	}
	if p := pos[0]; p.NextOffset != 100 || p.Epoch != epoch || p.Logged == nil || p.Logged.BatchID != 2 || !p.Pending {
		t.Fatalf("Positions[0] = %+v (logged %+v), want offset 100, epoch %d, batch 2 pending", p, p.Logged, epoch)
	}
	if p := pos[1]; p.NextOffset != 100 || p.Logged == nil || p.Logged.BatchID != 1 || p.Pending {
		t.Fatalf("Positions[1] = %+v, want offset 100, batch 1 folded", p)
	}

	// Partition 1 goes back to 0, the From of its folded range: without the
	// plan entry dropped, the next run would take it for a pending range.
	newEpoch, changes, err := job.ResetOffsets(ctx, "in", map[int32]int64{1: 0, 0: 20, 2: 5})
	if err != nil {
		t.Fatalf("ResetOffsets: %v", err)
	}
	if newEpoch != epoch+1 {
		t.Fatalf("ResetOffsets epoch = %d, want %d", newEpoch, epoch+1)
	}
	wantChanges := []offsets.Change{{Partition: 0, Old: 100, HadRow: true, New: 20}, {Partition: 1, Old: 100, HadRow: true, New: 0}, {Partition: 2, New: 5}}
	if !reflect.DeepEqual(changes, wantChanges) {
		t.Fatalf("changes = %+v, want %+v", changes, wantChanges)
	}
	wantOffsets(t, w, job, map[int32]int64{0: 20, 1: 0, 2: 5})
	wantTotals(t, w, job, map[string]total{"k": {200, 400}})
	wantResetState(t, w, job, pending, newEpoch)

	// The old run is fenced on the reset partitions.
	if _, err := job.Fold(ctx, epoch, 2, []record.Range{pending}); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("old run's Fold after reset = %v, want ErrFenced", err)
	}
	if err := job.LogPlan(ctx, epoch, 3, []record.Range{{Topic: "in", Partition: 1, From: 0, To: 10}}); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("old run's LogPlan after reset = %v, want ErrFenced", err)
	}

	// A new run: claim, nothing pending, plan from the reset offsets, fold.
	runEpoch, err := job.ClaimPartitions(ctx, "in", []int32{0, 1, 2}, 1)
	if err != nil || runEpoch <= newEpoch {
		t.Fatalf("ClaimPartitions = %d, %v; want > %d", runEpoch, err, newEpoch)
	}
	if pend, err := job.PendingRanges(ctx, "in", []int32{0, 1, 2}); err != nil || len(pend) != 0 {
		t.Fatalf("PendingRanges after reset = %v, %v; want none", pend, err)
	}
	id, err := job.NextBatchID(ctx)
	if err != nil || id <= 2 {
		t.Fatalf("NextBatchID = %d, %v; want > 2", id, err)
	}
	next := []record.Range{{Topic: "in", Partition: 0, From: 20, To: 150}, {Topic: "in", Partition: 1, From: 0, To: 100}, {Topic: "in", Partition: 2, From: 5, To: 6}}
	if err := job.LogPlan(ctx, runEpoch, id, next); err != nil {
		t.Fatalf("LogPlan after reset: %v", err)
	}
	for _, r := range next {
		mustWrite(t, w, job, runEpoch, r, one(r), nil)
	}
	mustFold(t, w, job, runEpoch, id, next, 3)
	wantOffsets(t, w, job, map[int32]int64{0: 150, 1: 100, 2: 6})
	wantTotals(t, w, job, map[string]total{"k": {200 + 130 + 100 + 1, 2 * (200 + 130 + 100 + 1)}})

	if _, _, err := job.ResetOffsets(ctx, "in", map[int32]int64{0: -1}); err == nil {
		t.Fatal("ResetOffsets to -1 succeeded")
	}
}
