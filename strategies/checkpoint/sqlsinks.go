package checkpoint

import (
	"context"
	"fmt"
	"math"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// totalsBuffer sums a transaction's outputs per key for mb_totals (the
// same rows the micro-batch strategies write) and collects dead letters:
// in spool if set (bounded memory), else in dead. With a Transform (work)
// it collects the decoded values instead, and take makes the
// transaction's rows of them: Work.Rows is called once per checkpoint
// interval.
type totalsBuffer struct {
	job   string
	work  Work
	agg   *event.Aggregator
	items []any
	dead  []record.DeadLetter
	spool Spool
	err   error // of the spool, reported by take
}

func (t *totalsBuffer) add(outs []output) {
	if t.agg == nil && t.work.builtin() {
		t.agg = event.NewAggregator()
	}
	for i := range outs {
		o := &outs[i]
		if o.Dead != nil {
			if t.spool == nil {
				t.dead = append(t.dead, *o.Dead)
			} else if t.err == nil {
				t.err = t.spool.Add(*o.Dead)
			}
			continue
		}
		if !t.work.builtin() {
			t.items = append(t.items, o.Val)
			continue
		}
		t.agg.AddTotal(event.Total{Key: o.Key, Events: 1, Amount: o.Amount})
	}
}

// take returns the buffered rows (of upsert u) and dead letters (those not
// in the spool, which the caller empties with drop after writing them) and
// empties the rest of the buffer. An error is the spool's, or the
// Transform's (ErrConfig: its rows function panicked or made a row of the
// wrong width).
func (t *totalsBuffer) take() (u writers.Upsert, rows [][]any, dead []record.DeadLetter, err error) {
	if t.err != nil {
		return u, nil, nil, t.err
	}
	u = writers.Totals
	if !t.work.builtin() {
		u = t.work.Upsert
		rows, err = t.work.Rows(t.items)
		clear(t.items)
		t.items = t.items[:0]
	} else if t.agg != nil && t.agg.Len() > 0 {
		rows = shared.TotalsRows(t.job, t.agg.Totals())
		t.agg.Reset()
	}
	dead, t.dead = t.dead, nil
	return u, rows, dead, err
}

// eachSpooled passes the spooled dead letters to fn.
func (t *totalsBuffer) eachSpooled(fn func([]record.DeadLetter) error) error {
	if t.spool == nil {
		return nil
	}
	return t.spool.Each(fn)
}

// drop empties the buffer (the transaction is aborted, or its spooled
// dead letters are written).
func (t *totalsBuffer) drop() {
	if t.agg != nil {
		t.agg.Reset()
	}
	clear(t.items)
	t.items, t.dead = t.items[:0], nil
	if t.spool != nil {
		t.err = t.spool.Reset()
	}
}

// sqlTwoPhase is a two-phase SQL writer: sqlsink.XA (MySQL/MariaDB) or
// sqlsink.PG2PC (PostgreSQL).
type sqlTwoPhase interface {
	writers.TwoPhase
	Upsert(ctx context.Context, u writers.Upsert, rows [][]any) error
	DeadLetters(ctx context.Context, dls []record.DeadLetter) error
}

// xaSink adds each transaction's per-key sums to mb_totals in a two-phase
// transaction (an XA branch, or a PostgreSQL prepared transaction), and
// its dead letters, spooled until then (bounded memory).
type xaSink struct {
	xa     sqlTwoPhase
	totals totalsBuffer
}

func (x *xaSink) Recover(ctx context.Context, keep []writers.Pending) error {
	return x.xa.Recover(ctx, keep)
}
func (x *xaSink) Begin(ctx context.Context, txn int64) error { return x.xa.Begin(ctx, txn) }
func (x *xaSink) PreCommit(ctx context.Context) (writers.Pending, error) {
	return x.xa.PreCommit(ctx)
}
func (x *xaSink) Commit(ctx context.Context, p writers.Pending) error { return x.xa.Commit(ctx, p) }

// write only sums: rows go into the XA branch at the barrier (flush), after
// the sink committed the previous checkpoint's branch. Writing earlier
// could touch a key still locked by that prepared branch and wait on a
// commit only this goroutine can send. Memory is one sum per key (with a
// Transform, every value of the interval).
func (x *xaSink) write(_ context.Context, outs []output) error {
	x.totals.add(outs)
	return nil
}

func (x *xaSink) flush(ctx context.Context) error {
	u, rows, dead, err := x.totals.take()
	if err != nil {
		return err
	}
	if len(rows) > 0 {
		if err := x.xa.Upsert(ctx, u, rows); err != nil {
			return err
		}
	}
	if len(dead) > 0 {
		if err := x.xa.DeadLetters(ctx, dead); err != nil {
			return err
		}
	}
	if err := x.totals.eachSpooled(func(dls []record.DeadLetter) error { return x.xa.DeadLetters(ctx, dls) }); err != nil {
		return err
	}
	x.totals.drop()
	return x.totals.err
}

func (x *xaSink) Abort(ctx context.Context, p writers.Pending) error {
	x.totals.drop()
	return x.xa.Abort(ctx, p)
}

func (x *xaSink) Close() error {
	if x.totals.spool != nil {
		x.totals.spool.Close()
	}
	return x.xa.Close()
}

// walSink buffers per-key sums for the write-ahead writer.
type walSink struct {
	*sqlsink.WAL
	totals totalsBuffer
}

func (w *walSink) write(_ context.Context, outs []output) error {
	w.totals.add(outs)
	return nil
}

func (w *walSink) flush(ctx context.Context) error {
	u, rows, dead, err := w.totals.take()
	if err != nil {
		return err
	}
	if !w.totals.work.builtin() {
		if err := walRowsCheck(u, rows); err != nil {
			return err
		}
	}
	if len(rows) > 0 {
		if err := w.Upsert(ctx, u, rows); err != nil {
			return err
		}
	}
	if len(dead) > 0 {
		return w.DeadLetters(ctx, dead)
	}
	return nil
}

func (w *walSink) Abort(ctx context.Context, p writers.Pending) error {
	w.totals.drop()
	return w.WAL.Abort(ctx, p)
}

// walRowsCheck refuses a Transform's row value that would not come back
// the same from the checkpoint, where the WAL sink keeps its writes as JSON
// until it applies them (strings, whatever their bytes, and []byte come
// back exact: sqlsink.WAL tags them): a time.Time would come back RFC 3339
// text, a uint64 above 2^63-1 or a NaN not at all. Refusing it at the
// barrier (ErrConfig: the job stops) beats writing something else into
// the user's table after the checkpoint moved the offsets past the record.
func walRowsCheck(u writers.Upsert, rows [][]any) error {
	for _, row := range rows {
		for i, v := range row {
			if walValueOK(v) {
				continue
			}
			col := ""
			if i < len(u.Keys) {
				col = u.Keys[i]
			} else if j := i - len(u.Keys); j < len(u.Values) {
				col = u.Values[j]
			}
			return fmt.Errorf("%w: transform: the write-ahead sink keeps rows as JSON in the checkpoint and can't keep %s.%s = %v (%T) exactly: use strings, []byte, integers, finite floats, booleans or nil (a time as formatted text)",
				ErrConfig, u.Table, col, v, v)
		}
	}
	return nil
}

func walValueOK(v any) bool {
	switch x := v.(type) {
	case nil, string, []byte, bool, int, int8, int16, int32, int64, uint8, uint16, uint32:
		return true
	case uint:
		return uint64(x) <= math.MaxInt64
	case uint64:
		return x <= math.MaxInt64
	case float32:
		return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0)
	case float64:
		return !math.IsNaN(x) && !math.IsInf(x, 0)
	}
	return false
}
