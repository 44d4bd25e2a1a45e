package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/microbatch/microbatch/record"
)

// defaultFetchBytes is what one fetch of a partition asks for when
// KafkaSource.FetchBytes is not set: large enough that a fetch's round
// trip is small next to processing what it brings, small enough that the
// responses a partition holds at once (one being processed, one fetched
// ahead) stay a few MiB whatever the backlog.
const defaultFetchBytes = 1 << 20

// fetchWait bounds how long the broker holds a fetch that finds nothing
// to return. Read fetches only offsets below the end it was planned
// against, which are there at once; it waits only for a range reaching
// past the log's end, and this is how often such a wait looks at the stop.
const fetchWait = 250 * time.Millisecond

// maxFetchBytes bounds how far a fetch grows to bring a record batch
// larger than FetchBytes that is not first in its response (behind
// batches the log cleaner emptied); a larger one is ErrBatchTooLarge.
const maxFetchBytes = 256 << 20

// fetchAttempts bounds the fetches of one offset that fail with an error a
// new connection to the partition's (maybe new) leader may not meet.
const fetchAttempts = 4

// KafkaSource reads one topic, read-committed, with FetchRequests of its
// own rather than sarama's Consumer: one broker connection per partition,
// kept across batches, and one fetch in flight ahead of the records being
// processed — and, once a range is fetched, the first fetch of the range
// that starts where it ends (see ahead). sarama's Consumer hands every
// record over as its own *ConsumerMessage through a channel — an
// allocation and a goroutine hand-off per record, more than the job's own
// work on small records — and fetches beyond the range as far as its
// buffers go. Read knows its range ends below the last stable offset it was planned against, so it fetches
// exactly that span, and a span that ends in transaction markers or
// aborted records is seen to end as soon as its last batch is fetched.
//
// The fetches go over connections of the source's own (brokerConn, with
// the client's TLS and SASL settings), and the record batches they bring
// are decoded here (kafka_records.go) into one reused Record per Read,
// not by sarama, which decoded every record into a sarama.Record first.
// The client serves metadata (leaders) and ListOffsets.
type KafkaSource struct {
	// FetchBytes is what one fetch of a partition asks for (a fetch
	// returns at least one whole record batch, however large); 0 means
	// defaultFetchBytes. Set it before the first Read.
	FetchBytes int32

	client sarama.Client
	topic  string
	parts  []int32

	mu       sync.Mutex
	conns    map[int32]*brokerConn // idle connections, by partition
	ahead    map[int32]*ahead      // fetches sent ahead of the next Read, by partition (kafka_ahead.go)
	closed   bool
	fetchers sync.WaitGroup // of Reads, which may end before them
}

// NewKafkaSource checks that topic exists and returns a source over all of
// its partitions. The client stays owned by the caller.
func NewKafkaSource(client sarama.Client, topic string) (*KafkaSource, error) {
	if err := client.RefreshMetadata(topic); err != nil {
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return nil, fmt.Errorf("%w %q (microbatch never creates its input: create the topic, or fix --topic)", ErrNoTopic, topic)
		}
		return nil, fmt.Errorf("reading metadata of topic %q: %w", topic, err)
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("listing partitions of topic %q: %w", topic, err)
	}
	parts = slices.Clone(parts)
	slices.Sort(parts)
	return &KafkaSource{client: client, topic: topic, parts: parts, conns: make(map[int32]*brokerConn), ahead: make(map[int32]*ahead)}, nil
}

// Partitions lists the topic's partitions, sorted.
func (s *KafkaSource) Partitions() []int32 { return slices.Clone(s.parts) }

// Bounds asks each partition leader for the log start and the last stable
// offset (ListOffsets with isolation read_committed). sarama's
// Client.GetOffset can't be used for the end: it asks read_uncommitted and
// returns the high-water mark, which may include an open transaction.
func (s *KafkaSource) Bounds(ctx context.Context) (map[int32]Bounds, error) {
	out := make(map[int32]Bounds, len(s.parts))
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
			_ = s.client.RefreshMetadata(s.topic)
		}
		lastErr = s.bounds(out)
		if lastErr == nil {
			return out, nil
		}
	}
	return nil, lastErr
}

