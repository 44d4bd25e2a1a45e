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

// The driver tests run inside synctest bubbles: time is virtual (it moves
// only when every goroutine of the bubble is blocked), so intervals and
// idleness are exact and nothing depends on the speed of the machine, and
// synctest.Test fails if a goroutine started by Run is left blocked.

// fakeSource is an in-memory topic. Each Bounds call first applies grow
// (if set) to the partitions' ends, so a test can make the log grow while
// the driver runs.
type fakeSource struct {
	mu     sync.Mutex
	start  map[int32]int64
	end    map[int32]int64
	grow   func(call int, end map[int32]int64)
	calls  int
	err    error // returned by Bounds when set
	reads  atomic.Int64
	topic  string
	badRds atomic.Int64 // Read calls for a range outside the bounds
}

const maxBoundsCalls = 20000

func newFakeSource(start, end map[int32]int64) *fakeSource {
	return &fakeSource{start: maps.Clone(start), end: maps.Clone(end), topic: "events"}
}

func (s *fakeSource) Bounds(ctx context.Context) (map[int32]Bounds, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls > maxBoundsCalls {
		// A driver that never stops would hang the test; fail instead.
		return nil, fmt.Errorf("fake source: more than %d Bounds calls", maxBoundsCalls)
	}
	if s.err != nil {
		return nil, s.err
	}
	if s.grow != nil {
		s.grow(s.calls, s.end)
	}
	out := make(map[int32]Bounds, len(s.end))
	for p, e := range s.end {
		out[p] = Bounds{Start: s.start[p], End: e}
	}
	return out, nil
}

func (s *fakeSource) Read(ctx context.Context, r record.Range, fn func(*Record) error) error {
	s.reads.Add(1)
	s.mu.Lock()
	start, end := s.start[r.Partition], s.end[r.Partition]
	s.mu.Unlock()
	if r.From < start || r.To > end || r.Topic != s.topic {
		s.badRds.Add(1)
		return fmt.Errorf("fake source: range %s outside [%d,%d)", r, start, end)
	}
	for off := r.From; off < r.To; off++ {
		rec := Record{Partition: r.Partition, Offset: off, Value: fmt.Appendf(nil, "%d/%d", r.Partition, off)}
		if err := fn(&rec); err != nil {
			return err
		}
	}
	return nil
}

func (s *fakeSource) boundsCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *fakeSource) ends() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.end)
}

// taskLog records what the driver asked tasks to do and checks the
// concurrency rules as tasks start.
type taskLog struct {
	mu     sync.Mutex
	ranges []taskCall // in start order

	running     atomic.Int64
	maxRunning  atomic.Int64
	partBusy    sync.Map // int32 -> *atomic.Bool
	doubleTasks atomic.Int64
}

type taskCall struct {
	batch Info
	r     record.Range
}

// enter registers a task start; the returned func registers its end.
func (l *taskLog) enter(b Info, r record.Range) func() {
	l.mu.Lock()
	l.ranges = append(l.ranges, taskCall{b, r})
	l.mu.Unlock()
	n := l.running.Add(1)
	for {
		m := l.maxRunning.Load()
		if n <= m || l.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	v, _ := l.partBusy.LoadOrStore(r.Partition, new(atomic.Bool))
	busy := v.(*atomic.Bool)
	if !busy.CompareAndSwap(false, true) {
		l.doubleTasks.Add(1)
	}
	return func() {
		busy.Store(false)
		l.running.Add(-1)
	}
}

func (l *taskLog) calls() []taskCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ranges)
}

// readingTask reads its range from src, checks the records are the range's
// offsets in order, and optionally sleeps (virtual time) to simulate work.
func readingTask(l *taskLog, src Source, work time.Duration) Task {
	return func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
		defer l.enter(b, r)()
		var res TaskResult
		want := r.From
		err := src.Read(ctx, r, func(rec *Record) error {
			if rec.Partition != r.Partition || rec.Offset != want {
				return fmt.Errorf("record %d/%d, want %d/%d", rec.Partition, rec.Offset, r.Partition, want)
			}
			want++
			res.Records++
			return nil
		})
		if err != nil {
			return res, err
		}
		if want != r.To {
			return res, fmt.Errorf("read up to %d, want %d", want, r.To)
		}
		if work > 0 {
			time.Sleep(work)
		}
		res.Attempts = 1
		return res, nil
	}
}

