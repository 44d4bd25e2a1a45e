package writers

import (
	"cmp"
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

	"github.com/microbatch/microbatch/internal/kafkautil"
)

// KafkaTxn is one sink subtask's Kafka writer for checkpoint mode: the
// records of checkpoint interval n go into Kafka transaction n, which
// PreCommit flushes and Commit makes visible to read-committed consumers.
//
// # Slots
//
// A transactional.id holds at most one open transaction, but while
// transaction n is pre-committed (waiting for checkpoint n to complete)
// transaction n+1 is already being written. So a subtask rotates through
// Slots transactional ids, "<prefix>-<k>": transaction n uses slot
// n % Slots, with one sarama transactional producer (and client) per slot,
// created lazily. Creating it sends InitProducerId, which aborts whatever
// that id still had open and fences older producers of it.
//
// A slot's producer is reused from one transaction to the next without a
// new InitProducerId, so its transactions share a producer id and epoch
// (sarama's EndTxn versions don't bump the epoch per transaction). A
// commit by (id, producer id, epoch) — which is all a Pending holds, and
// all a recovery in another process can send — therefore commits whatever
// transaction that id has open. It is only safe because the caller
// guarantees that a slot is reused only after its previous transaction
// was committed or aborted, and that a committed transaction's slot is
// not reused before a later checkpoint, one that no longer lists it, has
// completed. Then the latest complete checkpoint never lists a Pending
// whose id has since started another transaction, and a recovery commit
// can't commit a newer transaction by mistake. That takes at least 3
// slots (n pre-committed, n+1 open, and n-1's slot still protected until
// checkpoint n completes), which is the default and the minimum.
//
// Slots must stay the same across restarts of a job: Recover aborts what
// ids 0..Slots-1 left open, not ids an earlier, larger Slots used.
//
// # Retries
//
// Commit and Abort are idempotent (see TwoPhase). Commit retries by
// itself, for a bounded time, on the errors that mean the transaction
// coordinator moved or is busy; an error it returns after that is worth
// retrying unless it wraps ErrTxnLost. Write and PreCommit are not
// retried: after a failure the open transaction is unusable.
type KafkaTxn struct {
	cfg    KafkaTxnConfig
	conf   *sarama.Config // the adjusted base; each slot's producer gets a copy
	client sarama.Client  // coordinator requests: DescribeTransactions, EndTxn, DescribeConfigs
	slots  []*kafkaSlot   // nil: no live producer for that slot
	open   *kafkaSlot     // the slot of the open transaction, if any

	closeMu sync.Mutex
	closed  bool
}

var _ TwoPhase = (*KafkaTxn)(nil)

// KafkaTxnConfig configures one sink subtask's Kafka transactional writer.
type KafkaTxnConfig struct {
	Brokers         []string
	TransactionalID string        // prefix, e.g. "<job>-<subtask>"; slot k uses "<prefix>-<k>"
	Subtask         int           // stored in Pending.Subtask
	Slots           int           // transactional ids in rotation; 0 → 3, at least 3 (see KafkaTxn)
	TxnTimeout      time.Duration // Producer.Transaction.Timeout; 0 → 1 minute
	// Sarama is an optional base configuration (TLS, SASL, client id…). It
	// is copied, never modified; the copy gets the settings a
	// transactional producer needs. nil: sarama's defaults with the
	// Kafka version microbatch is tested with and client id
	// "microbatch-kafka-sink".
	Sarama *sarama.Config
	// Security (TLS, SASL) is applied on top of the base configuration.
	Security KafkaSecurity
}

// Defaults and bounds of KafkaTxnConfig.
const (
	DefaultKafkaTxnSlots   = 3
	MinKafkaTxnSlots       = 3
	DefaultKafkaTxnTimeout = time.Minute
)

// Bounds of the retry loop for requests to a transaction coordinator
// (EndTxn, DescribeTransactions): attempts, and the backoff between them.
// About 20 s in all; the context can cut it shorter.
const (
	maxCoordinatorAttempts = 25
	coordinatorBackoffMin  = 50 * time.Millisecond
	coordinatorBackoffMax  = time.Second
)

// cleanupTimeout bounds the best-effort abort of a failed transaction.
const cleanupTimeout = 5 * time.Second