func (s *KafkaSource) bounds(out map[int32]Bounds) error {
	byLeader := map[*sarama.Broker][]int32{}
	for _, p := range s.parts {
		if _, done := out[p]; done {
			continue
		}
		b, err := s.client.Leader(s.topic, p)
		if err != nil {
			return fmt.Errorf("finding leader of %s/%d: %w", s.topic, p, err)
		}
		byLeader[b] = append(byLeader[b], p)
	}
	for b, parts := range byLeader {
		starts, err := s.listOffsets(b, parts, sarama.OffsetOldest)
		if err != nil {
			return err
		}
		ends, err := s.listOffsets(b, parts, sarama.OffsetNewest)
		if err != nil {
			return err
		}
		for _, p := range parts {
			out[p] = Bounds{Start: starts[p], End: ends[p]}
		}
	}
	return nil
}

func (s *KafkaSource) listOffsets(b *sarama.Broker, parts []int32, at int64) (map[int32]int64, error) {
	req := sarama.NewOffsetRequest(s.client.Config().Version)
	req.IsolationLevel = sarama.ReadCommitted
	for _, p := range parts {
		req.AddBlock(s.topic, p, at, 1)
	}
	resp, err := b.GetAvailableOffsets(req)
	if err != nil {
		// The broker connection is the client's, shared with the rest of the process:
		// leave it to the client to repair rather than closing it here.
		return nil, fmt.Errorf("listing offsets on broker %s: %w", b.Addr(), err)
	}
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		blk := resp.GetBlock(s.topic, p)
		switch {
		case blk == nil:
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", s.topic, p, sarama.ErrIncompleteResponse)
		case !errors.Is(blk.Err, sarama.ErrNoError):
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", s.topic, p, blk.Err)
		case len(blk.Offsets) > 0:
			out[p] = blk.Offsets[0]
		default:
			out[p] = blk.Offset
		}
	}
	return out, nil
}

// Read delivers the records of r a read-committed consumer is given, in
// offset order: committed data, neither transaction markers nor records of
// aborted transactions. It returns once every offset of r has been
// fetched — r.To must not be past the last stable offset for that to
// happen without waiting.
//
// Once the stop that ctx carries (WithStop) has fired, Read gives up with
// ErrStopped when it is waiting for records that may never come: a fetch
// came back with nothing past the last offset read, or failed and is
// about to be tried again. Records the broker has are read to the end of
// the range, however long that takes.
func (s *KafkaSource) Read(ctx context.Context, r record.Range, fn func(*Record) error) error {
	if r.From >= r.To {
		return nil
	}
	conn, first, err := s.take(ctx, r.Partition, r.From) // counts the fetcher below in s.fetchers
	if err != nil {
		return &ReadError{Range: r, Err: err}
	}
	stop := StopRequested(ctx)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := &fetcher{s: s, r: r, conn: conn, first: first, stop: stop, out: make(chan fetched)}
	// Read does not wait for the fetcher: a cancelled Read returns at
	// once, and the fetcher ends when its fetch in flight does — cut short
	// by the same cancel, which leaves that connection unusable: the
	// fetcher closes it rather than handing it back. Once it has fetched
	// the range to its end it goes on with the ahead fetch of the next
	// range, on the source's context, not Read's. Close waits for it.
	go func() {
		defer s.fetchers.Done()
		f.run(fctx)
		s.give(r.Partition, f.conn)
	}()

	rec := &Record{Partition: r.Partition}
	next := r.From // the fetcher's position, which it sends with each answer
	for next < r.To {
		var got fetched
		select {
		case <-ctx.Done():
			return ctx.Err()
		case got = <-f.out:
		}
		switch {
		case errors.Is(got.err, ErrStopped):
			return fmt.Errorf("reading %s (offsets %d to %d not seen): %w", r, next, r.To-1, got.err)
		case errors.Is(got.err, ErrBatchTooLarge):
			return fmt.Errorf("reading %s: %w", r, got.err)
		case got.err != nil:
			return &ReadError{Range: r, Err: got.err}
		}
		if err := visible(got.blk, next, r.To, rec, fn); err != nil {
			return err
		}
		if got.wait {
			// Nothing past next yet: the range reaches past the log's end.
			select {
			case <-stop:
				return fmt.Errorf("reading %s (offsets %d to %d not seen): %w", r, next, r.To-1, ErrStopped)
			default:
			}
		}
		next = got.step.next
	}
	return nil
}

// fetched is one fetch's answer for the range's partition, and where the
// fetcher goes on from.
type fetched struct {
	blk *kmsg.FetchResponseTopicPartition
	step
	err error
}