func TestDriverCoversEverythingOnce(t *testing.T) {
	tests := []struct {
		name        string
		start, next map[int32]int64
		end         map[int32]int64
		grow        map[int32]int64 // added to the end on each of the first growFor Bounds calls
		growFor     int
		maxRecords  int64
		parallelism int
		lastBatch   int64
	}{
		{
			name: "static backlog, capped", maxRecords: 7,
			start: map[int32]int64{0: 0, 1: 0, 2: 0},
			next:  map[int32]int64{0: 0, 1: 0, 2: 0},
			end:   map[int32]int64{0: 50, 1: 3, 2: 0},
		},
		{
			name: "growing log, capped", maxRecords: 10, growFor: 12, parallelism: 2, lastBatch: 41,
			start: map[int32]int64{0: 0, 1: 100, 2: 5, 3: 0},
			next:  map[int32]int64{0: 0, 1: 100, 2: 20, 3: 0},
			end:   map[int32]int64{0: 0, 1: 150, 2: 20, 3: 0},
			grow:  map[int32]int64{0: 13, 1: 1, 2: 4, 3: 0},
		},
		{
			name: "growing log, uncapped", growFor: 5,
			start: map[int32]int64{0: 0, 1: 0},
			next:  map[int32]int64{0: 0, 1: 0},
			end:   map[int32]int64{0: 0, 1: 10},
			grow:  map[int32]int64{0: 100, 1: 3},
		},
		{
			name: "cap of one record", maxRecords: 1, parallelism: 1,
			start: map[int32]int64{0: 0, 1: 0},
			next:  map[int32]int64{0: 2, 1: 0},
			end:   map[int32]int64{0: 9, 1: 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := newFakeSource(tc.start, tc.end)
				src.grow = func(call int, end map[int32]int64) {
					if call <= tc.growFor {
						for p, n := range tc.grow {
							end[p] += n
						}
					}
				}
				var log taskLog
				var starts []Info
				var startRanges [][]record.Range
				var progress []Progress
				d := &Driver{
					Source: src, Task: readingTask(&log, src, 3*time.Millisecond), Topic: "events",
					Next: maps.Clone(tc.next), LastBatch: tc.lastBatch, Epoch: 7,
					Interval: 50 * time.Millisecond, MaxRecords: tc.maxRecords, Parallelism: tc.parallelism,
					UntilIdle: time.Second,
					OnStart: func(b Info, rs []record.Range) {
						starts = append(starts, b)
						startRanges = append(startRanges, slices.Clone(rs))
					},
					OnProgress: func(p Progress) { progress = append(progress, p) },
				}
				sum, err := d.Run(t.Context())
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if n := log.running.Load(); n != 0 {
					t.Fatalf("%d tasks still running after Run returned", n)
				}
				if src.badRds.Load() != 0 {
					t.Fatalf("tasks read ranges outside the source's bounds")
				}
				final := src.ends()
				var wantOffsets int64
				for p, n := range tc.next {
					wantOffsets += final[p] - n
				}

				// Batches are numbered on from LastBatch, carry the epoch, and
				// OnStart saw exactly the ranges the tasks got.
				if int64(len(starts)) != sum.Batches || len(progress) != len(starts) {
					t.Fatalf("%d OnStart, %d OnProgress, Summary.Batches %d", len(starts), len(progress), sum.Batches)
				}
				calls := log.calls()
				byBatch := make(map[int64][]record.Range)
				for _, c := range calls {
					if c.batch.Epoch != 7 {
						t.Errorf("task got epoch %d, want 7", c.batch.Epoch)
					}
					byBatch[c.batch.ID] = append(byBatch[c.batch.ID], c.r)
				}
				for i, b := range starts {
					if b.ID != tc.lastBatch+int64(i)+1 {
						t.Fatalf("batch %d has id %d, want %d", i, b.ID, tc.lastBatch+int64(i)+1)
					}
					got := byBatch[b.ID]
					slices.SortFunc(got, func(x, y record.Range) int { return int(x.Partition - y.Partition) })
					if !slices.Equal(got, startRanges[i]) {
						t.Errorf("batch %d: tasks got %v, OnStart %v", b.ID, got, startRanges[i])
					}
					if len(startRanges[i]) == 0 {
						t.Errorf("batch %d has no ranges", b.ID)
					}
					p := progress[i]
					var offs int64
					for _, r := range startRanges[i] {
						offs += r.Len()
					}
					if p.BatchID != b.ID || p.Partitions != len(startRanges[i]) || p.Offsets != offs || p.Records != offs {
						t.Errorf("progress %+v for batch %d with ranges %v", p, b.ID, startRanges[i])
					}
				}
				if len(calls) != len(byBatchRanges(startRanges)) {
					t.Errorf("%d tasks ran, %d ranges were planned", len(calls), len(byBatchRanges(startRanges)))
				}

				// Per partition: contiguous, starting at the stored offset,
				// ending at the final end, each range capped.
				perPart := make(map[int32][]record.Range)
				for _, rs := range startRanges {
					for _, r := range rs {
						perPart[r.Partition] = append(perPart[r.Partition], r)
					}
				}
				for p, n := range tc.next {
					at := n
					for _, r := range perPart[p] {
						if r.From != at {
							t.Fatalf("partition %d: range %s does not start where the previous ended (%d); all: %v", p, r, at, perPart[p])
						}
						if r.Len() <= 0 || (tc.maxRecords > 0 && r.Len() > tc.maxRecords) {
							t.Fatalf("partition %d: range %s has bad length (cap %d)", p, r, tc.maxRecords)
						}
						at = r.To
					}
					if at != final[p] {
						t.Errorf("partition %d: covered up to %d, log ends at %d", p, at, final[p])
					}
					if sum.Next[p] != final[p] {
						t.Errorf("Summary.Next[%d] = %d, want %d", p, sum.Next[p], final[p])
					}
				}
				if sum.Records != wantOffsets {
					t.Errorf("Summary.Records = %d, want %d", sum.Records, wantOffsets)
				}
				if sum.Lag != 0 {
					t.Errorf("Summary.Lag = %d after draining", sum.Lag)
				}
				if wantOffsets == 0 {
					t.Fatal("test case has nothing to read")
				}
			})
		})
	}
}