func (c *KafkaTxnConfig) setDefaults() {
	if c.Slots == 0 {
		c.Slots = DefaultKafkaTxnSlots
	}
	if c.TxnTimeout == 0 {
		c.TxnTimeout = DefaultKafkaTxnTimeout
	}
}

// Validate checks a configuration after defaults are applied.
func (c *KafkaTxnConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka sink: no brokers")
	case c.TransactionalID == "":
		return errors.New("kafka sink: empty transactional id prefix")
	case c.Slots < MinKafkaTxnSlots:
		return fmt.Errorf("kafka sink: %d transactional id slots; at least %d are needed so that a recovery commit can't hit a newer transaction", c.Slots, MinKafkaTxnSlots)
	case c.TxnTimeout < time.Millisecond:
		return fmt.Errorf("kafka sink: transaction timeout %v is too short", c.TxnTimeout)
	}
	return nil
}

// CheckKafkaTxnTimeout returns an error if a Kafka transaction timeout is
// not above need, the longest a pre-committed transaction may wait for its
// commit (checkpoint interval + checkpoint timeout + restart time): the
// broker aborts a transaction older than its timeout, and a pre-committed
// transaction aborted that way is lost (ErrTxnLost). A zero timeout is
// the default, DefaultKafkaTxnTimeout. Whether the broker accepts the
// timeout (transaction.max.timeout.ms) is known only when the first
// producer starts.
func CheckKafkaTxnTimeout(timeout, need time.Duration) error {
	if timeout == 0 {
		timeout = DefaultKafkaTxnTimeout
	}
	if timeout <= need {
		return fmt.Errorf("kafka sink: transaction timeout %v must exceed checkpoint interval + checkpoint timeout + restart time (%v)", timeout, need)
	}
	return nil
}

// NewKafkaTxn connects to the cluster; producers are created by Recover
// and Begin.
func NewKafkaTxn(cfg KafkaTxnConfig) (*KafkaTxn, error) {
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
		// Small batches, sent soon: a checkpoint waits for the last ones.
		conf.Producer.Flush.Bytes = 1 << 20
		conf.Producer.Flush.Frequency = 2 * time.Millisecond
		// A topic created a moment ago may still be electing leaders.
		conf.Producer.Retry.Max = 10
		conf.Producer.Retry.Backoff = 250 * time.Millisecond
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
	adminConf := conf
	adminConf.Producer.Transaction.ID = ""
	client, err := sarama.NewClient(cfg.Brokers, &adminConf)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: connecting to Kafka %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	return &KafkaTxn{cfg: cfg, conf: &conf, client: client, slots: make([]*kafkaSlot, cfg.Slots)}, nil
}

func (w *KafkaTxn) String() string {
	return fmt.Sprintf("kafka %s txn prefix %s", strings.Join(w.cfg.Brokers, ","), w.cfg.TransactionalID)
}

func (w *KafkaTxn) slotID(k int) string { return w.cfg.TransactionalID + "-" + strconv.Itoa(k) }

// kafkaTxnData is Pending.Data of a Kafka transaction.
type kafkaTxnData struct {
	ProducerID int64 `json:"producer_id"`
	Epoch      int16 `json:"epoch"`
	// Empty: no record was written, so the broker has no transaction to
	// end (an EndTxn would get INVALID_TXN_STATE).
	Empty bool `json:"empty,omitempty"`
}

type slotState int

const (
	slotIdle         slotState = iota // fresh producer, no transaction yet
	slotOpen                          // Begin done, writing
	slotPreCommitted                  // PreCommit done, waiting for Commit or Abort
	slotCommitted
	slotAborted
)

