package batch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/microbatch/microbatch/record"
)

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

func byBatchRanges(rs [][]record.Range) []record.Range {
	var out []record.Range
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
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
