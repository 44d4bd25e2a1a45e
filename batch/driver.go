package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/microbatch/microbatch/record"
	"golang.org/x/sync/errgroup"
)

// minIdlePoll is the shortest wait between two plans that found nothing.
const minIdlePoll = 50 * time.Millisecond

// Record is one Kafka record handed to a task. Key and Value may alias
// buffers owned by the source: copy what must outlive the callback.
type Record struct {
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
}

// Source is where batches read from.
type Source interface {
	// Bounds returns the current start and last stable offset of each
	// partition of the topic.
	Bounds(ctx context.Context) (map[int32]Bounds, error)
	// Read calls fn for every record of r, in offset order, and returns when
	// the range is exhausted. Reading the same range again yields the same
	// records.
	Read(ctx context.Context, r record.Range, fn func(*Record) error) error
}

// Info identifies the batch a task belongs to.
type Info struct {
	ID    int64
	Epoch int64
}

// TaskResult is what a partition task reports.
type TaskResult struct {
	Records     int64 // records processed into results
	DeadLetters int64 // records sent to the dead-letter table
	// DeadLetterReason is the reason of the task's first dead letter
	// ("" without any): what a batch that is mostly dead letters is
	// reported with.
	DeadLetterReason string
	Commit           time.Duration
	Attempts         int
}

// Task processes one partition's range and makes its results and the new
// offset durable. A nil error means committed.
type Task func(ctx context.Context, b Info, r record.Range) (TaskResult, error)

type stopKey struct{}