// fetcher fetches a range's partition ahead of Read: while Read hands one
// response's records to the task, the next one is on its way and being
// decoded. The out channel is unbuffered, so it holds at most one response
// besides the one being read. The fetcher owns the read position: Read
// takes it from each answer rather than working it out again.
type fetcher struct {
	s    *KafkaSource
	r    record.Range
	stop <-chan struct{}
	out  chan fetched

	conn  *brokerConn // nil after a failure: the next attempt opens another
	first *fetched    // the range's first answer, fetched ahead (see ahead); nil if none
}

func (f *fetcher) run(ctx context.Context) {
	at := step{next: f.r.From, size: f.s.FetchBytes}
	if at.size <= 0 {
		at.size = defaultFetchBytes
	}
	for at.next < f.r.To {
		got := fetched{step: at}
		if f.first != nil {
			// Fetched ahead from the same offset with the same size.
			got, f.first = *f.first, nil
		} else {
			var throttled bool
			got.blk, throttled, got.err = f.fetch(ctx, at.next, at.size)
			if ctx.Err() != nil {
				return
			}
			if got.err == nil {
				got.step, got.err = advance(got.blk, at, throttled)
			}
		}
		var next *ahead
		if got.err == nil && got.step.next >= f.r.To && f.conn != nil {
			// The range's last answer: the next range's first fetch goes
			// out as soon as Read has it, on this connection.
			if next = f.s.reserve(f.r.Partition, f.r.To, f.conn); next != nil {
				f.conn = nil
			}
		}
		select {
		case f.out <- got:
		case <-ctx.Done():
			if next != nil {
				next.abandon()
			}
			return
		}
		if next != nil {
			next.fetch(f.s, f.r.Partition)
		}
		if got.err != nil {
			return
		}
		at = got.step
	}
}

// step is where a partition's next fetch starts and how much it asks for.
type step struct {
	next int64
	size int32
	// wait: the fetch brought nothing, and nothing is there to bring
	// below the last stable offset (or the broker throttled it): the
	// same fetch again, which the broker holds up to fetchWait.
	wait bool
}

// advance is the step after the fetch at brought blk. It is the one
// place the read position moves, and it never returns at unchanged
// without wait set: each answer moves the position past every offset it
// showed (records, markers, aborted records, batches the log cleaner
// emptied — a producer's last batch is kept as a bare header, which the
// walk below sees like any other), or grows the fetch, or — having found
// nothing at all to read below the last stable offset — waits; anything
// else is an error. So the fetcher can't send the same request twice in
// a row while the broker has something to give it.
func advance(blk *kmsg.FetchResponseTopicPartition, at step, throttled bool) (step, error) {
	from := at.next
	next := from
	it := batchIter{in: blk.RecordBatches, checkCRC: true}
	whole := false
	for it.next() {
		whole = true
		next = max(next, lastOffset(&it.b)+1)
	}
	if it.err != nil {
		return at, it.err
	}
	if it.cut && next == from && it.hasFirst && it.cutFirst > from {
		// A batch cut by the fetch size that starts past from, behind
		// nothing that reaches from: what the broker skipped is gone
		// (compacted). Go on from this batch, which the next fetch then
		// brings first, whole.
		next = it.cutFirst
	}
	switch {
	case next > from:
		return step{next: next, size: at.size}, nil
	case it.cut:
		// The batch holding from is larger than the fetch and came cut
		// (behind batches that end before it, or at a header's length):
		// ask for more.
		if at.size >= maxFetchBytes {
			return at, fmt.Errorf("%w: the record batch at offset %d is larger than %d MiB", ErrBatchTooLarge, from, maxFetchBytes>>20)
		}
		return step{next: from, size: min(2*at.size, maxFetchBytes)}, nil
	case whole:
		return at, fmt.Errorf("the broker answered a fetch at offset %d with record batches that all end before it", from)
	}
	if !throttled && from < blk.LastStableOffset && blk.LastStableOffset <= blk.HighWatermark {
		// Nothing at all in [from, last stable offset): the broker returns
		// the batch holding from, or the next one, whatever the fetch
		// size — so the log cleaner removed everything there (say an
		// aborted transaction and its marker, before a transaction still
		// open). Waiting would wait for that transaction to end.
		return step{next: blk.LastStableOffset, size: at.size}, nil
	}
	return step{next: from, size: at.size, wait: true}, nil
}

var errOldFormat = errors.New("the broker sent records in the old message format (v0/v1), which microbatch does not read: upgrade the topic's message format to v2 (Kafka 0.11 and later)")