func byBatchRanges(rs [][]record.Range) []record.Range {
	var out []record.Range
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
}

func TestDriverParallelism(t *testing.T) {
	tests := []struct {
		parallelism int
		partitions  int
		wantMax     int64
	}{
		{1, 6, 1},
		{2, 6, 2},
		{3, 6, 3},
		{0, 6, 6},  // one per partition
		{10, 4, 4}, // never more than there are ranges
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("parallelism=%d/partitions=%d", tc.parallelism, tc.partitions), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start, end := map[int32]int64{}, map[int32]int64{}
				for p := range int32(tc.partitions) {
					start[p], end[p] = 0, 12
				}
				src := newFakeSource(start, end)
				var log taskLog
				d := &Driver{
					Source: src, Task: readingTask(&log, src, 10*time.Millisecond), Topic: "events",
					Next: maps.Clone(start), Interval: time.Millisecond, MaxRecords: 4,
					Parallelism: tc.parallelism, UntilIdle: 100 * time.Millisecond,
				}
				sum, err := d.Run(t.Context())
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if sum.Batches != 3 {
					t.Errorf("%d batches, want 3 (12 records, 4 per batch)", sum.Batches)
				}
				if n := log.doubleTasks.Load(); n != 0 {
					t.Errorf("a partition had two tasks in flight %d times", n)
				}
				if got := log.maxRunning.Load(); got != tc.wantMax {
					t.Errorf("at most %d tasks ran at once, want %d", got, tc.wantMax)
				}
				if n := log.running.Load(); n != 0 {
					t.Errorf("%d tasks still running after Run returned", n)
				}
			})
		})
	}
}

