package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/record"
)

// tailQuiet is how long Read waits with no record arriving before it asks
// the broker whether the rest of the range holds any record a
// read-committed consumer would see. Ranges that end in transaction markers
// or aborted records (never delivered) finish that way; all others finish
// on their last record.
const tailQuiet = 500 * time.Millisecond

// tailFetchBytes bounds the direct fetch that settles a range's tail. A
// tail longer than that (a big aborted transaction) settles in as many
// probes, each going on where the previous one got to.
const tailFetchBytes = 1 << 20

// KafkaSource reads one topic with sarama, read-committed. It keeps one
// partition consumer per partition across batches, so consecutive batches
// stream without re-seeking; a Read whose range does not start where the
// previous one ended (a retry) re-seeks.
type KafkaSource struct {
	// TailQuiet overrides tailQuiet (set it before the first Read): the
	// continuous checkpoint mode, which reads short ranges all the time,
	// asks the broker sooner.
	TailQuiet time.Duration

	client   sarama.Client
	consumer sarama.Consumer
	topic    string
	parts    []int32

	mu      sync.Mutex
	readers map[int32]*partitionReader
	probes  map[string]*sarama.Broker // by leader address, see probeBroker
	closed  bool
}

type partitionReader struct {
	pc      sarama.PartitionConsumer
	next    int64                   // offset the next Read must start at to reuse pc
	pending *sarama.ConsumerMessage // read past the previous range's end
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
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("creating consumer: %w", err)
	}
	parts = slices.Clone(parts)
	slices.Sort(parts)
	return &KafkaSource{client: client, consumer: consumer, topic: topic, parts: parts, readers: make(map[int32]*partitionReader), probes: make(map[string]*sarama.Broker)}, nil
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
		// The broker connection is shared with the partition consumers:
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

// Read delivers the records of r. Records at or past r.To that arrive are
// kept for the next Read of the partition.
//
// Once the stop that ctx carries (WithStop) has fired, Read gives up with
// ErrStopped when it is waiting for records that may never come: none
// arrived for the quiet time, and the broker can't be asked or has none
// past the last one delivered. Records that keep coming, or that the
// broker shows are there, are read to the end of the range, and a tail
// of markers and aborted records still settles.
func (s *KafkaSource) Read(ctx context.Context, r record.Range, fn func(*Record) error) error {
	pr, err := s.reader(r)
	if err != nil {
		return err
	}
	// Until Read returns normally the reader's position is unknown; a later
	// Read of this partition then re-seeks.
	pr.next = -1
	rd := &rangeRead{s: s, r: r, pr: pr, fn: fn, rec: &Record{Partition: r.Partition}, seen: r.From - 1, probed: r.From}
	rd.owed = rd.seen
	if m := pr.pending; m != nil {
		pr.pending = nil
		if done, err := rd.deliver(m); done || err != nil {
			return err
		}
	}
	wait := tailQuiet
	if s.TailQuiet > 0 {
		wait = s.TailQuiet
	}
	stop := StopRequested(ctx)
	quiet := time.NewTimer(wait)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case cerr, ok := <-pr.pc.Errors():
			// sarama may have recovered by itself, or not (offset out of
			// range closes the consumer): either way this reader's
			// position is unknown, and a retry of the range re-seeks.
			if !ok {
				return fmt.Errorf("reading %s: %w", r, ErrSourceClosed)
			}
			return &ReadError{Range: r, Err: cerr.Err}
		case m, ok := <-pr.pc.Messages():
			if !ok {
				return fmt.Errorf("reading %s: %w", r, ErrSourceClosed)
			}
			if m.Offset < r.From {
				continue
			}
			if done, err := rd.deliver(m); done || err != nil {
				return err
			}
			quiet.Reset(wait)
		case <-quiet.C:
			next, done, err := rd.quiet(stop, wait)
			if done || err != nil {
				return err
			}
			quiet.Reset(next)
		}
	}
}

// rangeRead is one Read of a range: what it delivered and what the settle
// probes proved.
type rangeRead struct {
	s   *KafkaSource
	r   record.Range
	pr  *partitionReader
	fn  func(*Record) error
	rec *Record
	// seen is the last offset delivered.
	seen int64
	// Every offset of [r.From, probed) was delivered or holds nothing a
	// read-committed consumer is given (the settle probes saw so).
	probed int64
	// A probe saw a record at owed that the consumer is yet to deliver
	// while seen < owed: asking again before it did would only fetch the
	// same MiB again (every quiet period, while the consumer is slow).
	owed int64
}

