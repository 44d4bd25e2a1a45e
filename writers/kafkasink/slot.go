package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

type slotState int

const (
	slotIdle         slotState = iota // fresh producer, no transaction yet
	slotOpen                          // Begin done, writing
	slotPreCommitted                  // PreCommit done, waiting for Commit or Abort
	slotCommitted
	slotAborted
)

// kafkaSlot is one live transactional producer, for transactional id id.
// A slot whose producer is closed is dropped (Txn.slots[k] = nil);
// the next use creates a new one.
type kafkaSlot struct {
	k      int
	id     string
	client sarama.Client // the producer's own
	prod   sarama.AsyncProducer
	done   chan struct{} // closed when drain has returned
	pid    int64         // identity the coordinator gave this producer
	epoch  int16

	txn   int64 // the transaction begun last on this producer
	state slotState
	sent  int64 // records handed to the producer in txn
	// offsets: WriteOffsets added consumer offsets to txn on the broker,
	// which sarama's producer doesn't know about (see WriteOffsets).
	offsets bool
	// The transaction before txn on this producer, so that a repeated
	// Commit or Abort of it is answered without asking the broker (which
	// only knows about the latest transaction of the id).
	prevTxn   int64
	prevState slotState

	mu       sync.Mutex // guards the rest, shared with drain
	inflight int64
	idle     chan struct{} // closed when inflight drops to 0
	err      error         // first failed record of txn
	parts    map[topicPart]struct{}
}

// empty: nothing of txn reached the broker, so there is no transaction
// there to end.
func (s *kafkaSlot) empty() bool { return s.sent == 0 && !s.offsets }

type topicPart struct {
	topic string
	part  int32
}

// drain reads the producer's results until both channels are closed
// (AsyncClose), so the producer never blocks on them.
func (s *kafkaSlot) drain() {
	defer close(s.done)
	succ, errs := s.prod.Successes(), s.prod.Errors()
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			s.acked(m.Topic, m.Partition, nil)
			releaseMessage(m)
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			err := e.Err
			if err == nil {
				err = errors.New("unknown producer error")
			}
			if e.Msg != nil {
				s.acked(e.Msg.Topic, e.Msg.Partition, fmt.Errorf("producing to %s/%d: %w", e.Msg.Topic, e.Msg.Partition, kafkaError(err)))
				releaseMessage(e.Msg)
			} else {
				s.acked("", -1, kafkaError(err))
			}
		}
	}
}

// add counts a record about to be sent, or returns the first error of
// the transaction.
func (s *kafkaSlot) add() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.inflight == 0 {
		s.idle = make(chan struct{})
	}
	s.inflight++
	return nil
}

func (s *kafkaSlot) acked(topic string, part int32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
	} else if topic != "" {
		s.parts[topicPart{topic, part}] = struct{}{}
	}
	s.inflight--
	if s.inflight == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// flush waits until every record sent in the transaction is acknowledged
// and returns the first error.
func (s *kafkaSlot) flush(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// newSlot creates slot k's producer: InitProducerId, which aborts what
// the id had open and fences its older producers. Then it reads the
// identity the coordinator gave it, which PreCommit checks again.
func (w *Txn) newSlot(ctx context.Context, k int) (*kafkaSlot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := w.slotID(k)
	conf := *w.conf
	conf.Producer.Transaction.ID = id
	client, err := sarama.NewClient(w.cfg.Brokers, &conf)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: connecting to Kafka %s: %w", strings.Join(w.cfg.Brokers, ","), err)
	}
	prod, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		_ = client.Close()
		if errors.Is(err, sarama.ErrInvalidTransactionTimeout) {
			return nil, w.timeoutError(id)
		}
		return nil, fmt.Errorf("kafka sink: starting transactional producer %s: %w", id, kafkaError(err))
	}
	s := &kafkaSlot{k: k, id: id, client: client, prod: prod, done: make(chan struct{}), parts: map[topicPart]struct{}{}}
	go s.drain()
	st, err := w.describe(ctx, id)
	if err != nil {
		w.closeSlot(s)
		return nil, err
	}
	s.pid, s.epoch = st.ProducerID, st.ProducerEpoch
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

// closeSlot closes a slot's producer and client and waits for drain. An
// open transaction stays open on the broker (until the next
// InitProducerId of the id or the transaction timeout).
func (w *Txn) closeSlot(s *kafkaSlot) {
	s.prod.AsyncClose()
	<-s.done
	_ = s.client.Close()
	if w.slots[s.k] == s {
		w.slots[s.k] = nil
	}
	if w.open == s {
		w.open = nil
	}
}
