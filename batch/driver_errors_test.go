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
	for _, tc := range taskErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFailingBatch(tc)
				sum, err := f.driver().Run(t.Context())
				checkTaskError(t, tc, err)
				f.checkSiblings(t)
				f.checkSummary(t, sum)
			})
		})
	}
}

// errBoom is the error TestDriverTaskError's failing task wraps.
var errBoom = errors.New("boom")

type taskErrorCase struct {
	name        string
	failPart    int32
	failBatch   int64 // batch id that fails
	lastBatch   int64
	parallelism int
	wantRange   string
	wantNext    int64 // Summary.Next[failPart]
	commitPart  int32 // a sibling that commits before the failure; -1: none
	wantRecords int64 // Summary.Records: committed tasks only
}

var taskErrorCases = []taskErrorCase{
	{"first batch, first partition", 0, 1, 0, 0, "events/0[0,10)", 0, -1, 0},
	{"first batch, last partition", 2, 8, 7, 0, "events/2[5,15)", 5, -1, 0},
	{"second batch", 1, 2, 0, 0, "events/1[10,20)", 10, -1, 30},
	{"serial tasks", 0, 1, 0, 1, "events/0[0,10)", 0, -1, 0},
	{"a sibling committed first", 1, 1, 0, 0, "events/1[0,10)", 0, 2, 10},
	{"a sibling committed first, second batch", 0, 2, 0, 0, "events/0[10,20)", 10, 1, 40},
}

// failingBatch is a run of a taskErrorCase: in batch failBatch the task
// of failPart fails, commitPart's (if any) commits first, and the other
// siblings wait an hour for their context's end.
type failingBatch struct {
	tc                             taskErrorCase
	start                          map[int32]int64
	began                          time.Time
	log                            taskLog
	siblingsCancelled, siblingsRan atomic.Int64
	starts                         atomic.Int64
}

func newFailingBatch(tc taskErrorCase) *failingBatch {
	return &failingBatch{tc: tc, start: map[int32]int64{0: 0, 1: 0, 2: 5}, began: time.Now()}
}

func (f *failingBatch) driver() *Driver {
	tc := f.tc
	src := newFakeSource(map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 100, 1: 100, 2: 100})
	task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
		defer f.log.enter(b, r)()
		if b.ID != tc.failBatch {
			return TaskResult{Records: r.Len()}, nil
		}
		if r.Partition == tc.failPart {
			time.Sleep(time.Millisecond) // let the siblings start
			return TaskResult{Records: 1}, fmt.Errorf("writing: %w", errBoom)
		}
		if r.Partition == tc.commitPart {
			return TaskResult{Records: r.Len()}, nil
		}
		f.siblingsRan.Add(1)
		select {
		case <-ctx.Done():
			f.siblingsCancelled.Add(1)
			return TaskResult{}, ctx.Err()
		case <-time.After(time.Hour):
			return TaskResult{Records: r.Len()}, nil
		}
	}
	return &Driver{
		Source: src, Task: task, Topic: "events", Next: maps.Clone(f.start),
		LastBatch: tc.lastBatch, Interval: time.Millisecond, MaxRecords: 10,
		Parallelism: tc.parallelism,
		OnStart:     func(Info, []record.Range) { f.starts.Add(1) },
	}
}

// checkTaskError: Run failed with the task's error, naming its batch and
// range.
func checkTaskError(t *testing.T, tc taskErrorCase, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Run = nil, want the task's error")
	}
	if !errors.Is(err, errBoom) {
		t.Errorf("Run error %v does not wrap the task's error", err)
	}
	for _, s := range []string{fmt.Sprintf("batch %d", tc.failBatch), tc.wantRange} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Run error %q does not name %q", err, s)
		}
	}
}

// checkSiblings: no task is left running, and every sibling that had not
// committed saw its context cancelled instead of waiting its hour.
func (f *failingBatch) checkSiblings(t *testing.T) {
	t.Helper()
	if n := f.log.running.Load(); n != 0 {
		t.Fatalf("%d tasks still running after Run returned", n)
	}
	wantCancelled := int64(2)
	if f.tc.commitPart >= 0 {
		wantCancelled = 1
	}
	if f.siblingsRan.Load() != wantCancelled || f.siblingsCancelled.Load() != wantCancelled {
		t.Errorf("%d siblings ran, %d saw their context cancelled; want %d and %d",
			f.siblingsRan.Load(), f.siblingsCancelled.Load(), wantCancelled, wantCancelled)
	}
	if el := time.Since(f.began); el >= time.Hour {
		t.Errorf("Run took %v: siblings were not cancelled", el)
	}
}