// WithStop returns a copy of ctx that carries stop, a channel closed when
// the run is asked to stop. The driver gives its tasks such a context
// (whose own Done never fires on a stop): a Source that is waiting for
// records watches StopRequested and gives up with ErrStopped, while work
// that must not be cut short (a commit) goes on.
func WithStop(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

// StopRequested returns the stop channel ctx carries (see WithStop), or
// nil — a channel that never fires — if it carries none.
func StopRequested(ctx context.Context) <-chan struct{} {
	stop, _ := ctx.Value(stopKey{}).(<-chan struct{})
	return stop
}

// Clock is the driver's view of time, replaceable in tests.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Progress describes one committed batch, like Spark's lastProgress.
type Progress struct {
	BatchID     int64
	Partitions  int
	Records     int64
	DeadLetters int64
	// DeadLetterReason is the reason of one of the batch's dead letters
	// (its first committed task's first), "" without any.
	DeadLetterReason string
	Offsets          int64 // offsets spanned, records plus markers
	Duration         time.Duration
	MaxCommit        time.Duration
	RecordsPerSec    float64
	Lag              int64 // offsets left to read after this batch
	Retries          int
	// Fenced counts partitions whose commit the sink refused because
	// another instance owns them now (see Driver.Drop); they were dropped.
	Fenced int
	// Epoch is the epoch the batch committed with (0 in checkpoint mode).
	Epoch int64
	// Positions is where each partition of the run stands after the batch:
	// its next offset and the log's last stable offset when the batch was
	// planned. For status pages and lag metrics; fenced partitions are gone.
	Positions map[int32]PartitionPosition
}

// MostlyDeadLetters reports whether more than half of the batch's records
// were dead-lettered: a sign that the job is wrong for its input (a query
// comparing a number with a string, a field of another type) rather than
// that some records are bad.
func (p Progress) MostlyDeadLetters() bool { return p.DeadLetters > p.Records }

// PartitionPosition is one partition's place in its log.
type PartitionPosition struct {
	Next int64 // next offset to read
	End  int64 // last stable offset (end of the readable log)
}

// Positions pairs each partition of next with its log end in bounds.
func Positions(next map[int32]int64, bounds map[int32]Bounds) map[int32]PartitionPosition {
	pos := make(map[int32]PartitionPosition, len(next))
	for p, n := range next {
		pos[p] = PartitionPosition{Next: n, End: max(bounds[p].End, n)}
	}
	return pos
}

// Summary is reported when Run returns.
type Summary struct {
	Batches     int64
	Records     int64
	DeadLetters int64
	Elapsed     time.Duration
	Lag         int64
	Next        map[int32]int64
	Fenced      int // partitions dropped after a fenced commit
	// RolledBack counts the tasks of the last batch that gave up waiting
	// for records when the run was asked to stop (ErrStopped); their
	// ranges are read again by the next run.
	RolledBack int
}

// Driver runs batches until stopped, idle for UntilIdle, or failed.
type Driver struct {
	Source Source
	Task   Task
	Topic  string
	// Next holds each partition's next offset as stored by the sink. Run
	// works on a copy; Summary.Next reports where the partitions ended.
	Next map[int32]int64
	// LastBatch is the id of the last committed batch; new ones count up.
	LastBatch int64
	Epoch     int64

	Interval    time.Duration
	MaxRecords  int64 // per partition per batch; 0 = no cap
	Parallelism int   // concurrent partition tasks; 0 = one per partition
	UntilIdle   time.Duration

	Clock Clock
	// OnStart is called when a batch has been planned, before its tasks
	// run; OnProgress after it committed.
	OnStart    func(Info, []record.Range)
	OnProgress func(Progress)

	// Prepare, when set, runs after a batch is planned and before any of
	// its tasks: the place to log the plan durably (the `idempotent`
	// strategy's offset log). An error stops the run before the batch.
	// Its ctx carries the run's stop (WithStop): one that waits (for a
	// sink that is down) may give up on it with ErrStopped, which ends the
	// run as a stop, not a failure. So may BatchIDs.
	Prepare func(ctx context.Context, b Info, ranges []record.Range) error

	// Commit, when set, makes a whole batch durable at once after all its
	// tasks returned (the `single` strategy: one transaction for every
	// partition). Tasks then only compute; no partition's offset moves
	// unless Commit succeeds. It gets a context the stop request does not
	// cancel, and reports its retries.
	Commit func(ctx context.Context, b Info, ranges []record.Range) (CommitResult, error)

	// Drop, when set, says which Prepare, task or Commit errors mean "this partition
	// is not ours any more" (a commit fenced by a newer instance of a
	// consumer group). Such a partition is dropped — no batch is planned for
	// it again in this run — and counted in Progress.Fenced, and the run goes
	// on with the others instead of failing. OnDrop is told which.
	Drop   func(err error) bool
	OnDrop func(partition int32, err error)

	// JobLag, when set, is the lag of the whole job as its sink stores it:
	// every partition of the topic, not only those this run was given
	// (the others belong to other processes of the job, live or dead).
	// UntilIdle then ends the run only once the job is caught up — JobLag
	// 0, and this run's partitions idle — and has stayed so for UntilIdle;
	// and Summary.Lag reports it. Asked only while idle.
	JobLag func(ctx context.Context, bounds map[int32]Bounds) (int64, error)

	// BatchIDs, when set, gives each batch its id (a counter shared by the
	// processes of a group, so that none reuses another's); by default ids
	// count up from LastBatch.
	BatchIDs func(ctx context.Context) (int64, error)
}

// CommitResult is what a batch-level Commit reports.
type CommitResult struct {
	Duration time.Duration
	Attempts int
}

// Run drives batches. It returns nil when ctx is cancelled (after the
// running batch finished, or rolled back the tasks that were still waiting
// for records) or after UntilIdle of idleness, and an error when a task
// fails for good or the source can't be read.
func (d *Driver) Run(ctx context.Context) (sum Summary, err error) {
	clock := d.clock()
	r := &run{d: d, next: maps.Clone(d.Next), batchID: d.LastBatch}
	r.sum.Next = r.next
	began := clock.Now()
	defer func() { sum = r.sum; sum.Elapsed = clock.Now().Sub(began) }()
	for ctx.Err() == nil {
		tick := clock.Now()
		ranges, done, err := r.step(ctx, tick)
		if done || err != nil {
			return r.sum, err
		}
		if r.replan {
			// The plan was refused as a whole: plan again at once for
			// the partitions still ours.
			r.replan = false
			continue
		}
		// A batch that overran the interval is followed at once by the next.
		// With no interval, an idle source is still polled at a bounded rate.
		wait := d.Interval - clock.Now().Sub(tick)
		if len(ranges) == 0 {
			wait = max(wait, minIdlePoll)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return r.sum, nil
			case <-clock.After(wait):
			}
		}
	}
	return r.sum, nil
}

// run is the state of one Driver.Run: where each partition is, the last
// batch id, and since when the job has been idle.
type run struct {
	d         *Driver
	next      map[int32]int64
	sum       Summary
	batchID   int64
	idleSince time.Time
	replan    bool // the last plan was refused as a whole
}

// step plans the next batch at tick and runs it, or notes the idleness. It
// returns the planned ranges (none when idle), and done when the run is
// over without error: idle for UntilIdle, or stopped mid-batch.
func (r *run) step(ctx context.Context, tick time.Time) (ranges []record.Range, done bool, err error) {
	d := r.d
	bounds, err := d.Source.Bounds(ctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrStopped) {
			return nil, true, nil // a stop, not a failure (a source that retries gives up on the stop request)
		}
		return nil, false, fmt.Errorf("reading partition offsets: %w", err)
	}
	if ranges, err = Plan(d.Topic, r.next, bounds, d.MaxRecords); err != nil {
		return nil, false, err
	}
	r.sum.Lag = Lag(r.next, bounds)
	if len(ranges) == 0 {
		done, err = r.idle(ctx, tick, bounds)
		return nil, done, err
	}
	r.idleSince = time.Time{}
	done, err = r.batch(ctx, ranges, bounds)
	return ranges, done, err
}

