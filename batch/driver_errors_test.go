package batch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/microbatch/microbatch/record"
)

// TestDriverTaskError: a failing task fails Run with an error that names the
// batch and range, cancels its siblings, and leaves the failed partition's
// offset where it was. A sibling that committed before the failure counts:
// its offset and records are in the summary.
func TestDriverTaskError(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name        string
		failPart    int32
		failBatch   int64 // batch id that fails
		lastBatch   int64
		parallelism int
		wantRange   string
		wantNext    int64 // Summary.Next[failPart]
		commitPart  int32 // a sibling that commits before the failure; -1: none
		wantRecords int64 // Summary.Records: committed tasks only
	}{
		{"first batch, first partition", 0, 1, 0, 0, "events/0[0,10)", 0, -1, 0},
		{"first batch, last partition", 2, 8, 7, 0, "events/2[5,15)", 5, -1, 0},
		{"second batch", 1, 2, 0, 0, "events/1[10,20)", 10, -1, 30},
		{"serial tasks", 0, 1, 0, 1, "events/0[0,10)", 0, -1, 0},
		{"a sibling committed first", 1, 1, 0, 0, "events/1[0,10)", 0, 2, 10},
		{"a sibling committed first, second batch", 0, 2, 0, 0, "events/0[10,20)", 10, 1, 40},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := map[int32]int64{0: 0, 1: 0, 2: 5}
				src := newFakeSource(map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 100, 1: 100, 2: 100})
				var log taskLog
				var siblingsCancelled, siblingsRan atomic.Int64
				began := time.Now()
				task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
					defer log.enter(b, r)()
					if b.ID != tc.failBatch {
						return TaskResult{Records: r.Len()}, nil
					}
					if r.Partition == tc.failPart {
						time.Sleep(time.Millisecond) // let the siblings start
						return TaskResult{Records: 1}, fmt.Errorf("writing: %w", boom)
					}
					if r.Partition == tc.commitPart {
						return TaskResult{Records: r.Len()}, nil
					}
					siblingsRan.Add(1)
					select {
					case <-ctx.Done():
						siblingsCancelled.Add(1)
						return TaskResult{}, ctx.Err()
					case <-time.After(time.Hour):
						return TaskResult{Records: r.Len()}, nil
					}
				}
				var starts atomic.Int64
				d := &Driver{
					Source: src, Task: task, Topic: "events", Next: maps.Clone(start),
					LastBatch: tc.lastBatch, Interval: time.Millisecond, MaxRecords: 10,
					Parallelism: tc.parallelism,
					OnStart:     func(Info, []record.Range) { starts.Add(1) },
				}
				sum, err := d.Run(t.Context())
				if err == nil {
					t.Fatal("Run = nil, want the task's error")
				}
				if !errors.Is(err, boom) {
					t.Errorf("Run error %v does not wrap the task's error", err)
				}
				for _, s := range []string{fmt.Sprintf("batch %d", tc.failBatch), tc.wantRange} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("Run error %q does not name %q", err, s)
					}
				}
				if n := log.running.Load(); n != 0 {
					t.Fatalf("%d tasks still running after Run returned", n)
				}
				wantCancelled := int64(2)
				if tc.commitPart >= 0 {
					wantCancelled = 1
				}
				if siblingsRan.Load() != wantCancelled || siblingsCancelled.Load() != wantCancelled {
					t.Errorf("%d siblings ran, %d saw their context cancelled; want %d and %d",
						siblingsRan.Load(), siblingsCancelled.Load(), wantCancelled, wantCancelled)
				}
				if el := time.Since(began); el >= time.Hour {
					t.Errorf("Run took %v: siblings were not cancelled", el)
				}
				if got := sum.Next[tc.failPart]; got != tc.wantNext {
					t.Errorf("Summary.Next[%d] = %d, want %d (not advanced)", tc.failPart, got, tc.wantNext)
				}
				if tc.commitPart >= 0 {
					// The committed sibling's range ends 10 past where its batch began.
					want := start[tc.commitPart] + 10*(tc.failBatch-tc.lastBatch)
					if got := sum.Next[tc.commitPart]; got != want {
						t.Errorf("Summary.Next[%d] = %d, want %d (its task committed)", tc.commitPart, got, want)
					}
				}
				if sum.Records != tc.wantRecords {
					t.Errorf("Summary.Records = %d, want %d (committed tasks only)", sum.Records, tc.wantRecords)
				}
				if got, want := starts.Load(), tc.failBatch-tc.lastBatch; got != want {
					t.Errorf("%d batches started, want %d (none after the failure)", got, want)
				}
				if got, want := sum.Batches, tc.failBatch-tc.lastBatch-1; got != want {
					t.Errorf("Summary.Batches = %d, want %d", got, want)
				}
			})
		})
	}
}

