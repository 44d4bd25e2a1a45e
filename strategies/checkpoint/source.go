package checkpoint

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
)

// chunkDeadBytes ends a message early once its dead letters carry this
// much payload: a dead letter holds its whole record (up to the broker's
// message size), so chunkRecords of them could be hundreds of MiB.
const chunkDeadBytes = 256 << 10

// transformTarget is the operator and sink subtask that a Transform's
// values go to: all of them, so that one Rows call per checkpoint sees the
// whole interval and one transaction writes every row of the user's table.
// Spreading them would let two subtasks write the same row in one
// checkpoint: with XA, the first one's prepared branch holds the row lock
// until the checkpoint completes, which waits for the second one's
// pre-commit, which waits for that lock (a deadlock until the lock wait
// times out); and with MergeReplace their commit order would pick the
// value. The rows' keys are known only after Rows, so they can't be
// routed by key before it.
const transformTarget = 0

// sourceTask is one partition's source: it reads the partition from the
// checkpoint's offset on, routes each record to the operator owning its
// key, and turns barrier requests into acks and barriers downstream.
//
// Two goroutines share it: the reader (run) and the barrier taker
// (takeBarriers), so that a barrier is taken while a Read waits for
// records. Until it is, every operator holds the other sources' inputs
// that brought the barrier (alignment): one source waiting on a fetch
// would stall the whole pipeline. mu orders them: a barrier lies between
// two emitted records, never inside one's handling, so a record is
// before it (in the ack's next offset, sent ahead of it) or after.
type sourceTask struct {
	p    *pipeline
	idx  int // in p.parts
	part int32

	mu sync.Mutex // guards what follows but ev and keys (the reader's own)
	// next is the offset to read next. Only the reader writes it (under
	// mu), so the reader may read it without mu.
	next          int64
	records, dead int64  // since the previous barrier; dead is a part of records
	reason        string // the first dead letter's since the previous barrier
	bufs          [][]output
	deadBytes     []int // of the dead letters in bufs[o]
	ev            event.Event
	keys          map[string]string // interned event keys
}

// maxInterned bounds a source's interned keys: past it the table starts
// over, so that many distinct keys cost memory no longer than that.
const maxInterned = 1 << 14

// key returns b as a string, the same string for the same bytes while it
// is interned: the keys of a job repeat, and a string per record would be
// an allocation per record.
func (s *sourceTask) key(b []byte) string {
	if k, ok := s.keys[string(b)]; ok { // no allocation: the compiler looks up b in place
		return k
	}
	if len(s.keys) >= maxInterned {
		clear(s.keys)
	}
	k := string(b)
	s.keys[k] = k
	return k
}

// source runs partition part's source task.
func (p *pipeline) source(ctx context.Context, idx int, part int32) error {
	nOps := len(p.toOp)
	s := &sourceTask{p: p, idx: idx, part: part, next: p.chk.Offsets[part],
		bufs: make([][]output, nOps), deadBytes: make([]int, nOps), keys: map[string]string{}}
	for o := range s.bufs {
		s.bufs[o] = newChunk()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.takeBarriers(gctx) })
	g.Go(func() error { return s.run(gctx) })
	return g.Wait()
}

