package strategies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// Bounds of the pipeline's queues: a slow sink fills them and then blocks
// the operators, which block the sources (backpressure, bounded memory).
const (
	chunkRecords   = 256 // records per message between stages
	chanChunks     = 8   // messages buffered per channel
	readSpan       = 20_000
	boundsPoll     = 20 * time.Millisecond
	maxPollErrors  = 50 // consecutive failed offset polls before the attempt fails
	commitAttempts = 20 // a Commit is retried this often before the attempt fails (and recovery retries it)
)

// chunkDeadBytes ends a message early once its dead letters carry this
// much payload: a dead letter holds its whole record (up to the broker's
// message size), so chunkRecords of them could be hundreds of MiB.
const chunkDeadBytes = 256 << 10

// item travels between stages: a chunk of records, or a barrier.
type item struct {
	recs    []output
	barrier int64 // checkpoint id; 0 for records
}

// ack is a task's part of checkpoint n.
type ack struct {
	n       int64
	kind    int // ackSource, ackOperator, ackSink
	part    int32
	next    int64               // source: offset to resume at
	records int64               // source: records read since the previous barrier
	dead    int64               // source: of which dead letters
	state   map[string]keyState // operator: snapshot
	pending []writers.Pending   // sink: transactions not known committed
}

const (
	ackSource = iota
	ackOperator
	ackSink
)

// notice tells a sink that checkpoint n completed; final: stop after it.
type notice struct {
	n     int64
	final bool
}

// pipeline is one attempt: sources, operators and sinks wired by bounded
// channels, and the coordinator (run) that checkpoints them.
type pipeline struct {
	r     *ckptRunner
	tw    streamWork          // the Transform, nil for the built-in job
	chk   *offsets.Checkpoint // where this attempt started
	data  ckptData
	parts []int32

	barriers []chan int64  // per source: barrier requests
	toOp     [][]chan item // [operator][source]
	toSink   []chan item   // per operator
	notices  []chan notice // per sink
	acks     chan ack
	sinkDone chan int // a sink finished its final commit

	bounds    atomic.Pointer[map[int32]batch.Bounds]
	completed int64
	nextID    int64
	lastDone  time.Time // when the previous checkpoint completed
}