// TestDriverStopLetsBatchFinish cancels Run's context while a batch's tasks
// run: they must finish with a live context, their offsets must count, and
// no further batch may start although more data is waiting.
func TestDriverStopLetsBatchFinish(t *testing.T) {
	tests := []struct {
		name     string
		work     time.Duration // task time after the stop request
		interval time.Duration
	}{
		{"batch within interval", 10 * time.Millisecond, time.Second},
		{"batch overruns interval", 3 * time.Second, time.Second},
		{"no interval", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := map[int32]int64{0: 0, 1: 0, 2: 0}
				src := newFakeSource(start, map[int32]int64{0: 100, 1: 100, 2: 100})
				release := make(chan struct{})
				var log taskLog
				var ctxErrs sync.Map
				task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
					defer log.enter(b, r)()
					<-release
					time.Sleep(tc.work)
					ctxErrs.Store(r.Partition, ctx.Err())
					if ctx.Err() != nil {
						return TaskResult{}, ctx.Err()
					}
					return TaskResult{Records: r.Len()}, nil
				}
				var starts atomic.Int64
				d := &Driver{
					Source: src, Task: task, Topic: "events", Next: maps.Clone(start),
					Interval: tc.interval, MaxRecords: 10,
					OnStart: func(Info, []record.Range) { starts.Add(1) },
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				type result struct {
					sum Summary
					err error
				}
				done := make(chan result, 1)
				go func() {
					sum, err := d.Run(ctx)
					done <- result{sum, err}
				}()
				synctest.Wait() // all three tasks of batch 1 are blocked on release
				if n := log.running.Load(); n != 3 {
					t.Fatalf("%d tasks running, want 3", n)
				}
				cancel()
				synctest.Wait()
				select {
				case r := <-done:
					t.Fatalf("Run returned (%v) while its batch was still running", r.err)
				default:
				}
				close(release)
				r := <-done
				if r.err != nil {
					t.Fatalf("Run after stop = %v, want nil", r.err)
				}
				if n := log.running.Load(); n != 0 {
					t.Fatalf("%d tasks still running after Run returned", n)
				}
				for p := range int32(3) {
					v, ok := ctxErrs.Load(p)
					if !ok {
						t.Fatalf("partition %d task did not finish", p)
					}
					if v != nil {
						t.Errorf("partition %d task saw its context cancelled: %v", p, v)
					}
				}
				if n := starts.Load(); n != 1 {
					t.Errorf("%d batches started, want 1", n)
				}
				if r.sum.Batches != 1 {
					t.Errorf("Summary.Batches = %d, want 1", r.sum.Batches)
				}
				want := map[int32]int64{0: 10, 1: 10, 2: 10}
				if !maps.Equal(r.sum.Next, want) {
					t.Errorf("Summary.Next = %v, want %v (the finished batch counts)", r.sum.Next, want)
				}
				if len(log.calls()) != 3 {
					t.Errorf("%d tasks ran, want 3", len(log.calls()))
				}
			})
		})
	}
}

// TestDriverStopWhileWaiting cancels between batches: Run returns at once.
func TestDriverStopWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := map[int32]int64{0: 0}
		src := newFakeSource(start, map[int32]int64{0: 5})
		var log taskLog
		d := &Driver{Source: src, Task: readingTask(&log, src, 0), Topic: "events",
			Next: maps.Clone(start), Interval: time.Hour}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		began := time.Now()
		go func() {
			_, err := d.Run(ctx)
			done <- err
		}()
		synctest.Wait() // batch 1 done, waiting for the next tick
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if el := time.Since(began); el != 0 {
			t.Errorf("Run took %v of virtual time to stop, want 0", el)
		}
		if n := len(log.calls()); n != 1 {
			t.Errorf("%d tasks ran, want 1", n)
		}
	})
}

// stallingSource is a fakeSource whose partition stall never gets its
// records: Read waits for them until the stop its context carries (or the
// context's end), as KafkaSource does.
type stallingSource struct {
	*fakeSource
	stall int32
}