// idle notes a plan that found nothing, and says whether the run has been
// idle — the whole job caught up, when JobLag is set — for UntilIdle.
func (r *run) idle(ctx context.Context, tick time.Time, bounds map[int32]Bounds) (done bool, err error) {
	d := r.d
	caughtUp := true
	if d.JobLag != nil && d.UntilIdle > 0 {
		if r.sum.Lag, err = d.JobLag(ctx, bounds); err != nil {
			if ctx.Err() != nil {
				return true, nil // a stop, not a failure
			}
			return false, fmt.Errorf("reading the job's positions: %w", err)
		}
		caughtUp = r.sum.Lag == 0
	}
	switch {
	case !caughtUp:
		r.idleSince = time.Time{}
	case r.idleSince.IsZero():
		r.idleSince = tick
	}
	return d.UntilIdle > 0 && caughtUp && tick.Sub(r.idleSince) >= d.UntilIdle, nil
}

// batch prepares, runs and accounts one batch of ranges. It returns done
// when a stop rolled the batch's waiting tasks back.
func (r *run) batch(ctx context.Context, ranges []record.Range, bounds map[int32]Bounds) (done bool, err error) {
	d := r.d
	if r.batchID, err = d.nextBatchID(ctx, r.batchID); err != nil {
		if errors.Is(err, ErrStopped) && ctx.Err() != nil {
			return true, nil // a stop while the sink was down: no batch began
		}
		return false, err
	}
	b := Info{ID: r.batchID, Epoch: d.Epoch}
	if d.Prepare != nil {
		// A stop ends a Prepare that waits (for a sink that is down) with
		// ErrStopped: the batch reads nothing, and a plan that was
		// recorded after all is finished by the next session's recovery.
		if err := d.Prepare(WithStop(context.WithoutCancel(ctx), ctx.Done()), b, ranges); err != nil {
			if errors.Is(err, ErrStopped) && ctx.Err() != nil {
				return true, nil
			}
			err = fmt.Errorf("preparing batch %d: %w", b.ID, err)
			if !d.drops(err) {
				return false, err
			}
			// Refused for the plan as a whole: none of its partitions is
			// ours for sure any more.
			for _, rg := range ranges {
				r.drop(rg.Partition, err)
			}
			r.sum.Fenced += len(ranges)
			r.replan = true
			return false, nil
		}
	}
	if d.OnStart != nil {
		d.OnStart(b, ranges)
	}
	p, rolledBack, err := d.runBatch(ctx, b, ranges, r.next)
	r.sum.Records += p.Records // committed partitions only, even on error
	r.sum.DeadLetters += p.DeadLetters
	r.sum.Fenced += p.Fenced
	if errors.Is(err, ErrStopped) && ctx.Err() != nil {
		// A stop, not a failure: what committed counts, the rest rolled
		// back and is read again by the next run.
		r.sum.RolledBack = rolledBack
		return true, nil
	}
	if err != nil {
		return false, err
	}
	r.sum.Batches++
	p.Lag = Lag(r.next, bounds)
	p.Positions = Positions(r.next, bounds)
	r.sum.Lag = p.Lag
	if d.OnProgress != nil {
		d.OnProgress(p)
	}
	return false, nil
}

// drop forgets a partition that is not ours any more.
func (r *run) drop(partition int32, err error) {
	delete(r.next, partition)
	if r.d.OnDrop != nil {
		r.d.OnDrop(partition, err)
	}
}

// tasks is what the tasks of one batch reported, range by range.
type tasks struct {
	results   []TaskResult
	committed []bool
	dropped   []error // not ours any more (Drop said so)
	stopped   []error // gave up waiting for records on the stop
}