// kafkaSlot is one live transactional producer, for transactional id id.
// A slot whose producer is closed is dropped (KafkaTxn.slots[k] = nil);
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
func (w *KafkaTxn) newSlot(ctx context.Context, k int) (*kafkaSlot, error) {
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
func (w *KafkaTxn) timeoutError(id string) error {
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
func (w *KafkaTxn) closeSlot(s *kafkaSlot) {
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

// Recover commits keep (this subtask's pending transactions of the latest
// complete checkpoint), then aborts whatever else the subtask's ids have
// open by starting their producers (InitProducerId).
//
// The ids of kept transactions are not re-initialised: an InitProducerId
// bumps the epoch, after which a repeated commit of the kept transaction
// — by a Recover that crashed and runs again, before a newer checkpoint
// completes — would be rejected as fenced although it committed. Their
// ids can't hold anything else (see KafkaTxn); Begin initialises them
// when they are next used.
func (w *KafkaTxn) Recover(ctx context.Context, keep []Pending) error {
	if err := w.usable(); err != nil {
		return err
	}
	keep = slices.Clone(keep)
	slices.SortStableFunc(keep, func(a, b Pending) int { return cmp.Compare(a.Txn, b.Txn) })
	kept := map[string]bool{}
	for _, p := range keep {
		if err := w.Commit(ctx, p); err != nil {
			return err
		}
		kept[p.ID] = true
	}
	for k := range w.slots {
		s := w.slots[k]
		if kept[w.slotID(k)] {
			if s != nil && (s.state == slotOpen || s.state == slotPreCommitted) {
				if err := w.abortLive(ctx, s); err != nil {
					return err
				}
			}
			continue
		}
		if s != nil {
			w.closeSlot(s)
		}
		s, err := w.newSlot(ctx, k)
		if err != nil {
			return err
		}
		w.slots[k] = s
	}
	w.open = nil
	return nil
}

// Begin opens transaction txn on slot txn % Slots.
func (w *KafkaTxn) Begin(ctx context.Context, txn int64) error {
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
	if s != nil && s.prod.TxnStatus()&sarama.ProducerTxnFlagReady == 0 {
		w.closeSlot(s) // in error, or mid-way: start over
		s = nil
	}
	if s == nil {
		var err error
		if s, err = w.newSlot(ctx, k); err != nil {
			return err
		}
		w.slots[k] = s
	}
	if err := s.prod.BeginTxn(); err != nil {
		w.closeSlot(s)
		return fmt.Errorf("kafka sink: begin txn %d on %s: %w", txn, s.id, kafkaError(err))
	}
	if s.state != slotIdle {
		s.prevTxn, s.prevState = s.txn, s.state
	}
	s.txn, s.state, s.sent, s.offsets = txn, slotOpen, 0, false
	s.mu.Lock()
	s.err = nil
	clear(s.parts)
	s.mu.Unlock()
	w.open = s
	return nil
}

// Write sends a record into the open transaction. It returns before the
// record is acknowledged (PreCommit waits for that), but blocks while the
// producer's buffers are full, until ctx ends. key and value are copied.
func (w *KafkaTxn) Write(ctx context.Context, topic string, key, value []byte) error {
	s := w.open
	if s == nil {
		return errors.New("kafka sink: write outside a transaction (Begin first)")
	}
	if err := s.add(); err != nil {
		return fmt.Errorf("kafka sink: txn %d on %s: %w", s.txn, s.id, err)
	}
	buf := make([]byte, len(key)+len(value))
	copy(buf, key)
	copy(buf[len(key):], value)
	msg := &sarama.ProducerMessage{Topic: topic}
	if key != nil {
		msg.Key = sarama.ByteEncoder(buf[:len(key):len(key)])
	}
	if value != nil {
		msg.Value = sarama.ByteEncoder(buf[len(key):])
	}
	select {
	case s.prod.Input() <- msg:
		s.sent++
		return nil
	case <-ctx.Done():
		s.acked("", -1, nil) // not sent after all
		return fmt.Errorf("kafka sink: writing to %s: %w", topic, ctx.Err())
	}
}

// WriteOffsets adds a consumer group's offsets to the open transaction:
// offsets[topic][partition] is the next offset to consume. They become the
// group's committed offsets when the transaction commits, together with
// its records, and are discarded if it aborts — the consume-transform-produce
// loop of KIP-98: a job that reads its input by these offsets and writes
// its output through this writer neither loses nor duplicates an input
// record across crashes. Readers of the offsets (OffsetFetch, a consumer
// group joining) see them only after the commit; pending ones are not
// visible.
//
// Unlike sarama's AddOffsetsToTxn, which keeps the offsets in memory until
// its producer commits, WriteOffsets sends them to the brokers at once
// (AddOffsetsToTxn, then TxnOffsetCommit with this transaction's producer
// id and epoch). So they are part of the transaction PreCommit hands out:
// a Commit of its Pending by another process commits them too.
//
// The offsets are committed as a standalone consumer's (generation -1, no
// member id): the group must not have live members that commit offsets of
// their own. Calling it again in the same transaction replaces the
// offsets of the partitions it names. An error leaves the transaction
// unable to pre-commit: abort it.
func (w *KafkaTxn) WriteOffsets(ctx context.Context, group string, offsets map[string]map[int32]int64) error {
	if err := w.usable(); err != nil {
		return err
	}
	s := w.open
	if s == nil {
		return errors.New("kafka sink: writing offsets outside a transaction (Begin first)")
	}
	fail := func(err error) error {
		err = fmt.Errorf("kafka sink: txn %d on %s: writing offsets of group %s: %w", s.txn, s.id, group, err)
		s.mu.Lock()
		if s.err == nil {
			s.err = err // PreCommit refuses the transaction
		}
		s.mu.Unlock()
		return err
	}
	// Bad arguments fail the transaction too: a caller that went on and
	// committed its records without their offsets would duplicate them
	// after a restart.
	if group == "" {
		return fail(errors.New("empty consumer group"))
	}
	topics := map[string][]*sarama.PartitionOffsetMetadata{}
	for topic, parts := range offsets {
		for part, off := range parts {
			if off < 0 {
				return fail(fmt.Errorf("negative offset %d for %s/%d", off, topic, part))
			}
			topics[topic] = append(topics[topic], &sarama.PartitionOffsetMetadata{Partition: part, Offset: off, LeaderEpoch: -1})
		}
	}
	if len(topics) == 0 {
		return nil
	}
	s.offsets = true // from here on the broker may hold them
	err := w.coordinated(ctx, s.id, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{
			Version: 3, TransactionalID: s.id, ProducerID: s.pid, ProducerEpoch: s.epoch, GroupID: group,
		})
		if err != nil {
			return 0, err
		}
		return res.Err, nil
	})
	if err != nil {
		return fail(fmt.Errorf("AddOffsetsToTxn: %w", err))
	}
	backoff := coordinatorBackoffMin
	for attempt := 1; ; attempt++ {
		err = w.txnOffsetCommit(s, group, topics)
		if err == nil {
			return nil
		}
		if !retriableCoordinatorErr(err) || attempt >= maxCoordinatorAttempts {
			return fail(fmt.Errorf("TxnOffsetCommit: %w", kafkaError(err)))
		}
		_ = w.client.RefreshCoordinator(group)
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("TxnOffsetCommit: %w (after %v)", ctx.Err(), kafkaError(err)))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, coordinatorBackoffMax)
	}
}

