package strategies

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/reason"
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

// ckptSink is one sink subtask: a two-phase writer plus how the built-in
// job's output goes into it.
type ckptSink interface {
	writers.TwoPhase
	// write puts outputs into the open transaction.
	write(ctx context.Context, outs []output) error
	// flush writes what write buffered (aggregates) before PreCommit.
	flush(ctx context.Context) error
}

// DeadLetterTopicSuffix names the Kafka sink's dead-letter topic:
// <output topic>-dead-letters, written in the same transactions.
const DeadLetterTopicSuffix = "-dead-letters"

// deadLetterJSON is a dead letter as the Kafka and file sinks write it.
type deadLetterJSON struct {
	Job       string `json:"job"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Reason    string `json:"reason"`
	Payload   []byte `json:"payload"` // base64 in JSON
}

// encodeDeadLetter writes d as JSON; its reason as every sink stores it
// (reason.Safe: JSON would turn bytes that are not UTF-8 into U+FFFD).
func encodeDeadLetter(d *record.DeadLetter) []byte {
	why := reason.Safe(d.Reason, writers.MaxReasonBytes)
	b, _ := json.Marshal(deadLetterJSON{d.Job, d.Topic, d.Partition, d.Offset, why, d.Payload}) // plain types: can't fail
	return b
}

// ckptSinks makes each attempt's sink subtasks.
type ckptSinks struct {
	cfg  Config
	spec ckptSinkSpec
	sql  *writers.SQL // xa, wal
	open []ckptSink   // this attempt's subtasks
}

func openCheckpointSinks(ctx context.Context, cfg Config, spec ckptSinkSpec, partitions int32) (*ckptSinks, error) {
	s := &ckptSinks{cfg: cfg, spec: spec}
	switch spec.kind {
	case "xa", "wal":
		octx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		w, err := writers.OpenSQL(octx, spec.dsn)
		if err != nil {
			return nil, err
		}
		if err := w.CreateTables(ctx); err != nil {
			w.Close()
			return nil, err
		}
		if cfg.Transform != nil {
			if err := checkTable(ctx, w, cfg.Transform.Upsert()); err != nil {
				w.Close()
				return nil, err
			}
		}
		// An XA writer holds a connection per slot (3), plus short-lived
		// ones for recovery.
		w.DB().SetMaxOpenConns(3*cfg.Checkpoint.OperatorParallelism + 8)
		s.sql = w
	case "kafka":
		// Created if missing, like the input topic of `microbatch produce`.
		for _, t := range []string{spec.topic, spec.topic + DeadLetterTopicSuffix} {
			if err := cfg.Kafka.EnsureTopic(spec.brokers, t, partitions); err != nil {
				return nil, fmt.Errorf("kafka sink: %w", err)
			}
		}
	}
	return s, nil
}

func (s *ckptSinks) String() string {
	switch s.spec.kind {
	case "kafka":
		return fmt.Sprintf("kafka %s/%s (transactions)", strings.Join(s.spec.brokers, ","), s.spec.topic)
	case "file":
		return fmt.Sprintf("files in %s (temp file + rename)", s.spec.dir)
	case "xa":
		return s.sql.String() + " (XA)"
	default:
		return s.sql.String() + " (write-ahead)"
	}
}

// subtask makes sink subtask i's writer.
func (s *ckptSinks) subtask(i int) (ckptSink, error) {
	job := s.cfg.Job
	switch s.spec.kind {
	case "kafka":
		w, err := writers.NewKafkaTxn(writers.KafkaTxnConfig{
			Brokers:         s.spec.brokers,
			TransactionalID: fmt.Sprintf("%s-%d", job, i),
			Subtask:         i,
			TxnTimeout:      s.cfg.Checkpoint.KafkaTxnTimeout,
			Security:        s.cfg.Kafka,
		})
		if err != nil {
			return nil, err
		}
		return &kafkaSink{KafkaTxn: w, topic: s.spec.topic}, nil
	case "file":
		w, err := writers.NewFileTxn(s.spec.dir, job, i)
		if err != nil {
			return nil, err
		}
		return &fileSink{FileTxn: w}, nil
	case "xa":
		w, err := writers.NewXA(s.sql, job, i)
		if err != nil {
			return nil, err
		}
		return &xaSink{XA: w, totals: totalsBuffer{job: job, tw: streamWorkOf(s.cfg), spool: newDLSpool()}}, nil
	default:
		return &walSink{WAL: writers.NewWAL(s.sql, job, i), totals: totalsBuffer{job: job, tw: streamWorkOf(s.cfg)}}, nil
	}
}

// recover brings subtasks [0, n) to a clean state: it commits the pending
// transactions given and aborts everything else they left behind. The
// writers of the first OperatorParallelism subtasks stay open for the
// attempt (s.open); the rest are closed.
func (s *ckptSinks) recover(ctx context.Context, n int, pending []writers.Pending) error {
	s.closeOpen()
	for i := range n {
		w, err := s.subtask(i)
		if err != nil {
			return err
		}
		var keep []writers.Pending
		for _, p := range pending {
			if p.Subtask == i {
				keep = append(keep, p)
			}
		}
		if err := w.Recover(ctx, keep); err != nil {
			w.Close()
			s.closeOpen()
			return fmt.Errorf("recovering sink subtask %d: %w", i, err)
		}
		if i < s.cfg.Checkpoint.OperatorParallelism {
			s.open = append(s.open, w)
		} else {
			w.Close()
		}
	}
	return nil
}

func (s *ckptSinks) closeOpen() {
	for _, w := range s.open {
		w.Close()
	}
	s.open = nil
}

func (s *ckptSinks) close() {
	s.closeOpen()
	if s.sql != nil {
		s.sql.Close()
	}
}

// kafkaSink writes each output as a message keyed by the event key.
type kafkaSink struct {
	*writers.KafkaTxn
	topic    string
	key, buf []byte
}

func (k *kafkaSink) write(ctx context.Context, outs []output) error {
	for i := range outs {
		o := &outs[i]
		if o.Dead != nil {
			if err := k.Write(ctx, k.topic+DeadLetterTopicSuffix, nil, encodeDeadLetter(o.Dead)); err != nil {
				return err
			}
			continue
		}
		// Write copies key and value: the buffers are reused.
		k.buf = event.AppendOutput(k.buf[:0], o.ID, o.Key, o.Amount, o.TS, o.Count, o.Total)
		k.key = append(k.key[:0], o.Key...)
		if err := k.Write(ctx, k.topic, k.key, k.buf); err != nil {
			return err
		}
	}
	return nil
}

func (k *kafkaSink) flush(context.Context) error { return nil }

// fileSink writes each output as a JSON line; a dead letter as
// {"dead_letter": {...}}.
type fileSink struct {
	*writers.FileTxn
	buf []byte
}

func (f *fileSink) write(_ context.Context, outs []output) error {
	for i := range outs {
		o := &outs[i]
		if o.Dead != nil {
			f.buf = append(append(append(f.buf[:0], `{"dead_letter":`...), encodeDeadLetter(o.Dead)...), '}')
		} else {
			f.buf = event.AppendOutput(f.buf[:0], o.ID, o.Key, o.Amount, o.TS, o.Count, o.Total)
		}
		if err := f.Write(f.buf); err != nil {
			return err
		}
	}
	return nil
}

func (f *fileSink) flush(context.Context) error { return nil }

// totalsBuffer sums a transaction's outputs per key for mb_totals (the
// same rows the micro-batch strategies write) and collects dead letters:
// in spool if set (bounded memory), else in dead. With a Transform (tw) it
// collects the decoded values instead, and take makes the transaction's
// rows of them: the transform's rows function is called once per
// checkpoint interval.
type totalsBuffer struct {
	job   string
	tw    streamWork
	agg   *event.Aggregator
	items []any
	dead  []record.DeadLetter
	spool *dlSpool
	err   error // of the spool, reported by take
}

func (t *totalsBuffer) add(outs []output) {
	if t.agg == nil && t.tw == nil {
		t.agg = event.NewAggregator()
	}
	for i := range outs {
		o := &outs[i]
		if o.Dead != nil {
			if t.spool == nil {
				t.dead = append(t.dead, *o.Dead)
			} else if t.err == nil {
				t.err = t.spool.add(*o.Dead)
			}
			continue
		}
		if t.tw != nil {
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
	if t.tw != nil {
		u = t.tw.upsert()
		rows, err = t.tw.rowsOf(t.items)
		clear(t.items)
		t.items = t.items[:0]
	} else if t.agg != nil && t.agg.Len() > 0 {
		rows = totalsRows(t.job, t.agg.Totals())
		t.agg.Reset()
	}
	dead, t.dead = t.dead, nil
	return u, rows, dead, err
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
		t.err = t.spool.reset()
	}
}

// xaSink adds each transaction's per-key sums to mb_totals in an XA branch,
// and its dead letters, spooled until then (bounded memory).
type xaSink struct {
	*writers.XA
	totals totalsBuffer
}

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
		if err := x.Upsert(ctx, u, rows); err != nil {
			return err
		}
	}
	if len(dead) > 0 {
		if err := x.DeadLetters(ctx, dead); err != nil {
			return err
		}
	}
	if err := x.totals.spool.each(func(dls []record.DeadLetter) error { return x.DeadLetters(ctx, dls) }); err != nil {
		return err
	}
	x.totals.drop()
	return x.totals.err
}

func (x *xaSink) Abort(ctx context.Context, p writers.Pending) error {
	x.totals.drop()
	return x.XA.Abort(ctx, p)
}

func (x *xaSink) Close() error {
	x.totals.spool.close()
	return x.XA.Close()
}

// walSink buffers per-key sums for the write-ahead writer.
type walSink struct {
	*writers.WAL
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
	if w.totals.tw != nil {
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
// back exact: writers.WAL tags them): a time.Time would come back RFC 3339
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
