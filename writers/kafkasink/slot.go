package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

type slotState int

const (
	slotIdle         slotState = iota // fresh producer, no transaction yet
	slotOpen                          // Begin done, writing
	slotPreCommitted                  // PreCommit done, waiting for Commit or Abort
	slotCommitted
	slotAborted
)

// kafkaSlot is one live transactional producer (a franz-go client), for
// transactional id id. A slot whose producer is closed is dropped
// (Txn.slots[k] = nil); the next use creates a new one.
type kafkaSlot struct {
	k     int
	id    string
	cl    *kgo.Client
	pid   int64 // identity the coordinator gave this producer
	epoch int16
	// promise is the one callback every record of this producer gets
	// (a method value made once, not a closure per record).
	promise func(*kgo.Record, error)

	txn   int64 // the transaction begun last on this producer
	state slotState
	sent  int64 // records handed to the producer in txn
	// offsets: WriteOffsets added consumer offsets to txn on the broker,
	// which the producer doesn't know about (see WriteOffsets).
	offsets bool
	// The transaction before txn on this producer, so that a repeated
	// Commit or Abort of it is answered without asking the broker (which
	// only knows about the latest transaction of the id).
	prevTxn   int64
	prevState slotState

	// gen counts the slot's transactions (Begin adds one): done's cache
	// of the last partition belongs to the transaction it was noted in.
	gen atomic.Int64
	// failing: err is set (read without mu on every Write).
	failing atomic.Bool

	mu    sync.Mutex // guards err and parts, shared with the producer's promises
	err   error      // first failed record of txn
	parts map[topicPart]struct{}

	// The partition of the record done saw last, and the transaction
	// (gen) it belonged to; only done, which the producer calls serially,
	// reads and writes them. A batch's records arrive in a row with the
	// same partition, so done takes mu once per batch, not per record.
	last    topicPart
	lastGen int64
}

// empty: nothing of txn reached the broker, so there is no transaction
// there to end.
func (s *kafkaSlot) empty() bool { return s.sent == 0 && !s.offsets }

type topicPart struct {
	topic string
	part  int32
}

// done is the producer's callback for one record, called once per record
// in the producer's promise goroutine: it notes the partition the record
// went to (PreCommit checks the coordinator has them all) or the first
// error, and recycles the record.
func (s *kafkaSlot) done(r *kgo.Record, err error) {
	if err != nil {
		s.fail(fmt.Errorf("producing to %s/%d: %w", r.Topic, r.Partition, kafkaError(err)))
	} else if tp, gen := (topicPart{r.Topic, r.Partition}), s.gen.Load(); tp != s.last || gen != s.lastGen {
		s.mu.Lock()
		s.parts[tp] = struct{}{}
		s.mu.Unlock()
		s.last, s.lastGen = tp, gen
	}
	releaseRecord(r)
}

// fail notes err as the transaction's, unless it has one already.
func (s *kafkaSlot) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		s.failing.Store(true)
	}
	s.mu.Unlock()
}

// reset readies the promise's state for a new transaction: a new
// generation (the partition cache of the last one must not carry over),
// no error, no partitions.
func (s *kafkaSlot) reset() {
	s.gen.Add(1)
	s.mu.Lock()
	s.err = nil
	s.failing.Store(false)
	clear(s.parts)
	s.mu.Unlock()
}

// failed returns the first error of the transaction.
func (s *kafkaSlot) failed() error {
	if !s.failing.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// flush waits until every record sent in the transaction is acknowledged
// and returns the first error.
func (s *kafkaSlot) flush(ctx context.Context) error {
	if err := s.cl.Flush(ctx); err != nil {
		return err
	}
	return s.failed()
}

// abort aborts the producer's transaction. It first sends what is
// buffered (for up to cleanupTimeout; then the rest fails with
// ErrAborting), so that every record written lands under the abort
// marker, as with a commit; then EndTxn(abort) goes out if the producer
// added partitions to the transaction.
func (s *kafkaSlot) abort(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	err := s.cl.Flush(fctx)
	cancel()
	if err != nil {
		if err := s.cl.AbortBufferedRecords(ctx); err != nil {
			return err
		}
	}
	return s.cl.EndTransaction(ctx, kgo.TryAbort)
}

// newSlot creates slot k's producer and initialises its producer id
// (InitProducerId), which aborts what the id had open and fences its
// older producers. The identity it gets is what PreCommit checks again.
func (w *Txn) newSlot(ctx context.Context, k int) (*kafkaSlot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := w.slotID(k)
	s := &kafkaSlot{k: k, id: id, parts: map[topicPart]struct{}{}}
	s.promise = s.done
	cl, err := kgo.NewClient(append(w.opts, kgo.TransactionalID(id))...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: starting transactional producer %s: %w", id, err)
	}
	s.cl = cl
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		cl.Close()
		if errors.Is(err, sarama.ErrInvalidTransactionTimeout) || errors.Is(kafkaError(err), sarama.ErrInvalidTransactionTimeout) {
			return nil, w.timeoutError(id)
		}
		return nil, fmt.Errorf("kafka sink: starting transactional producer %s: %w", id, w.cfg.Security.ConnectError(w.cfg.Brokers, kafkaError(err)))
	}
	s.pid, s.epoch = pid, epoch
	return s, nil
}

// timeoutError explains INVALID_TRANSACTION_TIMEOUT, naming the broker's
// limit if it can read it.
func (w *Txn) timeoutError(id string) error {
	limit := ""
	if b, err := w.client.TransactionCoordinator(id); err == nil {
		res, err := b.DescribeConfigs(&sarama.DescribeConfigsRequest{
			Version: 4,
			Resources: []*sarama.ConfigResource{{
				Type: sarama.BrokerResource, Name: strconv.Itoa(int(b.ID())),
				ConfigNames: []string{"transaction.max.timeout.ms"},
			}},
		})
		if err == nil {
			for _, r := range res.Resources {
				for _, c := range r.Configs {
					if ms, err := strconv.ParseInt(c.Value, 10, 64); err == nil && c.Name == "transaction.max.timeout.ms" {
						limit = fmt.Sprintf(" (%v)", time.Duration(ms)*time.Millisecond)
					}
				}
			}
		}
	}
	return fmt.Errorf("kafka sink: transaction timeout %v is above the broker's transaction.max.timeout.ms%s: lower the sink's transaction timeout or raise transaction.max.timeout.ms on the brokers: %w",
		w.cfg.TxnTimeout, limit, kafkaErr{sarama.ErrInvalidTransactionTimeout})
}

// closeSlot closes a slot's producer. Records still buffered fail; an
// open transaction stays open on the broker (until the next
// InitProducerId of the id or the transaction timeout): closing a
// franz-go client sends no EndTxn.
func (w *Txn) closeSlot(s *kafkaSlot) {
	s.cl.Close()
	if w.slots[s.k] == s {
		w.slots[s.k] = nil
	}
	if w.open == s {
		w.open = nil
	}
}