// txnOffsetCommit sends one TxnOffsetCommit to group's coordinator and
// returns its first error, top-level or per partition.
func (w *KafkaTxn) txnOffsetCommit(s *kafkaSlot, group string, topics map[string][]*sarama.PartitionOffsetMetadata) error {
	b, err := w.client.Coordinator(group)
	if err != nil {
		return err
	}
	res, err := b.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{
		Version: 3, TransactionalID: s.id, GroupID: group, ProducerID: s.pid, ProducerEpoch: s.epoch,
		GenerationID: -1, Topics: topics,
	})
	if err != nil {
		return err
	}
	for topic, parts := range res.Topics {
		for _, p := range parts {
			if p.Err != sarama.ErrNoError {
				return fmt.Errorf("%s/%d: %w", topic, p.Partition, kafkaErr{p.Err})
			}
		}
	}
	return nil
}

// PreCommit waits until every record of the open transaction is
// acknowledged, checks with the coordinator that the transaction is still
// this producer's and ongoing, and returns its Pending. On failure the
// transaction is aborted (best effort) and its producer closed.
func (w *KafkaTxn) PreCommit(ctx context.Context) (Pending, error) {
	if err := w.usable(); err != nil {
		return Pending{}, err
	}
	s := w.open
	if s == nil {
		return Pending{}, errors.New("kafka sink: pre-commit: no open transaction")
	}
	fail := func(err error) (Pending, error) {
		w.discard(ctx, s)
		return Pending{}, fmt.Errorf("kafka sink: pre-commit of txn %d on %s: %w", s.txn, s.id, err)
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
	return Pending{Sink: "kafka", Subtask: w.cfg.Subtask, Txn: s.txn, ID: s.id, Data: raw}, nil
}

// discard gives up the slot's transaction: it closes the producer and
// aborts the transaction by its identity, so that read-committed readers
// of its partitions aren't held up until the timeout. Best effort.
func (w *KafkaTxn) discard(ctx context.Context, s *kafkaSlot) {
	w.closeSlot(s)
	if s.empty() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = w.endTxn(ctx, s.id, s.pid, s.epoch, false)
}

// Commit commits p: its records (and offsets, WriteOffsets) are decided.
// Read-committed consumers see the records once the partition leaders
// have written the commit markers, a moment after Commit returns (the
// coordinator writes them asynchronously); a reader that must see them
// waits for the partitions' last stable offset. It uses the slot's live producer when
// p is the transaction it holds, and otherwise (recovery, another process,
// a failed live commit) sends EndTxn(commit) with p's producer id and
// epoch to the coordinator. Committing a committed transaction is success.
// An error wrapping ErrTxnLost means p can't commit any more.
func (w *KafkaTxn) Commit(ctx context.Context, p Pending) error {
	if err := w.usable(); err != nil {
		return err
	}
	d, err := parsePending(p)
	if err != nil {
		return err
	}
	lost := func(err error) error {
		return fmt.Errorf("kafka sink: committing txn %d on %s (producer id %d, epoch %d): %w: %w", p.Txn, p.ID, d.ProducerID, d.Epoch, ErrTxnLost, err)
	}
	if s := w.liveSlot(p.ID, d); s != nil {
		switch {
		case s.txn == p.Txn && s.state == slotPreCommitted:
			if err := s.prod.CommitTxn(); err == nil {
				if s.sent > 0 || !s.offsets {
					s.state = slotCommitted
					return nil
				}
				// Offsets only: sarama had nothing to end, the broker
				// has. The EndTxn below ends it.
			}
			// Finish it by identity: the outcome above may be unknown.
			w.closeSlot(s)
		case s.txn == p.Txn && s.state == slotCommitted, s.prevTxn == p.Txn && s.prevState == slotCommitted:
			return nil
		case s.txn == p.Txn && s.state == slotAborted, s.prevTxn == p.Txn && s.prevState == slotAborted:
			return lost(errors.New("it was aborted"))
		case s.txn == p.Txn && s.state == slotOpen:
			return fmt.Errorf("kafka sink: committing txn %d on %s: it is not pre-committed", p.Txn, p.ID)
		default:
			// The broker would answer for the id's newer transaction.
			return fmt.Errorf("kafka sink: committing txn %d on %s: the id has moved on to txn %d, its outcome is unknown here (slot reused too early)", p.Txn, p.ID, s.txn)
		}
	}
	if d.Empty {
		return nil
	}
	err = w.endTxn(ctx, p.ID, d.ProducerID, d.Epoch, true)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sarama.ErrProducerFenced), errors.Is(err, sarama.ErrInvalidProducerEpoch),
		errors.Is(err, sarama.ErrInvalidTxnState), errors.Is(err, sarama.ErrInvalidProducerIDMapping):
		return lost(err)
	}
	return fmt.Errorf("kafka sink: committing txn %d on %s: %w", p.Txn, p.ID, err)
}