// runBatch runs one task per range, at most Parallelism at a time. Tasks
// get a context that the caller's stop request does not cancel, so a batch
// in flight finishes, but that carries the stop (WithStop) for reads that
// wait; a failing task cancels its siblings, which roll back. A task that
// gave up on the stop (ErrStopped) does not: a sibling may be committing.
// It also returns how many tasks rolled back on the stop.
func (d *Driver) runBatch(ctx context.Context, b Info, ranges []record.Range, next map[int32]int64) (_ Progress, rolledBack int, _ error) {
	start := d.clock().Now()
	t, err := d.runTasks(ctx, b, ranges)
	p := Progress{BatchID: b.ID, Partitions: len(ranges), Epoch: b.Epoch}
	var stop error
	for _, e := range t.stopped {
		if e != nil {
			rolledBack++
			stop = cmp.Or(stop, e)
		}
	}
	if err == nil {
		err = stop
	}
	if d.Commit != nil {
		err = d.commitBatch(ctx, b, ranges, t, &p, err)
	}
	d.account(t, ranges, next, &p)
	if err != nil {
		return p, rolledBack, err
	}
	p.Duration = d.clock().Now().Sub(start)
	if s := p.Duration.Seconds(); s > 0 {
		p.RecordsPerSec = float64(p.Records+p.DeadLetters) / s
	}
	return p, 0, nil
}

// runTasks runs the batch's tasks and returns what each reported, and the
// first error that is neither a drop nor a stop.
func (d *Driver) runTasks(ctx context.Context, b Info, ranges []record.Range) (tasks, error) {
	t := tasks{
		results:   make([]TaskResult, len(ranges)),
		committed: make([]bool, len(ranges)),
		dropped:   make([]error, len(ranges)),
		stopped:   make([]error, len(ranges)),
	}
	g, gctx := errgroup.WithContext(WithStop(context.WithoutCancel(ctx), ctx.Done()))
	if d.Parallelism > 0 {
		g.SetLimit(d.Parallelism)
	}
	for i, r := range ranges {
		g.Go(func() error {
			res, err := d.Task(gctx, b, r)
			t.results[i] = res
			if err != nil {
				err = fmt.Errorf("batch %d, %s: %w", b.ID, r, err)
				if d.drops(err) {
					// Not ours any more: the others go on.
					t.dropped[i] = err
					return nil
				}
				if errors.Is(err, ErrStopped) && ctx.Err() != nil {
					// Rolled back on the stop; let the others finish.
					t.stopped[i] = err
					return nil
				}
				return err
			}
			t.committed[i] = true
			return nil
		})
	}
	return t, g.Wait()
}

// commitBatch makes a batch whose tasks only computed durable with the
// batch-level Commit, for every partition at once — unless the tasks
// failed (err). It returns the batch's error.
func (d *Driver) commitBatch(ctx context.Context, b Info, ranges []record.Range, t tasks, p *Progress, err error) error {
	if err == nil {
		var cr CommitResult
		cr, err = d.Commit(context.WithoutCancel(ctx), b, ranges)
		p.MaxCommit = cr.Duration
		if cr.Attempts > 1 {
			p.Retries += cr.Attempts - 1
		}
		if err != nil {
			err = fmt.Errorf("batch %d: %w", b.ID, err)
			if d.drops(err) {
				// One transaction for all: all of them were refused.
				for i := range t.dropped {
					t.dropped[i] = err
				}
				err = nil
			}
		}
	}
	if err != nil || t.dropped[0] != nil {
		clear(t.committed)
	}
	return err
}

// account drops the partitions that are not ours any more and moves the
// committed ones on, adding their counts to p. A task that failed rolled
// back: its records count for nothing, and its partition's offset stays.
func (d *Driver) account(t tasks, ranges []record.Range, next map[int32]int64, p *Progress) {
	for i, r := range ranges {
		if t.dropped[i] != nil {
			delete(next, r.Partition)
			p.Fenced++
			if d.OnDrop != nil {
				d.OnDrop(r.Partition, t.dropped[i])
			}
		}
	}
	for i, r := range ranges {
		if !t.committed[i] {
			continue
		}
		next[r.Partition] = r.To
		res := t.results[i]
		p.Records += res.Records
		p.DeadLetters += res.DeadLetters
		if p.DeadLetterReason == "" {
			p.DeadLetterReason = res.DeadLetterReason
		}
		p.Offsets += r.Len()
		p.MaxCommit = max(p.MaxCommit, res.Commit)
		if res.Attempts > 1 {
			p.Retries += res.Attempts - 1
		}
	}
}

func (d *Driver) drops(err error) bool { return d.Drop != nil && d.Drop(err) }

func (d *Driver) nextBatchID(ctx context.Context, last int64) (int64, error) {
	if d.BatchIDs == nil {
		return last + 1, nil
	}
	// The stop is carried (WithStop): a BatchIDs that waits for a sink
	// that is down gives up on it with ErrStopped.
	id, err := d.BatchIDs(WithStop(context.WithoutCancel(ctx), ctx.Done()))
	if err != nil {
		return 0, fmt.Errorf("allocating a batch id: %w", err)
	}
	return id, nil
}

func (d *Driver) clock() Clock {
	if d.Clock == nil {
		return realClock{}
	}
	return d.Clock
}