// checkSummary: the failed partition did not move, a sibling that
// committed did, only committed records count, and no batch started after
// the failure.
func (f *failingBatch) checkSummary(t *testing.T, sum Summary) {
	t.Helper()
	tc := f.tc
	if got := sum.Next[tc.failPart]; got != tc.wantNext {
		t.Errorf("Summary.Next[%d] = %d, want %d (not advanced)", tc.failPart, got, tc.wantNext)
	}
	if tc.commitPart >= 0 {
		// The committed sibling's range ends 10 past where its batch began.
		want := f.start[tc.commitPart] + 10*(tc.failBatch-tc.lastBatch)
		if got := sum.Next[tc.commitPart]; got != want {
			t.Errorf("Summary.Next[%d] = %d, want %d (its task committed)", tc.commitPart, got, want)
		}
	}
	if sum.Records != tc.wantRecords {
		t.Errorf("Summary.Records = %d, want %d (committed tasks only)", sum.Records, tc.wantRecords)
	}
	if got, want := f.starts.Load(), tc.failBatch-tc.lastBatch; got != want {
		t.Errorf("%d batches started, want %d (none after the failure)", got, want)
	}
	if got, want := sum.Batches, tc.failBatch-tc.lastBatch-1; got != want {
		t.Errorf("Summary.Batches = %d, want %d", got, want)
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
	for _, level := range []string{"task", "commit", "prepare"} {
		t.Run(level, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fencedRun{level: level, seen: map[int32][]int64{}}
				sum, err := f.driver().Run(t.Context())
				if err != nil {
					t.Fatalf("Run = %v, want nil: a fenced partition must not stop the others", err)
				}
				f.check(t, sum)
			})
		})
	}
}

// errFenced is the error TestDriverDropsFencedPartitions's Drop accepts.
var errFenced = errors.New("fenced")

// fencedRun is a run of TestDriverDropsFencedPartitions where batch 12 is
// fenced at level: partition 1's task, the batch's Commit, or its Prepare.
type fencedRun struct {
	level    string
	mu       sync.Mutex
	seen     map[int32][]int64 // partition -> batch ids that planned it
	dropped  []int32
	progress []Progress
}

func (f *fencedRun) driver() *Driver {
	src := newFakeSource(map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 100, 1: 100, 2: 100})
	task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
		f.mu.Lock()
		f.seen[r.Partition] = append(f.seen[r.Partition], b.ID)
		f.mu.Unlock()
		if f.level == "task" && r.Partition == 1 && b.ID == 12 {
			return TaskResult{Records: r.Len()}, fmt.Errorf("committing: %w", errFenced)
		}
		return TaskResult{Records: r.Len()}, nil
	}
	ids := int64(10)
	d := &Driver{
		Source: src, Task: task, Topic: "events", Next: map[int32]int64{0: 0, 1: 0, 2: 0},
		Interval: 100 * time.Millisecond, MaxRecords: 10, UntilIdle: time.Second,
		Drop:       func(err error) bool { return errors.Is(err, errFenced) },
		OnDrop:     func(p int32, err error) { f.dropped = append(f.dropped, p) },
		BatchIDs:   func(context.Context) (int64, error) { ids++; return ids, nil },
		OnProgress: func(p Progress) { f.progress = append(f.progress, p) },
	}
	if f.level == "prepare" {
		// A plan refused as a whole (Redis's fenced LogPlan).
		d.Prepare = func(ctx context.Context, b Info, ranges []record.Range) error {
			if b.ID == 12 {
				return fmt.Errorf("logging the plan: %w", errFenced)
			}
			return nil
		}
	}
	if f.level == "commit" {
		d.Commit = func(ctx context.Context, b Info, ranges []record.Range) (CommitResult, error) {
			if b.ID == 12 {
				return CommitResult{}, fmt.Errorf("batch commit: %w", errFenced)
			}
			return CommitResult{}, nil
		}
	}
	return d
}

// check: the fenced partitions (1, or the whole batch for Commit and
// Prepare) were dropped, counted, never planned again and left out of
// Summary.Next; the others went on and only their records count.
func (f *fencedRun) check(t *testing.T, sum Summary) {
	t.Helper()
	wantDropped := []int32{1}
	if f.level != "task" {
		wantDropped = []int32{0, 1, 2}
	}
	slices.Sort(f.dropped)
	if !slices.Equal(f.dropped, wantDropped) {
		t.Fatalf("dropped %v, want %v", f.dropped, wantDropped)
	}
	if sum.Fenced != len(wantDropped) {
		t.Errorf("Summary.Fenced = %d, want %d", sum.Fenced, len(wantDropped))
	}
	wantSeen := []int64{11, 12}
	if f.level == "prepare" {
		// Refused before any task ran; no progress for it.
		wantSeen = []int64{11}
		if len(f.progress) != 1 {
			t.Errorf("progress %+v, want batch 11 only", f.progress)
		}
	} else if f.progress[1].BatchID != 12 || f.progress[1].Fenced != len(wantDropped) {
		t.Errorf("progress of the fenced batch = %+v, want batch 12 with Fenced %d", f.progress[1], len(wantDropped))
	}
	for _, p := range wantDropped {
		if got := f.seen[p]; !slices.Equal(got, wantSeen) {
			t.Errorf("partition %d ran in batches %v, want %v (never again after the fence)", p, got, wantSeen)
		}
		if _, ok := sum.Next[p]; ok {
			t.Errorf("Summary.Next still has dropped partition %d", p)
		}
	}
	// The first batch (id 11) committed for every partition; the
	// fenced one's records don't count.
	var want int64 = 30
	if f.level == "task" {
		want = 30 + 20 + 2*80 // batch 12: partitions 0 and 2; then the rest of 0 and 2
	}
	if sum.Records != want {
		t.Errorf("Summary.Records = %d, want %d", sum.Records, want)
	}
}
