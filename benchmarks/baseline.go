package benchmarks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// The per-record baseline is what people write by hand: a sarama consumer
// group whose handler upserts each record with its own autocommitted
// statement and then marks the message; sarama auto-commits the marks
// every second. It is at-least-once (a crash after the upsert and before
// the next auto-commit replays the record) and slow, so it is measured on
// a bounded slice of the workload.
const baselineTable = "mb_bench_baseline"

func baselineDDL(d offsets.Dialect) string {
	if d == offsets.MySQL {
		return `CREATE TABLE IF NOT EXISTS ` + baselineTable + ` (
			job VARBINARY(128) NOT NULL, k VARBINARY(255) NOT NULL,
			events BIGINT NOT NULL, amount BIGINT NOT NULL,
			PRIMARY KEY (job, k)) ENGINE=InnoDB`
	}
	return `CREATE TABLE IF NOT EXISTS ` + baselineTable + ` (
		job TEXT NOT NULL, k TEXT NOT NULL, events INTEGER NOT NULL, amount INTEGER NOT NULL,
		PRIMARY KEY (job, k))`
}

func baselineUpsert(d offsets.Dialect) string {
	if d == offsets.MySQL {
		return `INSERT INTO ` + baselineTable + ` (job, k, events, amount) VALUES (?, ?, 1, ?)
			ON DUPLICATE KEY UPDATE events = events + 1, amount = amount + VALUES(amount)`
	}
	return `INSERT INTO ` + baselineTable + ` (job, k, events, amount) VALUES (?, ?, 1, ?)
		ON CONFLICT (job, k) DO UPDATE SET events = events + 1, amount = amount + excluded.amount`
}

// baselineHandler is the hand-written consumer: one upsert per record, then
// MarkMessage.
type baselineHandler struct {
	w      *sqlsink.Writer
	stmt   string
	job    string
	limit  int64
	n      atomic.Int64
	mu     sync.Mutex
	first  time.Time // first record received
	last   time.Time // limit-th record upserted
	err    error
	cancel context.CancelFunc
}

func (h *baselineHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *baselineHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim watches the session's context: ranging over Messages() alone
// would hold up a rebalance until the next message (IBM/sarama#2344).
func (h *baselineHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	var ev struct {
		Key    string `json:"key"`
		Amount int64  `json:"amount"`
	}
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.mu.Lock()
			if h.first.IsZero() {
				h.first = time.Now()
			}
			h.mu.Unlock()
			if err := json.Unmarshal(m.Value, &ev); err != nil {
				h.fail(fmt.Errorf("record %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err))
				return nil
			}
			if _, err := h.w.DB().ExecContext(sess.Context(), h.stmt, h.job, ev.Key, ev.Amount); err != nil {
				if sess.Context().Err() == nil {
					h.fail(fmt.Errorf("upserting record %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err))
				}
				return nil
			}
			sess.MarkMessage(m, "")
			if h.n.Add(1) == h.limit {
				h.mu.Lock()
				h.last = time.Now()
				h.mu.Unlock()
				h.cancel()
			}
		}
	}
}

func (h *baselineHandler) fail(err error) {
	h.mu.Lock()
	if h.err == nil {
		h.err = err
	}
	h.mu.Unlock()
	h.cancel()
}

// BaselineResult is the per-record consumer's measurement.
type BaselineResult struct {
	Events       int64   `json:"events"` // records upserted in the measured slice
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	CPUSeconds   float64 `json:"cpu_seconds"` // of the bench process meanwhile
	Method       string  `json:"method"`
}

// runBaseline consumes the first limit events of topic with a fresh
// consumer group (or for at most window) and returns the rate, timed from
// the first record received to the last upserted (the group join is not
// counted).
func runBaseline(ctx context.Context, w *sqlsink.Writer, brokers []string, topic, group string, limit int64, window time.Duration) (BaselineResult, error) {
	var res BaselineResult
	if _, err := w.DB().ExecContext(ctx, baselineDDL(w.Dialect())); err != nil {
		return res, fmt.Errorf("creating %s: %w", baselineTable, err)
	}
	cfg := kafkautil.Config("microbatch-bench-baseline")
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = true
	cfg.Consumer.Offsets.AutoCommit.Interval = time.Second
	cg, err := sarama.NewConsumerGroup(brokers, group, cfg)
	if err != nil {
		return res, fmt.Errorf("baseline consumer group: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	h := &baselineHandler{w: w, stmt: baselineUpsert(w.Dialect()), job: group, limit: limit, cancel: cancel}
	cpu0 := selfCPU()
	errc := make(chan error, 1)
	go func() {
		for {
			if err := cg.Consume(cctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) && cctx.Err() == nil {
				errc <- err
				return
			}
			if cctx.Err() != nil {
				errc <- nil
				return
			}
		}
	}()
	var consumeErr error
	select {
	case consumeErr = <-errc:
	case <-cctx.Done():
		consumeErr = <-errc
	}
	closeErr := cg.Close()
	res.CPUSeconds = (selfCPU() - cpu0).Seconds()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.err != nil:
		return res, h.err
	case consumeErr != nil:
		return res, fmt.Errorf("baseline consumer group: %w", consumeErr)
	case closeErr != nil:
		return res, fmt.Errorf("closing the baseline consumer group: %w", closeErr)
	case ctx.Err() != nil:
		return res, ctx.Err()
	}
	end := h.last
	res.Events = h.n.Load()
	if end.IsZero() { // the window closed first
		end = time.Now()
		res.Method = fmt.Sprintf("%d records upserted in a %s window", res.Events, window)
	} else {
		res.Events = limit
		res.Method = fmt.Sprintf("first %d records of the workload", limit)
	}
	if h.first.IsZero() || res.Events < 2 {
		return res, fmt.Errorf("the baseline consumer upserted %d records in %s", res.Events, window)
	}
	res.Seconds = end.Sub(h.first).Seconds()
	res.EventsPerSec = float64(res.Events-1) / res.Seconds
	return res, nil
}
