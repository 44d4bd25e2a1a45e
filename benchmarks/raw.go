package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/internal/kafkautil"
)

// The raw-consume ceiling: the fastest bare sarama reader of a topic we
// could make, used by `microbatch bench` and the Go benchmarks alike. It
// decodes nothing but Kafka's own framing: per record it counts one and
// adds the value's length, so anything that also decodes events, sums
// them and commits them can only be slower. A ratio above 1.0 against it
// means the ceiling is wrong, not that a strategy is fast.
//
// It does not go through sarama's Consumer: that hands every record to
// the reader as its own *ConsumerMessage over a channel (an allocation
// and a goroutine hand-off per record), which costs more than the job's
// own work on small records. It sends FetchRequests itself instead, one
// goroutine and one broker connection per partition, so partitions are
// fetched and their responses decoded in parallel.

// RawSettings are the ceiling reader's knobs, shown with its results.
type RawSettings struct {
	// FetchBytes is what one FetchRequest asks for, per partition and in
	// all (a fetch returns at least one whole batch even if larger).
	FetchBytes int32 `json:"fetch_bytes"`
	// MaxWait is the broker's long-poll bound; the ceiling reads a topic
	// that is already written, so it matters only at the very end.
	MaxWait time.Duration `json:"max_wait"`
	// ReadCommitted is the job's isolation level. The workload topics are
	// written without transactions, so it costs the broker nothing extra.
	ReadCommitted bool `json:"read_committed"`
}

// DefaultRawSettings are the settings measured fastest on the dev broker
// and Apache Kafka (benchmarks/README.md).
var DefaultRawSettings = RawSettings{FetchBytes: 16 << 20, MaxWait: 100 * time.Millisecond, ReadCommitted: true}

func (s RawSettings) String() string {
	iso := "read-uncommitted"
	if s.ReadCommitted {
		iso = "read-committed"
	}
	return fmt.Sprintf("direct FetchRequests (v11), one goroutine and broker connection per partition, all partitions in parallel; %d MiB per fetch; max wait %s; %s; no decoding: counts records and value bytes",
		s.FetchBytes>>20, s.MaxWait, iso)
}

// RawRead is one read of a whole topic by the ceiling reader.
type RawRead struct {
	Duration time.Duration // client creation → the last partition at its end offset
	Records  int64
	Bytes    int64 // sum of the records' value lengths
}

// EventsPerSec is the read's rate.
func (r RawRead) EventsPerSec() float64 { return float64(r.Records) / r.Duration.Seconds() }

// consumeAll reads every partition of topic from its log start to its end
// offset (the end offsets are taken first, outside the timing) with s.
func consumeAll(ctx context.Context, brokers []string, topic string, s RawSettings) (RawRead, error) {
	ends, err := kafkautil.EndOffsets(brokers, topic)
	if err != nil {
		return RawRead{}, err
	}
	start := time.Now()
	conf := kafkautil.Config("microbatch-bench-raw")
	client, err := sarama.NewClient(brokers, conf)
	if err != nil {
		return RawRead{}, err
	}
	defer client.Close()
	var (
		mu  sync.Mutex
		out RawRead
	)
	// Every partition's start and leader first, so that a failure here
	// leaves no reader running.
	type span struct {
		part      int32
		from, end int64
		leader    string
	}
	var spans []span
	for p, end := range ends {
		if end == 0 {
			continue
		}
		from, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return RawRead{}, fmt.Errorf("reading the log start of %s/%d: %w", topic, p, err)
		}
		leader, err := client.Leader(topic, p)
		if err != nil {
			return RawRead{}, fmt.Errorf("finding the leader of %s/%d: %w", topic, p, err)
		}
		spans = append(spans, span{p, from, end, leader.Addr()})
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, sp := range spans {
		p := sp.part
		g.Go(func() error {
			n, bytes, err := readPartition(gctx, conf, sp.leader, topic, p, sp.from, sp.end, s)
			if err != nil {
				return fmt.Errorf("reading %s/%d: %w", topic, p, err)
			}
			mu.Lock()
			out.Records += n
			out.Bytes += bytes
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return RawRead{}, fmt.Errorf("raw consume of %s: %w", topic, err)
	}
	out.Duration = time.Since(start)
	return out, nil
}

// readPartition fetches [from, end) of one partition on its own connection.
func readPartition(ctx context.Context, conf *sarama.Config, addr, topic string, part int32, from, end int64, s RawSettings) (records, bytes int64, err error) {
	b := sarama.NewBroker(addr)
	if err := b.Open(conf); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
		return 0, 0, err
	}
	defer b.Close()
	iso := sarama.ReadUncommitted
	if s.ReadCommitted {
		iso = sarama.ReadCommitted
	}
	for next := from; next < end; {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: int32(s.MaxWait.Milliseconds()), MinBytes: 1,
			MaxBytes: s.FetchBytes, Isolation: iso, SessionEpoch: -1}
		req.AddBlock(topic, part, next, s.FetchBytes, -1)
		resp, err := b.Fetch(req)
		if err != nil {
			return 0, 0, err
		}
		blk := resp.GetBlock(topic, part)
		if blk == nil {
			return 0, 0, errors.New("no block for the partition in the fetch response")
		}
		if !errors.Is(blk.Err, sarama.ErrNoError) {
			return 0, 0, blk.Err
		}
		at := next
		for _, rs := range blk.RecordsSet {
			if rb := rs.RecordBatch; rb != nil {
				if rb.PartialTrailingRecord {
					break
				}
				if !rb.Control {
					for _, r := range rb.Records {
						if o := rb.FirstOffset + r.OffsetDelta; o >= next && o < end {
							records++
							bytes += int64(len(r.Value))
						}
					}
				}
				at = max(at, rb.FirstOffset+int64(rb.LastOffsetDelta)+1)
			} else if ms := rs.MsgSet; ms != nil {
				for _, m := range ms.Messages {
					if m.Offset >= next && m.Offset < end && m.Msg != nil {
						records++
						bytes += int64(len(m.Msg.Value))
					}
					at = max(at, m.Offset+1)
				}
			}
		}
		if at == next {
			// Nothing past next yet (a fetch bounded by a batch larger than
			// FetchBytes returns it whole, so this is only a broker that has
			// not caught up): ask again.
			continue
		}
		next = at
	}
	return records, bytes, nil
}