// Abort discards p, or the open transaction when p is the zero Pending.
// Aborting what is already aborted, fenced or unknown is success;
// aborting a committed transaction is an error.
func (w *KafkaTxn) Abort(ctx context.Context, p Pending) error {
	if err := w.usable(); err != nil {
		return err
	}
	if p.Sink == "" && p.ID == "" && p.Txn == 0 && len(p.Data) == 0 {
		if w.open == nil {
			return nil
		}
		return w.abortLive(ctx, w.open)
	}
	d, err := parsePending(p)
	if err != nil {
		return err
	}
	committed := fmt.Errorf("kafka sink: aborting txn %d on %s: it is already committed", p.Txn, p.ID)
	if s := w.liveSlot(p.ID, d); s != nil {
		switch {
		case s.txn == p.Txn && (s.state == slotOpen || s.state == slotPreCommitted):
			return w.abortLive(ctx, s)
		case s.txn == p.Txn && s.state == slotCommitted, s.prevTxn == p.Txn && s.prevState == slotCommitted:
			return committed
		default:
			// Aborted, or finished before the id's current transaction:
			// an EndTxn now would hit that one.
			return nil
		}
	}
	if d.Empty {
		return nil
	}
	err = w.endTxn(ctx, p.ID, d.ProducerID, d.Epoch, false)
	switch {
	case err == nil, isGoneErr(err):
		return nil
	case errors.Is(err, sarama.ErrInvalidTxnState):
		return fmt.Errorf("%w: %w", committed, err)
	}
	return fmt.Errorf("kafka sink: aborting txn %d on %s: %w", p.Txn, p.ID, err)
}