func TestDriverSourceErrors(t *testing.T) {
	unreachable := errors.New("broker unreachable")
	tests := []struct {
		name    string
		start   map[int32]int64
		next    map[int32]int64
		err     error
		wantIs  error
		wantHas string
	}{
		{"bounds fails", map[int32]int64{0: 0}, map[int32]int64{0: 0}, unreachable, unreachable, "reading partition offsets"},
		{"data loss", map[int32]int64{0: 10}, map[int32]int64{0: 3}, nil, ErrDataLoss, "events/0"},
		{"offset ahead", map[int32]int64{0: 0}, map[int32]int64{0: 500}, nil, ErrOffsetAhead, "events/0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := newFakeSource(tc.start, map[int32]int64{0: 100})
				src.err = tc.err
				var log taskLog
				d := &Driver{Source: src, Task: readingTask(&log, src, 0), Topic: "events",
					Next: tc.next, Interval: time.Millisecond}
				_, err := d.Run(t.Context())
				if !errors.Is(err, tc.wantIs) || !strings.Contains(fmt.Sprint(err), tc.wantHas) {
					t.Fatalf("Run = %v, want %v naming %q", err, tc.wantIs, tc.wantHas)
				}
				if len(log.calls()) != 0 {
					t.Errorf("tasks ran despite the error")
				}
			})
		})
	}
}

// TestDriverDropsFencedPartitions: a task whose error Drop accepts loses
// its partition — no batch plans it again, its offset is not moved, its
// records don't count — while the other partitions go on; the run ends
// without error. The same for a batch-level Commit, which drops every
// partition of the batch.
func TestDriverDropsFencedPartitions(t *testing.T) {
	fenced := errors.New("fenced")
	for _, level := range []string{"task", "commit", "prepare"} {
		t.Run(level, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := newFakeSource(map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 100, 1: 100, 2: 100})
				var mu sync.Mutex
				seen := map[int32][]int64{} // partition -> batch ids that planned it
				task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
					mu.Lock()
					seen[r.Partition] = append(seen[r.Partition], b.ID)
					mu.Unlock()
					if level == "task" && r.Partition == 1 && b.ID == 12 {
						return TaskResult{Records: r.Len()}, fmt.Errorf("committing: %w", fenced)
					}
					return TaskResult{Records: r.Len()}, nil
				}
				ids := int64(10)
				var dropped []int32
				var progress []Progress
				d := &Driver{
					Source: src, Task: task, Topic: "events", Next: map[int32]int64{0: 0, 1: 0, 2: 0},
					Interval: 100 * time.Millisecond, MaxRecords: 10, UntilIdle: time.Second,
					Drop:       func(err error) bool { return errors.Is(err, fenced) },
					OnDrop:     func(p int32, err error) { dropped = append(dropped, p) },
					BatchIDs:   func(context.Context) (int64, error) { ids++; return ids, nil },
					OnProgress: func(p Progress) { progress = append(progress, p) },
				}
				if level == "prepare" {
					// A plan refused as a whole (Redis's fenced LogPlan).
					d.Prepare = func(ctx context.Context, b Info, ranges []record.Range) error {
						if b.ID == 12 {
							return fmt.Errorf("logging the plan: %w", fenced)
						}
						return nil
					}
				}
				if level == "commit" {
					d.Commit = func(ctx context.Context, b Info, ranges []record.Range) (CommitResult, error) {
						if b.ID == 12 {
							return CommitResult{}, fmt.Errorf("batch commit: %w", fenced)
						}
						return CommitResult{}, nil
					}
				}
				sum, err := d.Run(t.Context())
				if err != nil {
					t.Fatalf("Run = %v, want nil: a fenced partition must not stop the others", err)
				}
				wantDropped := []int32{1}
				if level != "task" {
					wantDropped = []int32{0, 1, 2}
				}
				slices.Sort(dropped)
				if !slices.Equal(dropped, wantDropped) {
					t.Fatalf("dropped %v, want %v", dropped, wantDropped)
				}
				if sum.Fenced != len(wantDropped) {
					t.Errorf("Summary.Fenced = %d, want %d", sum.Fenced, len(wantDropped))
				}
				wantSeen := []int64{11, 12}
				if level == "prepare" {
					// Refused before any task ran; no progress for it.
					wantSeen = []int64{11}
					if len(progress) != 1 {
						t.Errorf("progress %+v, want batch 11 only", progress)
					}
				} else if progress[1].BatchID != 12 || progress[1].Fenced != len(wantDropped) {
					t.Errorf("progress of the fenced batch = %+v, want batch 12 with Fenced %d", progress[1], len(wantDropped))
				}
				for _, p := range wantDropped {
					if got := seen[p]; !slices.Equal(got, wantSeen) {
						t.Errorf("partition %d ran in batches %v, want %v (never again after the fence)", p, got, wantSeen)
					}
					if _, ok := sum.Next[p]; ok {
						t.Errorf("Summary.Next still has dropped partition %d", p)
					}
				}
				// The first batch (id 11) committed for every partition; the
				// fenced one's records don't count.
				var want int64 = 30
				if level == "task" {
					want = 30 + 20 + 2*80 // batch 12: partitions 0 and 2; then the rest of 0 and 2
				}
				if sum.Records != want {
					t.Errorf("Summary.Records = %d, want %d", sum.Records, want)
				}
			})
		})
	}
}