func newPipeline(r *ckptRunner, chk *offsets.Checkpoint, data ckptData) *pipeline {
	p := &pipeline{r: r, tw: streamWorkOf(r.cfg), chk: chk, data: data, nextID: chk.ID + 1, lastDone: time.Now()}
	for part := range chk.Offsets {
		p.parts = append(p.parts, part)
	}
	nOps := r.cfg.Checkpoint.OperatorParallelism
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
		p.toSink[o] = make(chan item, chanChunks)
		p.notices[o] = make(chan notice, 2)
	}
	p.acks = make(chan ack, len(p.parts)+2*nOps)
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

	if err := p.pollBounds(gctx); err != nil {
		return err
	}
	g.Go(func() error { return p.poller(gctx) })
	for i, part := range p.parts {
		g.Go(func() error { return p.source(gctx, i, part) })
	}
	for o := range cfg.Checkpoint.OperatorParallelism {
		state := p.operatorState(o)
		g.Go(func() error { return p.operator(gctx, o, state) })
		first := p.nextID // read here: the coordinator advances nextID
		g.Go(func() error { return p.sink(gctx, o, first) })
	}

	ticker := time.NewTicker(cfg.Checkpoint.Interval)
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
		n := p.nextID
		p.nextID++
		chk, prog, err := p.checkpoint(gctx, n)
		if err != nil {
			if gctx.Err() != nil {
				return p.failure(g)
			}
			return err
		}
		p.r.crash(CrashAfterCheckpointBeforeCommit)
		for _, c := range p.notices {
			c <- notice{n: n, final: final}
		}
		p.completed++
		res.Batches++
		res.Records += prog.Records
		res.DeadLetters += prog.DeadLetters
		res.Next = chk.Offsets
		res.Lag = prog.Lag
		if cfg.OnProgress != nil {
			cfg.OnProgress(prog)
		}
		if final {
			for range p.notices {
				select {
				case <-p.sinkDone:
				case <-gctx.Done():
					return p.failure(g)
				}
			}
			// Everything is committed: a task failing now (a source read,
			// the next transaction's Begin) changes nothing.
			cancelTasks()
			if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
				cfg.Logger.Warn("after the final checkpoint", "err", err)
			}
			return nil
		}
		if prog.Lag == 0 {
			if idleSince.IsZero() {
				idleSince = time.Now()
			}
		} else {
			idleSince = time.Time{}
		}
	}
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
// checkpoint. It fails after CheckpointTimeout.
func (p *pipeline) checkpoint(ctx context.Context, n int64) (*offsets.Checkpoint, batch.Progress, error) {
	cfg := p.r.cfg
	started := time.Now()
	cfg.Logger.Debug("checkpoint triggered", "checkpoint", n)
	for _, c := range p.barriers {
		c <- n // capacity 1 and one checkpoint at a time: never blocks
	}
	want := len(p.parts) + 2*cfg.Checkpoint.OperatorParallelism
	chk := &offsets.Checkpoint{Job: cfg.Job, ID: n, Topic: cfg.Topic, Offsets: map[int32]int64{}}
	data := ckptData{Subtasks: p.data.Subtasks}
	var states []map[string]keyState
	prog := batch.Progress{BatchID: n, Partitions: len(p.parts)}
	timeout := time.NewTimer(cfg.Checkpoint.Timeout)
	defer timeout.Stop()
	for got := 0; got < want; got++ {
		select {
		case a := <-p.acks:
			if a.n != n {
				return nil, prog, fmt.Errorf("checkpoint %d: ack of checkpoint %d", n, a.n)
			}
			switch a.kind {
			case ackSource:
				chk.Offsets[a.part] = a.next
				prog.Records += a.records - a.dead
				prog.DeadLetters += a.dead
			case ackOperator:
				states = append(states, a.state)
			case ackSink:
				data.Pending = append(data.Pending, a.pending...)
			}
		case <-timeout.C:
			return nil, prog, fmt.Errorf("checkpoint %d timed out after %s (%d of %d tasks acked)", n, cfg.Checkpoint.Timeout, got, want)
		case <-ctx.Done():
			return nil, prog, ctx.Err()
		}
	}
	data.State = mergeState(states)
	data.Pending = sortedPending(data.Pending)
	chk.Time = time.Now()
	var err error
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

// pollBounds reads the partitions' offsets once.
func (p *pipeline) pollBounds(ctx context.Context) error {
	b, err := p.r.src.Bounds(ctx)
	if err != nil {
		return fmt.Errorf("reading offsets of topic %q: %w", p.r.cfg.Topic, err)
	}
	p.bounds.Store(&b)
	return nil
}

// poller keeps the last stable offsets fresh for the sources.
func (p *pipeline) poller(ctx context.Context) error {
	t := time.NewTicker(boundsPoll)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := p.pollBounds(ctx); err != nil {
			if fails++; fails >= maxPollErrors {
				return err
			}
			continue
		}
		fails = 0
	}
}