func (s *stallingSource) Read(ctx context.Context, r record.Range, fn func(*Record) error) error {
	if r.Partition != s.stall {
		return s.fakeSource.Read(ctx, r, fn)
	}
	select {
	case <-StopRequested(ctx):
		return fmt.Errorf("reading %s: %w", r, ErrStopped)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestDriverStopEndsWaitingRead stops a run whose batch has a task waiting
// for records that never come (partition 2), one committing when the stop
// comes (partition 1) and one committed (partition 0). The waiting task
// must give up and roll back, the committing one must finish on a live
// context, and Run must return nil with only the committed partitions
// moved. With a batch-level Commit, nothing of the batch may commit.
func TestDriverStopEndsWaitingRead(t *testing.T) {
	for _, batchCommit := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch commit %v", batchCommit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := map[int32]int64{0: 0, 1: 0, 2: 0}
				src := &stallingSource{fakeSource: newFakeSource(start, map[int32]int64{0: 100, 1: 100, 2: 100}), stall: 2}
				release := make(chan struct{})
				var releaseOnce sync.Once
				releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
				defer releaseAll() // a failed check must not leave the task blocked
				var log taskLog
				read := readingTask(&log, src, 0) // log counts tasks inside Read
				var committing atomic.Int64
				var commitCtxErr atomic.Value
				task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
					res, err := read(ctx, b, r)
					if err != nil || r.Partition != 1 {
						return res, err
					}
					committing.Add(1)
					defer committing.Add(-1)
					<-release // committing while the stop comes
					if err := ctx.Err(); err != nil {
						commitCtxErr.Store(err)
						return res, err
					}
					return res, nil
				}
				var commits atomic.Int64
				d := &Driver{Source: src, Task: task, Topic: "events", Next: maps.Clone(start), MaxRecords: 10}
				if batchCommit {
					d.Commit = func(context.Context, Info, []record.Range) (CommitResult, error) {
						commits.Add(1)
						return CommitResult{}, nil
					}
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				type result struct {
					sum Summary
					err error
				}
				done := make(chan result, 1)
				go func() {
					sum, err := d.Run(ctx)
					done <- result{sum, err}
				}()
				synctest.Wait() // 0 done, 1 committing, 2 waiting for records
				if r, c := log.running.Load(), committing.Load(); r != 1 || c != 1 {
					t.Fatalf("before the stop: %d tasks reading, %d committing; want 1 and 1", r, c)
				}
				cancel()
				synctest.Wait()
				if r, c := log.running.Load(), committing.Load(); r != 0 || c != 1 {
					t.Fatalf("after the stop: %d tasks reading, %d committing; want 0 (the waiting one gave up) and 1", r, c)
				}
				select {
				case r := <-done:
					t.Fatalf("Run returned (%v) while a task was committing", r.err)
				default:
				}
				releaseAll()
				r := <-done
				if r.err != nil {
					t.Fatalf("Run after the stop = %v, want nil (a stop is not a failure)", r.err)
				}
				if err := commitCtxErr.Load(); err != nil {
					t.Errorf("the committing task's context was cancelled: %v", err)
				}
				want := map[int32]int64{0: 10, 1: 10, 2: 0}
				wantRecords := int64(20)
				if batchCommit {
					// Nothing is durable until the batch's Commit, which
					// a batch with a rolled-back task must not reach.
					want, wantRecords = start, 0
					if n := commits.Load(); n != 0 {
						t.Errorf("Commit called %d times for a batch with a rolled-back task", n)
					}
				}
				if !maps.Equal(r.sum.Next, want) {
					t.Errorf("Summary.Next = %v, want %v", r.sum.Next, want)
				}
				if r.sum.Records != wantRecords {
					t.Errorf("Summary.Records = %d, want %d", r.sum.Records, wantRecords)
				}
				if r.sum.RolledBack != 1 {
					t.Errorf("Summary.RolledBack = %d, want 1", r.sum.RolledBack)
				}
				if r.sum.Batches != 0 {
					t.Errorf("Summary.Batches = %d, want 0 (the batch did not complete)", r.sum.Batches)
				}
				if n := len(log.calls()); n != 3 {
					t.Errorf("%d tasks ran, want 3 (no batch after the stop)", n)
				}
			})
		})
	}
}

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