// deliver hands m to the callback, or keeps it for the next Read when it
// lies past the range. done means the range is read.
func (rd *rangeRead) deliver(m *sarama.ConsumerMessage) (done bool, err error) {
	if m.Offset >= rd.r.To {
		rd.pr.pending = m
		rd.pr.next = rd.r.To
		return true, nil
	}
	rd.rec.Offset, rd.rec.Key, rd.rec.Value, rd.rec.Timestamp = m.Offset, m.Key, m.Value, m.Timestamp
	if err := rd.fn(rd.rec); err != nil {
		return false, err
	}
	rd.seen = m.Offset
	if m.Offset == rd.r.To-1 {
		rd.pr.next = rd.r.To
		return true, nil
	}
	return false, nil
}

// quiet handles a quiet period: nothing arrived for a while. Either the
// consumer is slow, or the rest of the range is markers and aborted
// records: the broker's log says which. Guessing here would lose records.
// It returns when to look again, or done when the range turned out read,
// or ErrStopped when it is waiting for records that may never come and a
// stop was requested.
func (rd *rangeRead) quiet(stop <-chan struct{}, wait time.Duration) (next time.Duration, done bool, err error) {
	if rd.seen < rd.owed {
		return wait, false, nil
	}
	r := rd.r
	from := max(rd.seen+1, rd.probed)
	visible, upTo, err := rd.s.visibleIn(r.Partition, from, r.To)
	if err == nil {
		if !visible && upTo >= r.To {
			rd.pr.next = r.To
			return 0, true, nil
		}
		rd.probed = upTo
	}
	switch {
	case err == nil && visible:
		// The records are there: the consumer is slow, and will deliver
		// them.
		rd.owed = upTo
		return wait, false, nil
	case err == nil && upTo > from:
		// Invisible all the way, but the fetch ended before r.To: go on
		// from there at once.
		return 0, false, nil
	}
	// The broker has nothing past from (yet), or did not answer: this is
	// waiting for records that may never come, which a stop ends.
	select {
	case <-stop:
		return 0, false, fmt.Errorf("reading %s (offsets %d to %d not seen): %w", r, from, r.To-1, ErrStopped)
	default:
	}
	return wait, false, nil
}

