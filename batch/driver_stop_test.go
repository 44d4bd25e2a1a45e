package batch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/microbatch/microbatch/record"
)

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
				w := newWaitingRead(batchCommit)
				defer w.releaseAll() // a failed check must not leave the task blocked
				r := w.stopWhileCommitting(t)
				w.check(t, r)
			})
		})
	}
}

// waitingRead is the run of TestDriverStopEndsWaitingRead: partition 0's
// task commits, partition 1's blocks on release while committing, and
// partition 2's read waits for records that never come.
type waitingRead struct {
	batchCommit  bool
	start        map[int32]int64
	d            *Driver
	log          taskLog // counts tasks inside Read
	release      chan struct{}
	releaseOnce  sync.Once
	committing   atomic.Int64
	commitCtxErr atomic.Value
	commits      atomic.Int64 // calls of the batch-level Commit
}

// runResult is what Run returned in its goroutine.
type runResult struct {
	sum Summary
	err error
}

func newWaitingRead(batchCommit bool) *waitingRead {
	w := &waitingRead{
		batchCommit: batchCommit,
		start:       map[int32]int64{0: 0, 1: 0, 2: 0},
		release:     make(chan struct{}),
	}
	src := &stallingSource{fakeSource: newFakeSource(w.start, map[int32]int64{0: 100, 1: 100, 2: 100}), stall: 2}
	read := readingTask(&w.log, src, 0)
	task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
		res, err := read(ctx, b, r)
		if err != nil || r.Partition != 1 {
			return res, err
		}
		w.committing.Add(1)
		defer w.committing.Add(-1)
		<-w.release // committing while the stop comes
		if err := ctx.Err(); err != nil {
			w.commitCtxErr.Store(err)
			return res, err
		}
		return res, nil
	}
	w.d = &Driver{Source: src, Task: task, Topic: "events", Next: maps.Clone(w.start), MaxRecords: 10}
	if batchCommit {
		w.d.Commit = func(context.Context, Info, []record.Range) (CommitResult, error) {
			w.commits.Add(1)
			return CommitResult{}, nil
		}
	}
	return w
}

func (w *waitingRead) releaseAll() { w.releaseOnce.Do(func() { close(w.release) }) }

// stopWhileCommitting starts Run, stops it once partition 1 commits and
// partition 2 waits, checks the waiting task gave up while Run waits for
// the committing one, then lets that one finish.
func (w *waitingRead) stopWhileCommitting(t *testing.T) runResult {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan runResult, 1)
	go func() {
		sum, err := w.d.Run(ctx)
		done <- runResult{sum, err}
	}()
	synctest.Wait() // 0 done, 1 committing, 2 waiting for records
	if r, c := w.log.running.Load(), w.committing.Load(); r != 1 || c != 1 {
		t.Fatalf("before the stop: %d tasks reading, %d committing; want 1 and 1", r, c)
	}
	cancel()
	synctest.Wait()
	if r, c := w.log.running.Load(), w.committing.Load(); r != 0 || c != 1 {
		t.Fatalf("after the stop: %d tasks reading, %d committing; want 0 (the waiting one gave up) and 1", r, c)
	}
	select {
	case r := <-done:
		t.Fatalf("Run returned (%v) while a task was committing", r.err)
	default:
	}
	w.releaseAll()
	return <-done
}

// check: Run returned nil, the committing task kept a live context, and
// only the committed partitions moved; with a batch-level Commit nothing
// moved.
func (w *waitingRead) check(t *testing.T, r runResult) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("Run after the stop = %v, want nil (a stop is not a failure)", r.err)
	}
	if err := w.commitCtxErr.Load(); err != nil {
		t.Errorf("the committing task's context was cancelled: %v", err)
	}
	want := map[int32]int64{0: 10, 1: 10, 2: 0}
	wantRecords := int64(20)
	if w.batchCommit {
		// Nothing is durable until the batch's Commit, which
		// a batch with a rolled-back task must not reach.
		want, wantRecords = w.start, 0
		if n := w.commits.Load(); n != 0 {
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
	if n := len(w.log.calls()); n != 3 {
		t.Errorf("%d tasks ran, want 3 (no batch after the stop)", n)
	}
}

// TestDriverStopEndsWaitingPrepare: a stop while BatchIDs or Prepare waits
// for a sink that is down (they retry until it answers, watching
// StopRequested) ends the run at once, as a stop: Run returns nil and no
// task ran. (Before, both got a context without the stop, and the run
// waited for the sink — 15 minutes by default — past its stop.)
func TestDriverStopEndsWaitingPrepare(t *testing.T) {
	for _, step := range []string{"BatchIDs", "Prepare"} {
		t.Run(step, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := map[int32]int64{0: 0}
				src := newFakeSource(start, map[int32]int64{0: 5})
				var log taskLog
				waiting := make(chan struct{})
				// wait stands for a step that retries a sink that is down:
				// it ends on the stop, or after an hour.
				wait := func(ctx context.Context) error {
					close(waiting)
					select {
					case <-StopRequested(ctx):
						return fmt.Errorf("waiting for the sink: %w", ErrStopped)
					case <-time.After(time.Hour):
						return errors.New("not stopped")
					}
				}
				d := &Driver{Source: src, Task: readingTask(&log, src, 0), Topic: "events",
					Next: maps.Clone(start), Interval: time.Second}
				if step == "BatchIDs" {
					d.BatchIDs = func(ctx context.Context) (int64, error) { return 1, wait(ctx) }
				} else {
					d.Prepare = func(ctx context.Context, b Info, ranges []record.Range) error { return wait(ctx) }
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() {
					_, err := d.Run(ctx)
					done <- err
				}()
				<-waiting
				began := time.Now()
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Run = %v, want nil (a stop)", err)
				}
				if el := time.Since(began); el != 0 {
					t.Errorf("Run took %v of virtual time to stop, want 0", el)
				}
				if n := len(log.calls()); n != 0 {
					t.Errorf("%d tasks ran, want none", n)
				}
			})
		})
	}
}