// isGoneErr: the transaction of that producer id and epoch can't be open
// any more (fenced by a newer epoch, or the id was reassigned).
func isGoneErr(err error) bool {
	return errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch) ||
		errors.Is(err, sarama.ErrInvalidProducerIDMapping) || errors.Is(err, sarama.ErrUnknownProducerID)
}

// abortLive aborts the open or pre-committed transaction of a live slot,
// through its producer, or else by identity after closing the producer.
func (w *KafkaTxn) abortLive(ctx context.Context, s *kafkaSlot) error {
	if w.open == s {
		w.open = nil
	}
	txn := s.txn
	s.mu.Lock()
	failed := s.err != nil
	s.mu.Unlock()
	// With offsets added (WriteOffsets) the abort below by identity runs
	// too: sarama ends only the transactions it added partitions to, and
	// sends nothing if every record failed before that.
	if err := s.prod.AbortTxn(); err == nil && !s.offsets {
		s.state = slotAborted
		if failed {
			// After a failed record sarama bumps the epoch when it
			// aborts, so the identity PreCommit checks is stale: start
			// the next transaction on a new producer.
			w.closeSlot(s)
		}
		return nil
	}
	w.closeSlot(s)
	if s.empty() {
		return nil
	}
	err := w.endTxn(ctx, s.id, s.pid, s.epoch, false)
	if err == nil || isGoneErr(err) {
		return nil
	}
	return fmt.Errorf("kafka sink: aborting txn %d on %s (it stays open until the id's next use or its timeout): %w", txn, s.id, err)
}

// liveSlot returns the live producer of id if it has p's identity.
func (w *KafkaTxn) liveSlot(id string, d kafkaTxnData) *kafkaSlot {
	for _, s := range w.slots {
		if s != nil && s.id == id && s.pid == d.ProducerID && s.epoch == d.Epoch {
			return s
		}
	}
	return nil
}

func parsePending(p Pending) (kafkaTxnData, error) {
	var d kafkaTxnData
	if p.Sink != "kafka" {
		return d, fmt.Errorf("kafka sink: pending txn %d of sink %q is not a Kafka transaction", p.Txn, p.Sink)
	}
	if p.ID == "" {
		return d, fmt.Errorf("kafka sink: pending txn %d has no transactional id", p.Txn)
	}
	if err := json.Unmarshal(p.Data, &d); err != nil {
		return d, fmt.Errorf("kafka sink: pending txn %d on %s: bad data %q: %v", p.Txn, p.ID, p.Data, err)
	}
	return d, nil
}

// Close closes every producer and the client. Open and pre-committed
// transactions stay open on the broker, for Recover (or the transaction
// timeout) to end. Safe to call twice.
func (w *KafkaTxn) Close() error {
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

func (w *KafkaTxn) usable() error {
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.closed {
		return errors.New("kafka sink: writer is closed")
	}
	return nil
}

// describe returns the coordinator's view of transactional id id.
func (w *KafkaTxn) describe(ctx context.Context, id string) (sarama.TransactionState, error) {
	var st sarama.TransactionState
	err := w.coordinated(ctx, id, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.DescribeTransactions(&sarama.DescribeTransactionsRequest{TransactionalIDs: []string{id}})
		if err != nil {
			return 0, err
		}
		for _, s := range res.TransactionStates {
			if s.TransactionalID == id {
				st = s
				return s.ErrorCode, nil
			}
		}
		return 0, errors.New("DescribeTransactions answer lacks the id")
	})
	if err != nil {
		return st, fmt.Errorf("describing transactional id %s: %w", id, err)
	}
	return st, nil
}

