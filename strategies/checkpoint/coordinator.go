package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// Bounds of the pipeline's queues: a slow sink fills them and then blocks
// the operators, which block the sources (backpressure, bounded memory).
const (
	chunkRecords = 256 // records per message between stages
	chanChunks   = 8   // messages buffered per channel into an operator
	// sinkChunks are buffered before each sink: it stops reading while it
	// pre-commits and commits (round trips to its server), and this much
	// room lets the sources and operators go on meanwhile.
	sinkChunks = 32
	readSpan   = 20_000
	boundsPoll = 20 * time.Millisecond
	// A source that caught up asks the poller for the ends at once, but
	// polls come at most this often (ListOffsets round trips while the job
	// is idle). It bounds how late a caught-up source sees a new record:
	// polling every boundsPoll only, and the source looking every half of
	// it, made that up to 30 ms (benchmarks/README.md, latency).
	minPollGap  = 5 * time.Millisecond
	staleBounds = time.Second // ends older than this leave the lag unknown
)

// item travels between stages: a chunk of records, or a barrier.
type item struct {
	recs    []output
	barrier int64 // checkpoint id; 0 for records
}

// ackKind is the kind of task that acks.
type ackKind int

const (
	ackSource ackKind = iota
	ackOperator
	ackSink
)

// ack is a task's part of checkpoint n.
type ack struct {
	n       int64
	kind    ackKind
	part    int32
	next    int64             // source: offset to resume at
	records int64             // source: records read since the previous barrier
	dead    int64             // source: of which dead letters
	reason  string            // source: the first dead letter's reason
	state   keyedState        // operator: snapshot
	pending []writers.Pending // sink: transactions not known committed
}

// notice tells a sink that checkpoint n completed; final: stop after it.
type notice struct {
	n     int64
	final bool
}

// pipeline is one attempt: sources, operators and sinks wired by bounded
// channels, and the coordinator (run) that checkpoints them.
type pipeline struct {
	r     *runner
	work  Work
	chk   *offsets.Checkpoint // where this attempt started, then the latest complete
	data  jobData
	parts []int32

	barriers []chan int64  // per source: barrier requests
	toOp     [][]chan item // [operator][source]
	toSink   []chan item   // per operator
	notices  []chan notice // per sink
	acks     chan ack
	sinkDone chan int // a sink finished its final commit

	bounds    atomic.Pointer[map[int32]batch.Bounds]
	boundsAt  atomic.Int64                                                         // unix nanoseconds of the last successful poll
	polled    signal                                                               // fired by every successful poll
	kick      chan struct{}                                                        // a caught-up source asks for a poll now
	read      func(context.Context, record.Range, func(*batch.Record) error) error // r.src.Read; tests replace it
	completed int64
	nextID    int64
	lastDone  time.Time // when the previous checkpoint completed
}

func newPipeline(r *runner, chk *offsets.Checkpoint, data jobData) *pipeline {
	p := &pipeline{r: r, work: r.cfg.Work, chk: chk, data: data, nextID: chk.ID + 1, lastDone: time.Now(), read: r.src.Read}
	for part := range chk.Offsets {
		p.parts = append(p.parts, part)
	}
	nOps := r.cfg.OperatorParallelism
	p.barriers = make([]chan int64, len(p.parts))
	for i := range p.barriers {
		p.barriers[i] = make(chan int64, 1)
	}
	p.toOp = make([][]chan item, nOps)
	p.toSink = make([]chan item, nOps)
	p.notices = make([]chan notice, nOps)
	for o := range nOps {
		p.toOp[o] = make([]chan item, len(p.parts))
		for s := range p.parts {
			p.toOp[o][s] = make(chan item, chanChunks)
		}
		p.toSink[o] = make(chan item, sinkChunks)
		p.notices[o] = make(chan notice, 2)
	}
	p.acks = make(chan ack, len(p.parts)+2*nOps)
	p.kick = make(chan struct{}, 1)
	p.sinkDone = make(chan int, nOps)
	return p
}