// source reads one partition from the checkpoint's offset on, routes each
// record to the operator owning its key, and turns barrier requests into
// acks and barriers downstream.
func (p *pipeline) source(ctx context.Context, idx int, part int32) error {
	cfg := p.r.cfg
	nOps := len(p.toOp)
	next := p.chk.Offsets[part]
	var records, dead int64
	bufs := make([][]output, nOps)
	deadBytes := make([]int, nOps) // of the dead letters in bufs[o]
	send := func(o int) error {
		if len(bufs[o]) == 0 {
			return nil
		}
		select {
		case p.toOp[o][idx] <- item{recs: bufs[o]}:
			bufs[o], deadBytes[o] = make([]output, 0, chunkRecords), 0
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	flush := func() error {
		for o := range nOps {
			if err := send(o); err != nil {
				return err
			}
		}
		return nil
	}
	barrier := func(n int64) error {
		if err := flush(); err != nil {
			return err
		}
		if err := p.ack(ctx, ack{n: n, kind: ackSource, part: part, next: next, records: records, dead: dead}); err != nil {
			return err
		}
		records, dead = 0, 0
		for o := range nOps {
			select {
			case p.toOp[o][idx] <- item{barrier: n}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		p.r.crash(CrashAfterBarrier)
		return nil
	}
	var ev event.Event
	readFails := 0
	for {
		end := (*p.bounds.Load())[part].End
		if next >= end {
			select {
			case n := <-p.barriers[idx]:
				if err := barrier(n); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(boundsPoll / 2):
			}
			continue
		}
		r := record.Range{Topic: cfg.Topic, Partition: part, From: next, To: min(end, next+readSpan)}
		err := p.r.src.Read(ctx, r, func(rec *batch.Record) error {
			var o output
			target := 0
			if p.tw != nil {
				// A Transform: every value goes to subtask 0, which turns
				// the interval's values into rows (see transformTarget).
				v, derr := p.tw.decodeAny(rec)
				if derr != nil {
					dl := deadLetter(cfg.Job, cfg.Topic, rec, derr)
					o.Dead = &dl
					target = int(part) % nOps
					dead++
				} else {
					o.Val = v
					target = transformTarget
				}
			} else if derr := event.Decode(rec.Value, &ev); derr != nil {
				dl := deadLetter(cfg.Job, cfg.Topic, rec, derr)
				o.Dead = &dl
				target = int(part) % nOps
				dead++
			} else {
				o = output{ID: ev.ID, Amount: ev.Amount, TS: ev.TS, Key: string(ev.Key)}
				target = keyOwner(ev.Key, nOps)
			}
			records++
			next = rec.Offset + 1
			bufs[target] = append(bufs[target], o)
			if o.Dead != nil {
				deadBytes[target] += dlSize(o.Dead)
			}
			if len(bufs[target]) >= chunkRecords || deadBytes[target] >= chunkDeadBytes {
				if err := send(target); err != nil {
					return err
				}
			}
			select {
			case n := <-p.barriers[idx]:
				return barrier(n)
			default:
				return nil
			}
		})
		if err != nil {
			if readFails++; batch.IsRetryable(err) && ctx.Err() == nil && readFails < maxAttempts {
				// Re-read from next: nothing past it was emitted.
				if err := sleepBackoff(ctx, readFails); err != nil {
					return err
				}
				continue
			}
			return err
		}
		readFails = 0
		next = r.To // the range's tail may be markers with no record
		if err := flush(); err != nil {
			return err
		}
	}
}

// transformTarget is the operator and sink subtask that a Transform's
// values go to: all of them, so that one rows call per checkpoint sees the
// whole interval and one transaction writes every row of the user's table.
// Spreading them would let two subtasks write the same row in one
// checkpoint: with XA, the first one's prepared branch holds the row lock
// until the checkpoint completes, which waits for the second one's
// pre-commit, which waits for that lock (a deadlock until the lock wait
// times out); and with MergeReplace their commit order would pick the
// value. The rows' keys are known only after rows, so they can't be routed
// by key before it.
const transformTarget = 0

// keyOwner is the operator instance that owns key.
func keyOwner(key []byte, n int) int {
	if n == 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32() % uint32(n))
}

// operatorState is operator o's share of the checkpoint's keyed state,
// split by key owner, so the parallelism may change between runs.
func (p *pipeline) operatorState(o int) map[string]keyState {
	n := len(p.toOp)
	out := map[string]keyState{}
	for k, v := range p.data.State {
		if keyOwner([]byte(k), n) == o {
			out[k] = v
		}
	}
	return out
}

// operator keeps per-key running totals. It aligns barriers: an input
// whose barrier n arrived is not read until every input's has, so the
// snapshot holds exactly the records before barrier n.
func (p *pipeline) operator(ctx context.Context, o int, state map[string]keyState) error {
	inputs := p.toOp[o]
	cases := make([]reflect.SelectCase, len(inputs)+1)
	for i, c := range inputs {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)}
	}
	cases[len(inputs)] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	blocked := 0
	var aligning int64
	out := p.toSink[o]
	emit := func(it item) error {
		select {
		case out <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		chosen, v, _ := reflect.Select(cases)
		if chosen == len(inputs) {
			return ctx.Err()
		}
		it := v.Interface().(item)
		if it.barrier == 0 && p.tw != nil {
			// A Transform keeps no keyed state: the values pass to the
			// sink, which writes them into the interval's transaction.
			if err := emit(it); err != nil {
				return err
			}
			continue
		}
		if it.barrier == 0 {
			for i := range it.recs {
				r := &it.recs[i]
				if r.Dead != nil {
					continue
				}
				st := state[r.Key]
				st.Events++
				st.Total.Add(r.Amount) // exact: int64 while it fits, math/big beyond
				state[r.Key] = st
				r.Count, r.Total = st.Events, st.Total
			}
			if err := emit(it); err != nil {
				return err
			}
			continue
		}
		if blocked > 0 && it.barrier != aligning {
			return fmt.Errorf("operator %d: barrier %d while aligning %d", o, it.barrier, aligning)
		}
		aligning = it.barrier
		cases[chosen].Chan = reflect.Value{} // hold this input
		if blocked++; blocked < len(inputs) {
			continue
		}
		if err := p.ack(ctx, ack{n: aligning, kind: ackOperator, state: maps.Clone(state)}); err != nil {
			return err
		}
		if err := emit(it); err != nil {
			return err
		}
		for i, c := range inputs {
			cases[i].Chan = reflect.ValueOf(c)
		}
		blocked = 0
	}
}

// sink writes an operator's output into its subtask's transactions:
// pre-commit and ack on a barrier, commit when told the checkpoint is
// complete.
func (p *pipeline) sink(ctx context.Context, o int, first int64) error {
	w := p.r.sinks.open[o]
	open := first // the transaction being written: the next barrier's
	var pending []writers.Pending
	commit := func(nt notice) error {
		rest := pending[:0]
		for _, pd := range pending {
			if pd.Txn > nt.n {
				rest = append(rest, pd)
				continue
			}
			if err := p.commit(ctx, w, pd); err != nil {
				return err
			}
			p.r.crash(CrashMidCommit)
		}
		pending = rest
		if nt.final {
			select {
			case p.sinkDone <- o:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	if err := w.Begin(ctx, open); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case nt := <-p.notices[o]:
			if err := commit(nt); err != nil {
				return err
			}
		case it := <-p.toSink[o]:
			if it.barrier == 0 {
				if err := w.write(ctx, it.recs); err != nil {
					return err
				}
				continue
			}
			if it.barrier != open {
				return fmt.Errorf("sink %d: barrier %d while transaction %d is open", o, it.barrier, open)
			}
			// Checkpoint n-1's commit was sent before barrier n: finish it
			// first, so that this ack lists nothing already committed.
		drain:
			for {
				select {
				case nt := <-p.notices[o]:
					if err := commit(nt); err != nil {
						return err
					}
				default:
					break drain
				}
			}
			if err := w.flush(ctx); err != nil {
				return err
			}
			pd, err := w.PreCommit(ctx)
			if err != nil {
				return err
			}
			p.r.crash(CrashAfterPrecommit)
			pending = append(pending, pd)
			if err := p.ack(ctx, ack{n: it.barrier, kind: ackSink, pending: append([]writers.Pending(nil), pending...)}); err != nil {
				return err
			}
			open = it.barrier + 1
			if err := w.Begin(ctx, open); err != nil {
				return err
			}
		}
	}
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

// commit finishes a pre-committed transaction, retrying while the outcome
// may change. It never aborts: a checkpoint lists this transaction.
func (p *pipeline) commit(ctx context.Context, w ckptSink, pd writers.Pending) error {
	for attempt := 1; ; attempt++ {
		err := w.Commit(ctx, pd)
		if err == nil {
			return nil
		}
		// Commit is idempotent, so any other failure may be retried.
		if errors.Is(err, writers.ErrTxnLost) || attempt >= commitAttempts {
			return fmt.Errorf("committing %s transaction %s of checkpoint %d: %w", pd.Sink, pd.ID, pd.Txn, err)
		}
		p.r.log.Warn("retrying commit", "sink", pd.Sink, "txn", pd.ID, "attempt", attempt, "err", err)
		if err := sleepBackoff(ctx, min(attempt, 5)); err != nil {
			return err
		}
	}
}