func TestDriverUntilIdle(t *testing.T) {
	trickle := make([]int, 20)
	for i := range trickle {
		trickle[i] = i + 1
	}
	tests := []struct {
		name      string
		end       int64 // records in the single partition
		arrive    []int // Bounds calls at which one more record has arrived
		untilIdle time.Duration
		interval  time.Duration
	}{
		{"empty topic", 0, nil, time.Second, 100 * time.Millisecond},
		{"backlog then idle", 30, nil, time.Second, 100 * time.Millisecond},
		{"trickle then idle", 0, trickle, 500 * time.Millisecond, 100 * time.Millisecond},
		// Idle gaps shorter than UntilIdle don't add up.
		{"gaps shorter than until-idle", 0, []int{1, 5, 9, 13}, 500 * time.Millisecond, 100 * time.Millisecond},
		{"idle shorter than interval", 5, nil, 10 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := newFakeSource(map[int32]int64{0: 0}, map[int32]int64{0: tc.end})
				var lastData time.Time
				src.grow = func(call int, end map[int32]int64) {
					if slices.Contains(tc.arrive, call) {
						end[0]++
					}
				}
				var log taskLog
				d := &Driver{
					Source: src, Task: readingTask(&log, src, 0), Topic: "events",
					Next: map[int32]int64{0: 0}, Interval: tc.interval, MaxRecords: 10, UntilIdle: tc.untilIdle,
					OnStart: func(Info, []record.Range) { lastData = time.Now() },
				}
				began := time.Now()
				sum, err := d.Run(t.Context())
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if want := tc.end + int64(len(tc.arrive)); sum.Next[0] != want {
					t.Errorf("Summary.Next[0] = %d, want %d", sum.Next[0], want)
				}
				if lastData.IsZero() {
					lastData = began
				}
				idle := time.Since(lastData)
				if idle < tc.untilIdle {
					t.Errorf("Run returned after %v of idleness, want at least %v", idle, tc.untilIdle)
				}
				if idle > tc.untilIdle+2*tc.interval {
					t.Errorf("Run returned after %v of idleness, want about %v", idle, tc.untilIdle)
				}
				if sum.Elapsed != time.Since(began) {
					t.Errorf("Summary.Elapsed = %v, virtual time passed %v", sum.Elapsed, time.Since(began))
				}
			})
		})
	}
}

// TestDriverRunsUntilStoppedWithoutUntilIdle: UntilIdle 0 means "never stop
// for idleness"; only the context ends Run.
func TestDriverRunsUntilStoppedWithoutUntilIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newFakeSource(map[int32]int64{0: 0}, map[int32]int64{0: 0})
		var log taskLog
		d := &Driver{Source: src, Task: readingTask(&log, src, 0), Topic: "events",
			Next: map[int32]int64{0: 0}, Interval: time.Second}
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		began := time.Now()
		sum, err := d.Run(ctx)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if el := time.Since(began); el != time.Hour {
			t.Errorf("Run returned after %v, want when the context ended (1h)", el)
		}
		if sum.Batches != 0 {
			t.Errorf("Summary.Batches = %d on an empty topic", sum.Batches)
		}
		// One Bounds call per interval, not a busy loop.
		if n := src.boundsCalls(); n < 3000 || n > 3601 {
			t.Errorf("Bounds called %d times in 1h at a 1s interval", n)
		}
	})
}

// manualClock is a virtual clock: After fires at once and moves the clock
// forward by the duration waited; tasks move it by the time they "take".
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	events []string
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, "wait "+d.String())
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *manualClock) log(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, s)
}

