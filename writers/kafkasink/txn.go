package kafkasink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/writers"
)

// Txn is one sink subtask's Kafka writer for checkpoint mode: the
// records of checkpoint interval n go into Kafka transaction n, which
// PreCommit flushes and Commit makes visible to read-committed consumers.
//
// How it rotates transactional ids and which calls it retries is the
// package doc (# Slots, # Retries). Like every writers.TwoPhase writer, a
// Txn is used by one goroutine.
type Txn struct {
	cfg    Config
	conf   *sarama.Config // the adjusted base; each slot's producer gets a copy
	opts   []kgo.Opt      // every slot's producer's, but its transactional id
	client sarama.Client  // coordinator requests: DescribeTransactions, EndTxn, AddOffsetsToTxn, DescribeConfigs
	slots  []*kafkaSlot   // nil: no live producer for that slot
	open   *kafkaSlot     // the slot of the open transaction, if any

	closeMu sync.Mutex
	closed  bool
}

var _ writers.TwoPhase = (*Txn)(nil)

// cleanupTimeout bounds the best-effort abort of a failed transaction.
const cleanupTimeout = 5 * time.Second

// New connects to the cluster; producers are created by Recover
// and Begin.
func New(cfg Config) (*Txn, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Brokers = slices.Clone(cfg.Brokers)
	var conf sarama.Config
	if cfg.Sarama != nil {
		conf = *cfg.Sarama
	} else {
		conf = *kafkautil.Config("microbatch-kafka-sink")
		// Batches sent every 10 ms (or at 1 MiB): PreCommit waits for the
		// last one, so this bounds what batching adds to a checkpoint,
		// and it sends half the produce requests of 2 ms, which costs
		// the producer and the broker CPU per record (benchmarks/README.md).
		// No compression: lz4, snappy and zstd each cost more CPU (in the
		// client, and in the broker, which decompresses to validate) than
		// the bytes they save are worth on a local link; a Config.Sarama
		// base can turn it on for a slow network.
		conf.Producer.Flush.Bytes = 1 << 20
		conf.Producer.Flush.Frequency = 10 * time.Millisecond
	}
	if !conf.Version.IsAtLeast(sarama.V3_0_0_0) {
		conf.Version = kafkautil.Version // DescribeTransactions needs 3.0
	}
	if err := cfg.Security.Apply(&conf); err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	conf.Producer.Idempotent = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Net.MaxOpenRequests = 1
	if conf.Producer.Retry.Max < 1 {
		conf.Producer.Retry.Max = 1
	}
	conf.Producer.Transaction.Timeout = cfg.TxnTimeout
	conf.Producer.Return.Successes = true
	conf.Producer.Return.Errors = true
	conf.Producer.Transaction.ID = cfg.TransactionalID + "-0" // for Validate; each slot sets its own
	if err := conf.Validate(); err != nil {
		return nil, fmt.Errorf("kafka sink: sarama config: %w", err)
	}
	opts, err := producerOpts(cfg, &conf)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	adminConf := conf
	adminConf.Producer.Transaction.ID = ""
	client, err := sarama.NewClient(cfg.Brokers, &adminConf)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: connecting to Kafka %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	return &Txn{cfg: cfg, conf: &conf, opts: opts, client: client, slots: make([]*kafkaSlot, cfg.Slots)}, nil
}

func (w *Txn) String() string {
	return fmt.Sprintf("kafka %s txn prefix %s", strings.Join(w.cfg.Brokers, ","), w.cfg.TransactionalID)
}

func (w *Txn) slotID(k int) string { return w.cfg.TransactionalID + "-" + strconv.Itoa(k) }

// Begin opens transaction txn on slot txn % Slots.
func (w *Txn) Begin(ctx context.Context, txn int64) error {
	if err := w.usable(); err != nil {
		return err
	}
	if txn < 0 {
		return fmt.Errorf("kafka sink: begin: negative txn %d", txn)
	}
	if w.open != nil {
		return fmt.Errorf("kafka sink: begin txn %d: txn %d is still open on %s", txn, w.open.txn, w.open.id)
	}
	k := int(txn % int64(w.cfg.Slots))
	s := w.slots[k]
	if s != nil && s.state == slotPreCommitted {
		return fmt.Errorf("kafka sink: begin txn %d: %s still holds pre-committed txn %d; commit or abort it first", txn, s.id, s.txn)
	}
	if s == nil {
		var err error
		if s, err = w.newSlot(ctx, k); err != nil {
			return err
		}
		w.slots[k] = s
	}
	if err := s.cl.BeginTransaction(); err != nil {
		w.closeSlot(s)
		return fmt.Errorf("kafka sink: begin txn %d on %s: %w", txn, s.id, kafkaError(err))
	}
	if s.state != slotIdle {
		s.prevTxn, s.prevState = s.txn, s.state
	}
	s.txn, s.state, s.sent, s.offsets = txn, slotOpen, 0, false
	s.reset()
	w.open = s
	return nil
}