// fetch fetches the partition from offset from, on a new connection to
// the leader after a failure (a moved leader, a dropped connection), a
// bounded number of times. A stop ends the retries.
func (f *fetcher) fetch(ctx context.Context, from int64, size int32) (blk *kmsg.FetchResponseTopicPartition, throttled bool, err error) {
	for attempt := 0; attempt < fetchAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, false, ctx.Err()
			case <-f.stop:
				return nil, false, fmt.Errorf("%w (the last fetch failed: %v)", ErrStopped, err)
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
			_ = f.s.client.RefreshMetadata(f.s.topic)
		}
		if f.conn == nil {
			if f.conn, err = f.s.connect(ctx, f.r.Partition); err != nil {
				continue
			}
		}
		if blk, throttled, err = fetchOnce(ctx, f.conn, f.s.topic, f.r.Partition, from, size); err == nil {
			return blk, throttled, nil
		}
		// Whatever failed, the next fetch goes to the leader the metadata
		// names then, on a new connection.
		_ = f.conn.Close()
		f.conn = nil
		var kerr sarama.KError
		if errors.As(err, &kerr) && !retriableFetch(kerr) {
			_ = f.s.client.RefreshMetadata(f.s.topic)
			return nil, false, err
		}
	}
	return nil, false, err
}

// retriableFetch reports whether a fetch error may go away on a new
// connection to the partition's current leader.
func retriableFetch(err sarama.KError) bool {
	switch err {
	case sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable, sarama.ErrReplicaNotAvailable,
		sarama.ErrUnknownLeaderEpoch, sarama.ErrFencedLeaderEpoch, sarama.ErrKafkaStorageError,
		sarama.ErrUnknownTopicOrPartition, sarama.ErrNotCoordinatorForConsumer, sarama.ErrRequestTimedOut:
		return true
	}
	return false
}

// fetchOnce sends one read-committed fetch of part from offset from, which
// the broker holds up to fetchWait when there is nothing to return.
func fetchOnce(ctx context.Context, c *brokerConn, topic string, part int32, from int64, size int32) (*kmsg.FetchResponseTopicPartition, bool, error) {
	return fetchFor(ctx, c, topic, part, from, size, fetchWait)
}

// fetchFor sends one read-committed fetch of part from offset from, held
// at most wait by the broker; throttled reports that the broker held back
// the answer for a quota.
//
// The partition's limit must be what ends the fetch, not the response's:
// kfake leaves the aborted-transaction list out of a partition cut short
// by the response limit, which would make aborted records look committed.
// SessionEpoch -1 asks for a plain fetch, as sarama's consumer does: epoch
// 0 would open a fetch session on the broker for every connection.
func fetchFor(ctx context.Context, c *brokerConn, topic string, part int32, from int64, size int32, wait time.Duration) (blk *kmsg.FetchResponseTopicPartition, throttled bool, err error) {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(wait.Milliseconds())
	req.MinBytes = 1
	req.MaxBytes = math.MaxInt32
	req.IsolationLevel = 1 // read_committed
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = part, from, size
	rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := kmsg.NewPtrFetchResponse()
	if err := c.roundTrip(ctx, req, resp); err != nil {
		return nil, false, err
	}
	if resp.ErrorCode != 0 {
		return nil, false, sarama.KError(resp.ErrorCode)
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != topic {
			continue
		}
		for j := range t.Partitions {
			if p := &t.Partitions[j]; p.Partition == part {
				if p.ErrorCode != 0 {
					return nil, false, sarama.KError(p.ErrorCode)
				}
				return p, resp.ThrottleMillis > 0, nil
			}
		}
	}
	return nil, false, sarama.ErrIncompleteResponse
}