// TestDriverOverrunStartsNextBatchAtOnce: a batch shorter than the interval
// is followed by a wait for the rest of it; a batch that overran is followed
// at once by the next, with no wait in between.
func TestDriverOverrunStartsNextBatchAtOnce(t *testing.T) {
	const interval = 100 * time.Millisecond
	tests := []struct {
		name  string
		works []time.Duration // task time of batches 1..3
		want  []string
	}{
		{
			name:  "within interval",
			works: []time.Duration{30 * time.Millisecond, 99 * time.Millisecond, 0},
			want: []string{"batch 1", "wait 70ms", "batch 2", "wait 1ms", "batch 3", "wait 100ms",
				"idle", "wait 100ms", "idle", "wait 100ms", "idle"},
		},
		{
			name:  "overruns",
			works: []time.Duration{250 * time.Millisecond, 100 * time.Millisecond, 30 * time.Millisecond},
			want:  []string{"batch 1", "batch 2", "batch 3", "wait 70ms", "idle", "wait 100ms", "idle", "wait 100ms", "idle"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &manualClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
			src := newFakeSource(map[int32]int64{0: 0}, map[int32]int64{0: 30})
			task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
				clock.log(fmt.Sprintf("batch %d", b.ID))
				clock.advance(tc.works[b.ID-1])
				return TaskResult{Records: r.Len()}, nil
			}
			var progress []Progress
			calls := 0
			src.grow = func(int, map[int32]int64) {
				calls++
				if calls > 3 {
					clock.log("idle")
				}
			}
			d := &Driver{
				Source: src, Task: task, Topic: "events", Next: map[int32]int64{0: 0},
				Interval: interval, MaxRecords: 10, UntilIdle: 150 * time.Millisecond, Clock: clock,
				OnProgress: func(p Progress) { progress = append(progress, p) },
			}
			sum, err := d.Run(t.Context())
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !slices.Equal(clock.events, tc.want) {
				t.Fatalf("events:\n got %q\nwant %q", clock.events, tc.want)
			}
			if len(progress) != 3 {
				t.Fatalf("%d progress reports, want 3", len(progress))
			}
			var total time.Duration
			for i, p := range progress {
				total += tc.works[i]
				if p.Duration != tc.works[i] {
					t.Errorf("batch %d Duration = %v, want %v (by the driver's clock)", i+1, p.Duration, tc.works[i])
				}
				if want := int64(20 - 10*i); p.Lag != want {
					t.Errorf("batch %d Lag = %d, want %d", i+1, p.Lag, want)
				}
				if tc.works[i] > 0 {
					if want := 10 / tc.works[i].Seconds(); p.RecordsPerSec != want {
						t.Errorf("batch %d RecordsPerSec = %v, want %v", i+1, p.RecordsPerSec, want)
					}
				}
			}
			if sum.Elapsed < total {
				t.Errorf("Summary.Elapsed = %v, less than the batches' %v", sum.Elapsed, total)
			}
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

// TestDriverUntilIdleWaitsForTheJob: with JobLag, a run whose own
// partitions are idle ends only once the whole job is caught up (other
// partitions, held by other processes, lag for a while), stays so for
// UntilIdle, and reports the job's lag.
func TestDriverUntilIdleWaitsForTheJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Partition 0 is ours and caught up; partition 1 is someone else's
		// and catches up after 10 s.
		src := newFakeSource(map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 0, 1: 500})
		began := time.Now()
		var asked int
		jobLag := func(_ context.Context, b map[int32]Bounds) (int64, error) {
			asked++
			if len(b) != 2 {
				t.Errorf("JobLag got bounds of %d partitions, want the whole topic's", len(b))
			}
			if time.Since(began) < 10*time.Second {
				return b[1].End - 100, nil
			}
			return 0, nil
		}
		var log taskLog
		d := &Driver{Source: src, Task: readingTask(&log, src, 0), Topic: "events",
			Next: map[int32]int64{0: 0}, Interval: time.Second, UntilIdle: 2 * time.Second, JobLag: jobLag}
		sum, err := d.Run(t.Context())
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if el := time.Since(began); el < 12*time.Second || el > 13*time.Second {
			t.Errorf("Run returned after %v, want once the job was caught up (10s) plus until-idle (2s)", el)
		}
		if sum.Lag != 0 || asked < 10 {
			t.Errorf("Summary.Lag = %d after %d JobLag calls, want 0 after one per interval", sum.Lag, asked)
		}

		// Stopped while the job lags: the summary says how much.
		d.JobLag = func(context.Context, map[int32]Bounds) (int64, error) { return 400, nil }
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if sum, err = d.Run(ctx); err != nil || sum.Lag != 400 {
			t.Errorf("stopped run: lag %d, err %v; want 400, nil", sum.Lag, err)
		}

		// A job lag that can't be read is an error, not "caught up".
		d.JobLag = func(context.Context, map[int32]Bounds) (int64, error) { return 0, errors.New("sink down") }
		if _, err = d.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "sink down") {
			t.Errorf("Run with a failing JobLag: %v, want its error", err)
		}
	})
}