// visibleIn fetches up to tailFetchBytes of the partition from offset from,
// directly from its leader, and reports whether [from, to) holds a record a
// read-committed consumer would be given (data that is neither a control
// marker nor part of an aborted transaction). next is how far the fetch
// proved there is none: every offset of [from, next) is a marker, aborted,
// or a record outside [from, to); next >= to means none in the whole span.
// If there is one, next is its offset.
// Only whole record batches count: a partial trailing batch is left for
// the next probe, which starts at next.
//
// It applies the same aborted-transaction rule as the consumer (and as
// sarama's partitionConsumer.parseResponse), to the broker's list of the
// aborted transactions overlapping the fetched span. That list includes a
// transaction that began before from — a probe (or the consumer) starting
// in the middle of one, whose abort marker a later fetch brings, still
// knows it is aborted.
func (s *KafkaSource) visibleIn(part int32, from, to int64) (visible bool, next int64, err error) {
	leader, err := s.client.Leader(s.topic, part)
	if err != nil {
		return false, from, err
	}
	b, err := s.probeBroker(leader)
	if err != nil {
		return false, from, err
	}
	// The partition's limit must be what ends the fetch, not the
	// response's: kfake leaves the aborted-transaction list out of a
	// partition cut short by the response limit, which would make aborted
	// records look visible (and the tail never settle). SessionEpoch -1
	// asks for a plain fetch, as sarama's consumer does: epoch 0 would
	// open a fetch session on the broker for every probe.
	req := &sarama.FetchRequest{Version: 11, MaxBytes: 2 * tailFetchBytes, Isolation: sarama.ReadCommitted, SessionEpoch: -1}
	req.AddBlock(s.topic, part, from, tailFetchBytes, -1)
	resp, err := b.Fetch(req)
	if err != nil {
		s.dropProbeBroker(b)
		return false, from, err
	}
	blk := resp.GetBlock(s.topic, part)
	if blk == nil {
		return false, from, sarama.ErrIncompleteResponse
	}
	if !errors.Is(blk.Err, sarama.ErrNoError) {
		return false, from, blk.Err
	}
	aborted := slices.Clone(blk.AbortedTransactions)
	slices.SortFunc(aborted, func(a, b *sarama.AbortedTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	active := map[int64]bool{}
	next = from
	for _, recs := range blk.RecordsSet {
		rb := recs.RecordBatch
		if rb == nil {
			// Old message format: no transactions, so whatever is there
			// (from next on) will be delivered. Let the consumer do it.
			return true, next, nil
		}
		if rb.PartialTrailingRecord {
			break
		}
		last := rb.FirstOffset + int64(rb.LastOffsetDelta)
		for len(aborted) > 0 && aborted[0].FirstOffset <= last {
			active[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		switch {
		case rb.Control:
			// The key of a control record is version int16, type int16;
			// type 0 ends an aborted transaction.
			if len(rb.Records) > 0 && len(rb.Records[0].Key) >= 4 && rb.Records[0].Key[2] == 0 && rb.Records[0].Key[3] == 0 {
				delete(active, rb.ProducerID)
			}
		case rb.IsTransactional && active[rb.ProducerID]:
		default:
			for _, rec := range rb.Records {
				if off := rb.FirstOffset + rec.OffsetDelta; off >= from && off < to {
					return true, off, nil
				}
			}
		}
		next = max(next, last+1)
		if next >= to {
			return false, next, nil
		}
	}
	return false, next, nil
}

// probeBroker returns the source's own connection to leader for the settle
// probes. The client's connection is shared with the partition consumers,
// whose fetches wait up to Consumer.MaxWaitTime at the end of the log: a
// probe queued behind one would wait as long, once per MiB of a long tail.
func (s *KafkaSource) probeBroker(leader *sarama.Broker) (*sarama.Broker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSourceClosed
	}
	if b := s.probes[leader.Addr()]; b != nil {
		return b, nil
	}
	b := sarama.NewBroker(leader.Addr())
	if err := b.Open(s.client.Config()); err != nil {
		return nil, fmt.Errorf("connecting to broker %s: %w", leader.Addr(), err)
	}
	s.probes[leader.Addr()] = b
	return b, nil
}

// dropProbeBroker closes a probe connection that failed; the next probe
// opens a new one.
func (s *KafkaSource) dropProbeBroker(b *sarama.Broker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.probes[b.Addr()] == b {
		delete(s.probes, b.Addr())
	}
	_ = b.Close()
}

// reader returns the partition's consumer positioned at r.From. A
// partition is read by one task at a time, so only the map needs the lock:
// seeking (two offset requests, then sarama's first fetch) runs for all
// the partitions of a batch at once — after a restart or a rebalance every
// partition of the first batch seeks.
func (s *KafkaSource) reader(r record.Range) (*partitionReader, error) {
	s.mu.Lock()
	pr := s.readers[r.Partition]
	if pr != nil && pr.next == r.From {
		s.mu.Unlock()
		return pr, nil
	}
	delete(s.readers, r.Partition)
	closed := s.closed
	s.mu.Unlock()
	if pr != nil {
		_ = pr.pc.Close()
	}
	if closed {
		return nil, fmt.Errorf("reading %s: %w", r, ErrSourceClosed)
	}
	pc, err := s.consumer.ConsumePartition(s.topic, r.Partition, r.From)
	if err != nil {
		return nil, fmt.Errorf("seeking %s/%d to %d: %w", s.topic, r.Partition, r.From, err)
	}
	pr = &partitionReader{pc: pc, next: r.From}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = pc.Close()
		return nil, fmt.Errorf("reading %s: %w", r, ErrSourceClosed)
	}
	s.readers[r.Partition] = pr
	return pr, nil
}

// Close stops the partition consumers; safe to call twice. The client is
// the caller's.
func (s *KafkaSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// Each partition consumer stops only once its broker's fetch returns
	// (up to Consumer.MaxWaitTime): ask them all first, then wait, so the
	// waits overlap instead of adding up.
	for _, pr := range s.readers {
		pr.pc.AsyncClose()
	}
	for p, pr := range s.readers {
		for range pr.pc.Errors() { // closed when the consumer has stopped
		}
		delete(s.readers, p)
	}
	for addr, b := range s.probes {
		_ = b.Close()
		delete(s.probes, addr)
	}
	return s.consumer.Close()
}