// run is the coordinator. It returns nil after a graceful stop (ctx
// cancelled or idle) whose final checkpoint committed, and an error when
// the attempt failed (the caller restarts from the latest checkpoint).
func (p *pipeline) run(ctx context.Context, res *Result) error {
	cfg := p.r.cfg
	// The tasks outlive a stop request: the final checkpoint needs them.
	g, gctx := errgroup.WithContext(context.WithoutCancel(ctx))
	gctx, cancelTasks := context.WithCancel(gctx)
	defer func() {
		cancelTasks()
		_ = g.Wait()
		// Whatever is still open belongs to no complete checkpoint.
		for _, s := range p.r.sinks.open {
			_ = s.Abort(context.WithoutCancel(ctx), writers.Pending{})
		}
	}()
	if err := p.start(gctx, g); err != nil {
		return err
	}
	ticker := time.NewTicker(cfg.Interval)
	defer ticker.Stop()
	var idleSince time.Time
	for {
		final := false
		select {
		case <-ticker.C:
		case <-ctx.Done():
			final = true
		case <-gctx.Done():
			return p.failure(g)
		}
		if cfg.UntilIdle > 0 && !idleSince.IsZero() && time.Since(idleSince) >= cfg.UntilIdle {
			final = true
		}
		prog, err := p.complete(gctx, final, res)
		if err != nil {
			if gctx.Err() != nil {
				return p.failure(g)
			}
			return err
		}
		if final {
			return p.finish(gctx, g, cancelTasks)
		}
		if prog.Lag != 0 || p.boundsStale() {
			// Ends not read lately (Kafka does not answer) leave the lag
			// unknown, not zero: not idle.
			idleSince = time.Time{}
		} else if idleSince.IsZero() {
			idleSince = time.Now()
		}
	}
}

// start reads the offsets once and starts every task in g.
func (p *pipeline) start(ctx context.Context, g *errgroup.Group) error {
	if err := p.pollBounds(ctx); err != nil {
		return err
	}
	g.Go(func() error { return p.poller(ctx) })
	for i, part := range p.parts {
		g.Go(func() error { return p.source(ctx, i, part) })
	}
	for o := range p.r.cfg.OperatorParallelism {
		state := p.data.State.share(o, len(p.toOp))
		g.Go(func() error { return p.operator(ctx, o, state) })
		first := p.nextID // read here: the coordinator advances nextID
		g.Go(func() error { return p.sink(ctx, o, first) })
	}
	return nil
}

// complete takes the next checkpoint, tells the sinks to commit it and
// reports it.
func (p *pipeline) complete(ctx context.Context, final bool, res *Result) (batch.Progress, error) {
	n := p.nextID
	p.nextID++
	chk, prog, err := p.checkpoint(ctx, n)
	if err != nil {
		return prog, err
	}
	p.r.crash(CrashAfterCheckpointBeforeCommit)
	for _, c := range p.notices {
		c <- notice{n: n, final: final}
	}
	p.completed++
	p.r.answered()
	res.Batches++
	res.Records += prog.Records
	res.DeadLetters += prog.DeadLetters
	res.Next = chk.Offsets
	res.Lag = prog.Lag
	if p.r.cfg.OnProgress != nil {
		p.r.cfg.OnProgress(prog)
	}
	return prog, nil
}

// finish waits for every sink's final commit and stops the tasks.
func (p *pipeline) finish(ctx context.Context, g *errgroup.Group, cancelTasks context.CancelFunc) error {
	for range p.notices {
		select {
		case <-p.sinkDone:
		case <-ctx.Done():
			return p.failure(g)
		}
	}
	// Everything is committed: a task failing now (a source read, the
	// next transaction's Begin) changes nothing.
	cancelTasks()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		p.r.log.Warn("after the final checkpoint", "err", err)
	}
	return nil
}

// failure returns the error that stopped the tasks.
func (p *pipeline) failure(g *errgroup.Group) error {
	err := g.Wait()
	if err == nil {
		err = errors.New("pipeline stopped")
	}
	return err
}

// checkpoint injects barrier n, collects every task's ack and saves the
// checkpoint. It fails after Config.Timeout.
func (p *pipeline) checkpoint(ctx context.Context, n int64) (*offsets.Checkpoint, batch.Progress, error) {
	cfg := p.r.cfg
	started := time.Now()
	cfg.Logger.Debug("checkpoint triggered", "checkpoint", n)
	for _, c := range p.barriers {
		c <- n // capacity 1 and one checkpoint at a time: never blocks
	}
	chk := &offsets.Checkpoint{Job: cfg.Job, ID: n, Topic: cfg.Topic, Offsets: map[int32]int64{}}
	prog := batch.Progress{BatchID: n, Partitions: len(p.parts)}
	data, err := p.collect(ctx, chk, &prog)
	if err != nil {
		return nil, prog, err
	}
	chk.Time = time.Now()
	if chk.Data, err = json.Marshal(data); err != nil {
		return nil, prog, err
	}
	saveStart := time.Now()
	if err := p.r.store.Save(ctx, chk); err != nil {
		return nil, prog, err
	}
	prog.MaxCommit = time.Since(saveStart)
	prog.Duration = time.Since(started)
	if b := p.bounds.Load(); b != nil {
		prog.Lag = batch.Lag(chk.Offsets, *b)
		prog.Positions = batch.Positions(chk.Offsets, *b)
	}
	for part, next := range chk.Offsets {
		prog.Offsets += next - p.chk.Offsets[part]
	}
	if since := chk.Time.Sub(p.lastDone); !p.lastDone.IsZero() && since > 0 {
		prog.RecordsPerSec = float64(prog.Records) / since.Seconds()
	}
	p.chk, p.lastDone = chk, chk.Time
	return chk, prog, nil
}