// endTxn sends EndTxn for (id, pid, epoch) to the id's coordinator.
func (w *KafkaTxn) endTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	return w.coordinated(ctx, id, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.EndTxn(&sarama.EndTxnRequest{
			Version: 3, TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, TransactionResult: commit,
		})
		if err != nil {
			return 0, err
		}
		return res.Err, nil
	})
}

// coordinated runs call against the transaction coordinator of id until
// it succeeds or fails for good. It refreshes the coordinator and retries
// after the errors that mean the coordinator moved, is loading, is busy
// with the previous request's markers (CONCURRENT_TRANSACTIONS), or the
// connection failed; at most maxCoordinatorAttempts times, and not after
// ctx ends.
func (w *KafkaTxn) coordinated(ctx context.Context, id string, call func(*sarama.Broker) (sarama.KError, error)) error {
	backoff := coordinatorBackoffMin
	for attempt := 1; ; attempt++ {
		b, err := w.client.TransactionCoordinator(id)
		if err == nil {
			var code sarama.KError
			if code, err = call(b); err == nil {
				if code == sarama.ErrNoError {
					return nil
				}
				err = kafkaErr{code}
			}
		}
		if !retriableCoordinatorErr(err) || attempt >= maxCoordinatorAttempts {
			return kafkaError(err)
		}
		_ = w.client.RefreshTransactionCoordinator(id)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %v)", ctx.Err(), kafkaError(err))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, coordinatorBackoffMax)
	}
}

func retriableCoordinatorErr(err error) bool {
	var k sarama.KError
	if errors.As(err, &k) {
		switch k {
		case sarama.ErrNotCoordinatorForConsumer, sarama.ErrConsumerCoordinatorNotAvailable,
			sarama.ErrOffsetsLoadInProgress, sarama.ErrConcurrentTransactions,
			sarama.ErrRequestTimedOut, sarama.ErrNetworkException:
			return true
		}
		return false
	}
	// Anything else is the connection's: closed, refused, timed out.
	return !errors.Is(err, sarama.ErrClosedClient) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// kafkaErr prints a Kafka error code by its protocol name: sarama prints
// several of the transaction codes as "Unknown error, how did this
// happen?". It unwraps to the sarama.KError.
type kafkaErr struct{ code sarama.KError }

var kafkaErrNames = map[sarama.KError]string{
	sarama.ErrRequestTimedOut:                 "REQUEST_TIMED_OUT",
	sarama.ErrNetworkException:                "NETWORK_EXCEPTION",
	sarama.ErrOffsetsLoadInProgress:           "COORDINATOR_LOAD_IN_PROGRESS",
	sarama.ErrConsumerCoordinatorNotAvailable: "COORDINATOR_NOT_AVAILABLE",
	sarama.ErrNotCoordinatorForConsumer:       "NOT_COORDINATOR",
	sarama.ErrInvalidProducerEpoch:            "INVALID_PRODUCER_EPOCH",
	sarama.ErrInvalidTxnState:                 "INVALID_TXN_STATE",
	sarama.ErrInvalidProducerIDMapping:        "INVALID_PRODUCER_ID_MAPPING",
	sarama.ErrInvalidTransactionTimeout:       "INVALID_TRANSACTION_TIMEOUT",
	sarama.ErrConcurrentTransactions:          "CONCURRENT_TRANSACTIONS",
	sarama.ErrTransactionCoordinatorFenced:    "TRANSACTION_COORDINATOR_FENCED",
	sarama.ErrUnknownProducerID:               "UNKNOWN_PRODUCER_ID",
	sarama.ErrProducerFenced:                  "PRODUCER_FENCED",
	sarama.KError(105):                        "TRANSACTIONAL_ID_NOT_FOUND",
}

func (e kafkaErr) Error() string {
	if name, ok := kafkaErrNames[e.code]; ok {
		return fmt.Sprintf("%s (Kafka error %d)", name, int16(e.code))
	}
	return e.code.Error()
}

func (e kafkaErr) Unwrap() error { return e.code }

// kafkaError names a bare sarama.KError; other errors are returned as
// they are.
func kafkaError(err error) error {
	if k, ok := err.(sarama.KError); ok {
		return kafkaErr{k}
	}
	return err
}