// visible calls fn with rec set to every record of blk with an offset
// in [from, to) that a read-committed consumer is given, in order. Where
// the next fetch starts is advance's business, not visible's.
//
// It applies the same aborted-transaction rule as sarama's consumer
// (partitionConsumer.parseResponse) to the broker's list of the aborted
// transactions overlapping the fetched span. That list includes a
// transaction that began before from: a fetch starting in the middle of
// one, whose abort marker a later fetch brings, still knows it is aborted.
func visible(blk *kmsg.FetchResponseTopicPartition, from, to int64, rec *Record, fn func(*Record) error) error {
	aborted := blk.AbortedTransactions
	if len(aborted) > 1 {
		aborted = slices.Clone(aborted)
		slices.SortFunc(aborted, func(a, b kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
			return cmp.Compare(a.FirstOffset, b.FirstOffset)
		})
	}
	var active map[int64]bool
	it := batchIter{in: blk.RecordBatches}
	for it.next() {
		rb := &it.b
		last := lastOffset(rb)
		for len(aborted) > 0 && aborted[0].FirstOffset <= last {
			if active == nil {
				active = map[int64]bool{}
			}
			active[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		switch {
		case last < from || rb.NumRecords == 0:
		case rb.Attributes&attrControl != 0:
			// The key of a control record is version int16, type int16;
			// type 0 ends an aborted transaction.
			data, err := batchRecords(rb)
			if err != nil {
				return err
			}
			r := recordReader{in: data, n: rb.NumRecords}
			if r.next() && len(r.key) >= 4 && r.key[2] == 0 && r.key[3] == 0 {
				delete(active, rb.ProducerID)
			}
			if r.err != nil {
				return r.err
			}
		case rb.Attributes&attrTransactional != 0 && active[rb.ProducerID]:
		default:
			data, err := batchRecords(rb)
			if err != nil {
				return err
			}
			logAppend := rb.Attributes&attrLogAppendTime != 0
			r := recordReader{in: data, n: rb.NumRecords}
			for r.next() {
				off := rb.FirstOffset + r.offsetDelta
				if off < from || off >= to {
					continue
				}
				ms := rb.MaxTimestamp
				if !logAppend {
					ms = rb.FirstTimestamp + r.tsDelta
				}
				rec.Offset, rec.Key, rec.Value, rec.Timestamp = off, r.key, r.value, time.UnixMilli(ms)
				if err := fn(rec); err != nil {
					return err
				}
			}
			if r.err != nil {
				return r.err
			}
		}
		if last+1 >= to {
			break
		}
	}
	return it.err
}

// take returns the partition's idle connection, or opens one to its
// leader, and the first answer of a Read from offset from if it was
// fetched ahead. A partition is read by one Read at a time.
func (s *KafkaSource) take(ctx context.Context, part int32, from int64) (_ *brokerConn, first *fetched, _ error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrSourceClosed
	}
	b := s.conns[part]
	delete(s.conns, part)
	a := s.ahead[part]
	delete(s.ahead, part)
	s.fetchers.Add(1)
	s.mu.Unlock()
	if a != nil {
		var ac *brokerConn
		var err error
		first, ac, err = a.claim(ctx, from)
		if ac != nil {
			if b != nil {
				_ = b.Close()
			}
			b = ac
		}
		if err != nil {
			if b != nil {
				_ = b.Close()
			}
			s.fetchers.Done()
			return nil, nil, err
		}
	}
	if b != nil {
		// Kept from an earlier Read: still the leader's? A follower answers
		// fetches too (fetch v11), from behind the leader, and leadership
		// moves back after a broker restarts.
		if leader, err := s.client.Leader(s.topic, part); err == nil && leader.Addr() == b.Addr() {
			return b, first, nil
		}
		_ = b.Close()
	}
	b, err := s.connect(ctx, part)
	if err != nil {
		s.fetchers.Done()
		return nil, nil, err
	}
	return b, first, nil
}

// give keeps b as the partition's idle connection for the next Read, or
// closes it if the source was closed meanwhile.
func (s *KafkaSource) give(part int32, b *brokerConn) {
	if b == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.conns[part] != nil {
		_ = b.Close()
		return
	}
	s.conns[part] = b
}

// connect opens a connection of the source's own to the partition's
// leader. The client's connections are shared with everything else the
// process asks the broker (offsets, metadata, the sink's coordinator
// requests): a fetch queued behind those, or theirs behind a fetch
// carrying a MiB, would wait for it.
func (s *KafkaSource) connect(ctx context.Context, part int32) (*brokerConn, error) {
	leader, err := s.client.Leader(s.topic, part)
	if err != nil {
		return nil, fmt.Errorf("finding the leader of %s/%d: %w", s.topic, part, err)
	}
	b, err := dialBroker(ctx, s.client.Config(), leader.Addr())
	if err != nil {
		return nil, fmt.Errorf("connecting to broker %s: %w", leader.Addr(), err)
	}
	return b, nil
}

// Close closes the source's connections, after the fetches of Reads that
// returned early (cancelled) have ended; safe to call twice. The client is
// the caller's.
func (s *KafkaSource) Close() error {
	s.mu.Lock()
	s.closed = true
	for p, b := range s.conns {
		_ = b.Close()
		delete(s.conns, p)
	}
	var ahead []*ahead
	for p, a := range s.ahead {
		a.cancel()
		ahead = append(ahead, a)
		delete(s.ahead, p)
	}
	s.mu.Unlock()
	s.fetchers.Wait() // each closes its connection in give, the source being closed
	closeAhead(ahead)
	return nil
}