// Write sends a record into the open transaction. It returns before the
// record is acknowledged (PreCommit waits for that), but blocks while the
// producer's buffer is full, until ctx ends. key and value are copied.
// The record's timestamp is the time of the call.
func (w *Txn) Write(ctx context.Context, topic string, key, value []byte) error {
	return w.WriteAt(ctx, topic, key, value, time.Now())
}

// WriteAt is Write with the time of the call given: a caller writing a
// run of records reads the clock once for all of them, not once per record
// (a clock read was ~4 % of a checkpoint -> Kafka job's CPU). now becomes
// the record's timestamp (Kafka keeps milliseconds), and the producer
// fails a record not delivered within the transaction timeout of it, so
// it must be a recent reading of the clock, not an event's time.
func (w *Txn) WriteAt(ctx context.Context, topic string, key, value []byte, ts time.Time) error {
	s := w.open
	if s == nil {
		return errors.New("kafka sink: write outside a transaction (Begin first)")
	}
	if err := s.failed(); err != nil {
		return fmt.Errorf("kafka sink: txn %d on %s: %w", s.txn, s.id, err)
	}
	// A record that can't be buffered (ctx ended, the producer closed)
	// is failed through the promise, and so fails the transaction.
	r := newRecord(topic, key, value)
	r.Timestamp = ts
	s.cl.Produce(ctx, r, s.promise)
	s.sent++
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kafka sink: writing to %s: %w", topic, err)
	}
	return nil
}

// PreCommit waits until every record of the open transaction is
// acknowledged, checks with the coordinator that the transaction is still
// this producer's and ongoing, and returns its Pending. On failure the
// transaction is aborted (best effort) and its producer closed.
func (w *Txn) PreCommit(ctx context.Context) (writers.Pending, error) {
	if err := w.usable(); err != nil {
		return writers.Pending{}, err
	}
	s := w.open
	if s == nil {
		return writers.Pending{}, errors.New("kafka sink: pre-commit: no open transaction")
	}
	fail := func(err error) (writers.Pending, error) {
		w.discard(ctx, s)
		return writers.Pending{}, fmt.Errorf("kafka sink: pre-commit of txn %d on %s: %w", s.txn, s.id, err)
	}
	if err := s.flush(ctx); err != nil {
		return fail(err)
	}
	data := kafkaTxnData{ProducerID: s.pid, Epoch: s.epoch, Empty: s.empty()}
	if !data.Empty {
		st, err := w.describe(ctx, s.id)
		if err != nil {
			return fail(err)
		}
		if st.TransactionState != "Ongoing" || st.ProducerID != s.pid || st.ProducerEpoch != s.epoch {
			return fail(fmt.Errorf("the coordinator reports state %s for producer id %d epoch %d, expected Ongoing for producer id %d epoch %d (aborted by its timeout, or fenced by another writer with this id)",
				st.TransactionState, st.ProducerID, st.ProducerEpoch, s.pid, s.epoch))
		}
		in := map[topicPart]bool{}
		for _, t := range st.Topics {
			for _, p := range t.Partitions {
				in[topicPart{t.Topic, p}] = true
			}
		}
		s.mu.Lock()
		var missing []string
		for tp := range s.parts {
			if !in[tp] {
				missing = append(missing, fmt.Sprintf("%s/%d", tp.topic, tp.part))
			}
		}
		s.mu.Unlock()
		if len(missing) > 0 {
			slices.Sort(missing)
			return fail(fmt.Errorf("the coordinator's transaction lacks partitions %s that it was written to", strings.Join(missing, ",")))
		}
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return fail(err)
	}
	s.state = slotPreCommitted
	w.open = nil
	return writers.Pending{Sink: "kafka", Subtask: w.cfg.Subtask, Txn: s.txn, ID: s.id, Data: raw}, nil
}

// discard gives up the slot's transaction: it closes the producer and
// aborts the transaction by its identity, so that read-committed readers
// of its partitions aren't held up until the timeout. Best effort.
func (w *Txn) discard(ctx context.Context, s *kafkaSlot) {
	w.closeSlot(s)
	if s.empty() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = w.endTxn(ctx, s.id, s.pid, s.epoch, false)
}

// Close closes every producer and the client. Open and pre-committed
// transactions stay open on the broker, for Recover (or the transaction
// timeout) to end. Safe to call twice.
func (w *Txn) Close() error {
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	for _, s := range w.slots {
		if s != nil {
			w.closeSlot(s)
		}
	}
	if err := w.client.Close(); err != nil && !errors.Is(err, sarama.ErrClosedClient) {
		return fmt.Errorf("kafka sink: closing: %w", err)
	}
	return nil
}

func (w *Txn) usable() error {
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.closed {
		return errors.New("kafka sink: writer is closed")
	}
	return nil
}