// takeBarriers takes the barrier requests of this source.
func (s *sourceTask) takeBarriers(ctx context.Context) error {
	for {
		select {
		case n := <-s.p.barriers[s.idx]:
			s.mu.Lock()
			err := s.barrier(ctx, n)
			s.mu.Unlock()
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *sourceTask) run(ctx context.Context) error {
	readFails := 0
	for {
		end := (*s.p.bounds.Load())[s.part].End
		if s.next >= end {
			if err := s.wait(ctx); err != nil {
				return err
			}
			continue
		}
		r := record.Range{Topic: s.p.r.cfg.Topic, Partition: s.part, From: s.next, To: min(end, s.next+readSpan)}
		err := s.p.read(ctx, r, func(rec *batch.Record) error { return s.emit(ctx, rec) })
		if err != nil {
			if readFails++; batch.IsRetryable(err) && ctx.Err() == nil {
				// Re-read from next: nothing past it was emitted.
				left, ferr := s.p.r.out.Failed(s.p.r.kafka, fmt.Sprintf("reading %s", r), err)
				if ferr != nil {
					return ferr
				}
				if err := shared.Sleep(ctx, min(shared.Backoff(readFails), left)); err != nil {
					return err
				}
				continue
			}
			return err
		}
		if readFails > 0 {
			s.p.r.out.Up(s.p.r.kafka)
		}
		readFails = 0
		s.mu.Lock()
		s.next = r.To // the range's tail may be markers with no record
		err = s.flush(ctx)
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// wait, caught up, for the next poll of the partitions' ends, which it
// asks for (takeBarriers takes barriers meanwhile).
func (s *sourceTask) wait(ctx context.Context) error {
	polled := s.p.polled.wait()
	select {
	case s.p.kick <- struct{}{}:
	default: // asked already
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-polled:
		return nil
	}
}

// emit routes one record.
func (s *sourceTask) emit(ctx context.Context, rec *batch.Record) error {
	o, target := s.route(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records++
	if o.Dead != nil {
		s.dead++
		if s.reason == "" {
			s.reason = o.Dead.Reason
		}
	}
	s.next = rec.Offset + 1
	s.bufs[target] = append(s.bufs[target], o)
	if o.Dead != nil {
		s.deadBytes[target] += shared.DeadLetterSize(o.Dead)
	}
	if len(s.bufs[target]) >= chunkRecords || s.deadBytes[target] >= chunkDeadBytes {
		return s.send(ctx, target)
	}
	return nil
}

// route decodes rec into what goes downstream, and the operator it goes
// to: the key's owner; a Transform's values all to transformTarget; a
// dead letter to the partition's operator.
func (s *sourceTask) route(rec *batch.Record) (output, int) {
	nOps := len(s.p.toOp)
	var derr error
	if !s.p.work.builtin() {
		v, err := s.p.work.Decode(rec)
		if err == nil {
			return output{Val: v}, transformTarget
		}
		derr = err
	} else if derr = event.Decode(rec.Value, &s.ev); derr == nil {
		ev := &s.ev
		return output{ID: ev.ID, Amount: ev.Amount, TS: ev.TS, Key: s.key(ev.Key)}, keyOwner(ev.Key, nOps)
	}
	cfg := &s.p.r.cfg // not a copy per record: Config is large
	dl := shared.DeadLetter(cfg.Job, cfg.Topic, rec, derr)
	return output{Dead: &dl}, int(s.part) % nOps
}

// send passes operator o's buffered records on. Callers hold mu.
func (s *sourceTask) send(ctx context.Context, o int) error {
	if len(s.bufs[o]) == 0 {
		return nil
	}
	select {
	case s.p.toOp[o][s.idx] <- item{recs: s.bufs[o]}:
		s.bufs[o], s.deadBytes[o] = newChunk(), 0
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush passes every operator's buffered records on.
func (s *sourceTask) flush(ctx context.Context) error {
	for o := range s.bufs {
		if err := s.send(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// barrier acks barrier n with the offset to resume at, after everything
// read before it, and forwards it to every operator. Callers hold mu.
func (s *sourceTask) barrier(ctx context.Context, n int64) error {
	if err := s.flush(ctx); err != nil {
		return err
	}
	if err := s.p.ack(ctx, ack{n: n, kind: ackSource, part: s.part, next: s.next, records: s.records, dead: s.dead, reason: s.reason}); err != nil {
		return err
	}
	s.records, s.dead, s.reason = 0, 0, ""
	for o := range s.p.toOp {
		select {
		case s.p.toOp[o][s.idx] <- item{barrier: n}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.p.r.crash(CrashAfterBarrier)
	return nil
}
