package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// output is what the keyed operator emits for one input record: the event
// with its key's running count and total, or a dead letter passed through;
// with a Transform, the decoded value (Val) or a dead letter.
type output struct {
	ID, Amount, TS int64
	Key            string
	Count          int64
	Total          exact.Int
	Dead           *record.DeadLetter
	Val            any
}

// subtask is one sink subtask's writer: a two-phase writer plus how the
// job's output goes into it.
type subtask interface {
	writers.TwoPhase
	// write puts outputs into the open transaction.
	write(ctx context.Context, outs []output) error
	// flush writes what write buffered (aggregates) before PreCommit.
	flush(ctx context.Context) error
}

// sinkTask is sink subtask o's task state in one attempt.
type sinkTask struct {
	p       *pipeline
	o       int
	w       subtask
	open    int64             // the transaction being written: the next barrier's
	pending []writers.Pending // pre-committed, not known committed
}

// sink writes an operator's output into its subtask's transactions:
// pre-commit and ack on a barrier, commit when told the checkpoint is
// complete.
func (p *pipeline) sink(ctx context.Context, o int, first int64) error {
	s := &sinkTask{p: p, o: o, w: p.r.sinks.open[o], open: first}
	if err := s.w.Begin(ctx, s.open); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case nt := <-p.notices[o]:
			if err := s.commit(ctx, nt); err != nil {
				return err
			}
		case it := <-p.toSink[o]:
			if it.barrier == 0 {
				if err := s.w.write(ctx, it.recs); err != nil {
					return err
				}
				releaseChunk(it.recs) // write keeps copies, not the chunk
				continue
			}
			if err := s.barrier(ctx, it.barrier); err != nil {
				return err
			}
		}
	}
}

// barrier pre-commits the open transaction as checkpoint n's, acks it
// with every transaction not known committed, and opens the next.
func (s *sinkTask) barrier(ctx context.Context, n int64) error {
	if n != s.open {
		return fmt.Errorf("sink %d: barrier %d while transaction %d is open", s.o, n, s.open)
	}
	// Checkpoint n-1's commit was sent before barrier n: finish it first,
	// so that this ack lists nothing already committed.
	for drained := false; !drained; {
		select {
		case nt := <-s.p.notices[s.o]:
			if err := s.commit(ctx, nt); err != nil {
				return err
			}
		default:
			drained = true
		}
	}
	if err := s.w.flush(ctx); err != nil {
		return err
	}
	pd, err := s.w.PreCommit(ctx)
	if err != nil {
		return err
	}
	s.p.r.crash(CrashAfterPrecommit)
	s.pending = append(s.pending, pd)
	if err := s.p.ack(ctx, ack{n: n, kind: ackSink, pending: append([]writers.Pending(nil), s.pending...)}); err != nil {
		return err
	}
	s.open = n + 1
	return s.w.Begin(ctx, s.open)
}

// commit commits the pending transactions of checkpoints up to nt.n; on
// the final notice it reports that it is done.
func (s *sinkTask) commit(ctx context.Context, nt notice) error {
	rest := s.pending[:0]
	for _, pd := range s.pending {
		if pd.Txn > nt.n {
			rest = append(rest, pd)
			continue
		}
		if err := s.p.commit(ctx, s.w, pd); err != nil {
			return err
		}
		s.p.r.crash(CrashMidCommit)
	}
	s.pending = rest
	if nt.final {
		select {
		case s.p.sinkDone <- s.o:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// commit finishes a pre-committed transaction, retrying while the outcome
// may change. It never aborts: a checkpoint lists this transaction.
func (p *pipeline) commit(ctx context.Context, w subtask, pd writers.Pending) error {
	// Commit is idempotent, so any failure but a lost transaction may be
	// retried: under the run's policy, until the sink has failed for
	// longer than the outage timeout.
	sink := p.r.out.Sink
	_, err := p.r.out.Retry(ctx, fmt.Sprintf("committing %s transaction %s", pd.Sink, pd.ID), []string{sink},
		func(err error) (string, bool) { return sink, !errors.Is(err, writers.ErrTxnLost) },
		func() error { return w.Commit(ctx, pd) })
	if err != nil {
		return fmt.Errorf("committing %s transaction %s of checkpoint %d: %w", pd.Sink, pd.ID, pd.Txn, err)
	}
	return nil
}
