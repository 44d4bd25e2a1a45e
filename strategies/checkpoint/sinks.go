package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/filesink"
	"github.com/microbatch/microbatch/writers/kafkasink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// sinkSet makes each attempt's sink subtasks.
type sinkSet struct {
	cfg  Config
	spec SinkSpec
	sql  *sqlsink.Writer // xa, pg2pc, wal
	open []subtask       // this attempt's subtasks
}

func openSinks(ctx context.Context, cfg Config, spec SinkSpec, partitions int32) (*sinkSet, error) {
	s := &sinkSet{cfg: cfg, spec: spec}
	switch spec.Kind {
	case SinkXA, SinkPG2PC, SinkWAL:
		w, err := openSQL(ctx, cfg, spec)
		if err != nil {
			return nil, err
		}
		s.sql = w
		if spec.Kind == SinkPG2PC {
			if err := checkPrepared(ctx, cfg, w); err != nil {
				w.Close()
				return nil, err
			}
		}
	case SinkKafka:
		// Created if missing, like the input topic of `microbatch produce`.
		for _, t := range []string{spec.Topic, spec.Topic + DeadLetterTopicSuffix} {
			if err := cfg.Kafka.EnsureTopic(spec.Brokers, t, partitions); err != nil {
				return nil, fmt.Errorf("kafka sink: %w", err)
			}
		}
	}
	return s, nil
}

// openSQL opens an SQL sink with its tables, and checks a Transform's.
func openSQL(ctx context.Context, cfg Config, spec SinkSpec) (*sqlsink.Writer, error) {
	var w *sqlsink.Writer
	open := func(ctx context.Context) (err error) {
		w, err = sqlsink.Open(ctx, spec.DSN)
		return err
	}
	var err error
	if cfg.Connect != nil {
		err = cfg.Connect(ctx, open)
	} else {
		octx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
		err = open(octx)
		cancel()
	}
	if err != nil {
		return nil, err
	}
	if err := w.CreateTables(ctx); err != nil {
		w.Close()
		return nil, err
	}
	if !cfg.Work.builtin() {
		if err := shared.CheckTable(ctx, w, cfg.Work.Upsert); err != nil {
			w.Close()
			return nil, err
		}
		if cfg.Work.Claim != nil {
			if err := cfg.Work.Claim(ctx, w); err != nil {
				w.Close()
				return nil, err
			}
		}
	}
	// An XA writer holds a connection per slot (3), plus short-lived
	// ones for recovery (a PG2PC writer one, while its transaction is
	// open).
	w.DB().SetMaxOpenConns(3*cfg.OperatorParallelism + 8)
	return w, nil
}

func (s *sinkSet) String() string {
	switch s.spec.Kind {
	case SinkKafka:
		return fmt.Sprintf("kafka %s/%s (transactions)", strings.Join(s.spec.Brokers, ","), s.spec.Topic)
	case SinkFile:
		return fmt.Sprintf("files in %s (temp file + rename)", s.spec.Dir)
	case SinkXA:
		return s.sql.String() + " (XA)"
	case SinkPG2PC:
		return s.sql.String() + " (prepared transactions)"
	default:
		return s.sql.String() + " (write-ahead)"
	}
}

// subtask makes sink subtask i's writer.
func (s *sinkSet) subtask(i int) (subtask, error) {
	job := s.cfg.Job
	switch s.spec.Kind {
	case SinkKafka:
		w, err := kafkasink.New(kafkasink.Config{
			Brokers:         s.spec.Brokers,
			TransactionalID: fmt.Sprintf("%s-%d", job, i),
			Subtask:         i,
			TxnTimeout:      s.cfg.KafkaTxnTimeout,
			Security:        s.cfg.Kafka,
		})
		if err != nil {
			return nil, err
		}
		return &kafkaSink{Txn: w, topic: s.spec.Topic}, nil
	case SinkFile:
		w, err := filesink.New(s.spec.Dir, job, i)
		if err != nil {
			return nil, err
		}
		return &fileSink{Txn: w}, nil
	case SinkXA, SinkPG2PC:
		var w sqlTwoPhase
		var err error
		if s.spec.Kind == SinkXA {
			w, err = sqlsink.NewXA(s.sql, job, i)
		} else {
			w, err = sqlsink.NewPG2PC(s.sql, job, i)
		}
		if err != nil {
			return nil, err
		}
		totals := totalsBuffer{job: job, work: s.cfg.Work}
		if s.cfg.NewSpool != nil {
			totals.spool = s.cfg.NewSpool()
		}
		return &xaSink{xa: w, totals: totals}, nil
	default:
		return &walSink{WAL: sqlsink.NewWAL(s.sql, job, i), totals: totalsBuffer{job: job, work: s.cfg.Work}}, nil
	}
}

// recover brings subtasks [0, n) to a clean state: it commits the pending
// transactions given and aborts everything else they left behind. The
// writers of the first OperatorParallelism subtasks stay open for the
// attempt (s.open); the rest are closed.
func (s *sinkSet) recover(ctx context.Context, n int, pending []writers.Pending) error {
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
		if i < s.cfg.OperatorParallelism {
			s.open = append(s.open, w)
		} else {
			w.Close()
		}
	}
	return nil
}

func (s *sinkSet) closeOpen() {
	for _, w := range s.open {
		w.Close()
	}
	s.open = nil
}

func (s *sinkSet) close() {
	s.closeOpen()
	if s.sql != nil {
		s.sql.Close()
	}
}

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
	why := writers.StoredReason(d.Reason)
	b, _ := json.Marshal(deadLetterJSON{d.Job, d.Topic, d.Partition, d.Offset, why, d.Payload}) // plain types: can't fail
	return b
}

// kafkaSink writes each output as a message keyed by the event key.
type kafkaSink struct {
	*kafkasink.Txn
	topic    string
	key, buf []byte
}

func (k *kafkaSink) write(ctx context.Context, outs []output) error {
	// One clock read per chunk: the records of a chunk are written within
	// microseconds of each other, and Kafka keeps milliseconds.
	now := time.Now()
	for i := range outs {
		o := &outs[i]
		if o.Dead != nil {
			if err := k.WriteAt(ctx, k.topic+DeadLetterTopicSuffix, nil, encodeDeadLetter(o.Dead), now); err != nil {
				return err
			}
			continue
		}
		// Write copies key and value: the buffers are reused.
		k.buf = event.AppendOutput(k.buf[:0], o.ID, o.Key, o.Amount, o.TS, o.Count, o.Total)
		k.key = append(k.key[:0], o.Key...)
		if err := k.WriteAt(ctx, k.topic, k.key, k.buf, now); err != nil {
			return err
		}
	}
	return nil
}

func (k *kafkaSink) flush(context.Context) error { return nil }

// fileSink writes each output as a JSON line; a dead letter as
// {"dead_letter": {...}}.
type fileSink struct {
	*filesink.Txn
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

// checkPrepared refuses, at start, a PostgreSQL server that allows no
// prepared transactions (ErrConfig: a setting of the server to change).
// cfg.maxPrepared stands in for the server's answer in tests.
func checkPrepared(ctx context.Context, cfg Config, w *sqlsink.Writer) error {
	read := w.MaxPreparedTransactions
	if cfg.maxPrepared != nil {
		read = cfg.maxPrepared
	}
	n, err := read(ctx)
	if err != nil {
		return err
	}
	if err := sqlsink.CheckMaxPrepared(n, w.String()); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}