// collect gathers every task's ack of checkpoint chk into chk's offsets,
// prog's counts and the job's data.
func (p *pipeline) collect(ctx context.Context, chk *offsets.Checkpoint, prog *batch.Progress) (jobData, error) {
	cfg := p.r.cfg
	n := chk.ID
	want := len(p.parts) + 2*cfg.OperatorParallelism
	data := jobData{Subtasks: p.data.Subtasks}
	var states []keyedState
	timeout := time.NewTimer(cfg.Timeout)
	defer timeout.Stop()
	for got := 0; got < want; got++ {
		select {
		case a := <-p.acks:
			if a.n != n {
				return data, fmt.Errorf("checkpoint %d: ack of checkpoint %d", n, a.n)
			}
			switch a.kind {
			case ackSource:
				chk.Offsets[a.part] = a.next
				prog.Records += a.records - a.dead
				prog.DeadLetters += a.dead
				if prog.DeadLetterReason == "" {
					prog.DeadLetterReason = a.reason
				}
			case ackOperator:
				states = append(states, a.state)
			case ackSink:
				data.Pending = append(data.Pending, a.pending...)
			}
		case <-timeout.C:
			return data, fmt.Errorf("checkpoint %d timed out after %s (%d of %d tasks acked)", n, cfg.Timeout, got, want)
		case <-ctx.Done():
			return data, ctx.Err()
		}
	}
	data.State = mergeState(states)
	data.Pending = sortedPending(data.Pending)
	return data, nil
}

// ack sends a task's ack to the coordinator.
func (p *pipeline) ack(ctx context.Context, a ack) error {
	select {
	case p.acks <- a:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pollBounds reads the partitions' offsets once.
func (p *pipeline) pollBounds(ctx context.Context) error {
	b, err := p.r.src.Bounds(ctx)
	if err != nil {
		return fmt.Errorf("reading offsets of topic %q: %w", p.r.cfg.Topic, err)
	}
	p.storeBounds(b)
	return nil
}

// storeBounds publishes polled ends and wakes the sources waiting for them.
func (p *pipeline) storeBounds(b map[int32]batch.Bounds) {
	p.bounds.Store(&b)
	p.boundsAt.Store(time.Now().UnixNano())
	p.polled.fire()
}

// boundsStale reports that the partitions' ends were not read for
// staleBounds: the lag computed from them may be a stale zero.
func (p *pipeline) boundsStale() bool {
	return time.Since(time.Unix(0, p.boundsAt.Load())) > staleBounds
}

// poller keeps the last stable offsets fresh for the sources. Kafka not
// answering is an outage under the run's retry policy: logged once, and
// the attempt fails once it lasted past the outage timeout.
func (p *pipeline) poller(ctx context.Context) error {
	t := time.NewTicker(boundsPoll)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-p.kick:
			if gap := minPollGap - time.Since(last); gap > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(gap):
				}
			}
		}
		last = time.Now()
		if err := p.pollBounds(ctx); err != nil {
			if _, ferr := p.r.out.Failed(p.r.kafka, "reading the topic's offsets", err); ferr != nil {
				return fatal{ferr}
			}
			continue
		}
		p.r.out.Up(p.r.kafka)
	}
}

// signal wakes every goroutine waiting on it at the next fire; its zero
// value is ready.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// chunks recycles the record chunks that travel from a source through an
// operator to a sink, which is the last to read one: a chunk is
// chunkRecords outputs, allocated per chunk it would be ~100 bytes per
// record to collect.
var chunks = sync.Pool{New: func() any { c := make([]output, 0, chunkRecords); return &c }}

func newChunk() []output { return (*chunks.Get().(*[]output))[:0] }

// releaseChunk recycles c once nothing reads it any more; its outputs are
// cleared so that a pooled chunk holds no keys, values or dead letters.
func releaseChunk(c []output) {
	if cap(c) != chunkRecords {
		return
	}
	clear(c)
	chunks.Put(&c)
}
