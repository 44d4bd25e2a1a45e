package batch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/record"
)

// TestDriverBatchCommit: with a batch-level Commit, tasks only compute,
// Commit runs once per batch after all of them, and no offset moves unless
// it succeeds.
func TestDriverBatchCommit(t *testing.T) {
	for _, fail := range []bool{false, true} {
		src := newFakeSource(map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 30, 1: 20, 2: 0})
		var running, commits atomic.Int64
		task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
			running.Add(1)
			defer running.Add(-1)
			return TaskResult{Records: r.Len()}, nil
		}
		d := &Driver{
			Source: src, Task: task, Topic: "events", Next: map[int32]int64{0: 0, 1: 0, 2: 0},
			Interval: time.Millisecond, MaxRecords: 10, UntilIdle: 5 * time.Millisecond,
			Commit: func(ctx context.Context, b Info, ranges []record.Range) (CommitResult, error) {
				if n := running.Load(); n != 0 {
					t.Errorf("Commit of batch %d ran with %d tasks still running", b.ID, n)
				}
				if commits.Add(1) == 2 && fail {
					return CommitResult{Attempts: 3}, errors.New("commit refused")
				}
				return CommitResult{Attempts: 1}, nil
			},
		}
		sum, err := d.Run(context.Background())
		if !fail {
			// 30 and 20 offsets in batches of at most 10: 3 batches.
			if err != nil || commits.Load() != 3 || sum.Next[0] != 30 || sum.Next[1] != 20 || sum.Records != 50 {
				t.Fatalf("without failure: err %v, %d commits, next %v, %d records", err, commits.Load(), sum.Next, sum.Records)
			}
			continue
		}
		if err == nil || commits.Load() != 2 {
			t.Fatalf("failing second commit: err %v after %d commits", err, commits.Load())
		}
		// Batch 1 committed [0,10) of both; batch 2's commit failed: its
		// ranges must not count and its offsets must not move.
		if sum.Next[0] != 10 || sum.Next[1] != 10 || sum.Records != 20 {
			t.Fatalf("after a failed commit: next %v, %d records; want 10/10 and 20", sum.Next, sum.Records)
		}
	}
}
