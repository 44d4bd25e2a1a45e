package kafkautil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
)

// Version is the protocol version microbatch speaks: new enough for
// read-committed fetches, KIP-447 and DescribeTransactions, and accepted by
// Kafka 4.x (which dropped the oldest request versions).
var Version = sarama.V3_6_0_0

// Config returns a sarama config for clientID with microbatch's defaults:
// read-committed consumption, no topic auto-creation, errors returned.
func Config(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = clientID
	c.Version = Version
	c.Metadata.AllowAutoTopicCreation = false
	c.Metadata.Retry.Max = 5
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	c.Net.DialTimeout = 10 * time.Second
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	c.Consumer.Return.Errors = true
	c.Consumer.Fetch.Default = 4 << 20
	c.Consumer.MaxWaitTime = 250 * time.Millisecond
	// Records a partition consumer reads ahead of its reader. A count, not
	// bytes: a reader slower than the fetches (a slow sink pushes back on
	// it) lets sarama hold this many per partition, each up to the broker's
	// message.max.bytes (1 MiB by default), so it must stay small to bound
	// memory; a larger one does not read small records any faster.
	c.ChannelBufferSize = 32
	return c
}

// SplitBrokers turns "a:9092, b:9092" into a list, dropping empty entries.
func SplitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// ProduceOptions describes a run of the deterministic generator.
type ProduceOptions struct {
	Brokers []string
	Topic   string
	Count   int64
	Keys    int
	Seed    uint64
	Rate    float64 // events per second; 0 = as fast as possible
	// Skip generates and discards the first Skip events, so a producer can
	// continue a sequence (the demo tops its topic up this way).
	Skip int64
	// Format is how each event is written (zero: compact).
	Format event.Format
	// Security is how to connect (zero: plaintext).
	Security Security
}

// Produce writes opts.Count events of the seed's sequence, keyed by event
// key, and waits until all are acknowledged. It returns the totals it
// produced.
func Produce(ctx context.Context, opts ProduceOptions) (event.Expected, error) {
	var exp event.Expected
	cfg, err := opts.Security.Config("microbatch-produce")
	if err != nil {
		return exp, err
	}
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = false
	cfg.Producer.Return.Errors = true
	cfg.Producer.Flush.Bytes = 1 << 20
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Producer.Compression = sarama.CompressionNone
	// A topic created a moment ago may still be electing leaders.
	cfg.Producer.Retry.Max = 10
	cfg.Producer.Retry.Backoff = 250 * time.Millisecond
	p, err := sarama.NewAsyncProducer(opts.Brokers, cfg)
	if err != nil {
		return exp, opts.Security.ConnectError(opts.Brokers, err)
	}
	// The Errors channel must always be drained or the producer deadlocks.
	errc := make(chan error, 1)
	go func() {
		var first error
		for e := range p.Errors() {
			if first == nil {
				first = e.Err
			}
		}
		errc <- first
	}()
	gen := event.NewGenerator(opts.Seed, opts.Keys)
	for range opts.Skip {
		gen.Next()
	}
	start := time.Now()
	var buf []byte
	var sendErr error
	for i := range opts.Count {
		if opts.Rate > 0 {
			due := start.Add(time.Duration(float64(i) / opts.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
		}
		if ctx.Err() != nil {
			sendErr = ctx.Err()
			break
		}
		id, key, amount := gen.Next()
		buf = event.AppendFormat(buf[:0], opts.Format, opts.Seed, id, key, amount, time.Now().UnixMilli())
		msg := &sarama.ProducerMessage{Topic: opts.Topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(append([]byte(nil), buf...))}
		select {
		case p.Input() <- msg:
			exp.Events++
			exp.Amount += amount
		case <-ctx.Done():
			sendErr = ctx.Err()
		}
		if sendErr != nil {
			break
		}
	}
	p.AsyncClose()
	if err := <-errc; err != nil {
		return exp, fmt.Errorf("producing to %s: %w", opts.Topic, err)
	}
	return exp, sendErr
}

// topicReadyTimeout bounds the wait for a new topic's partition leaders.
const topicReadyTimeout = 30 * time.Second

// EnsureTopic creates topic with partitions if it does not exist, and waits
// until every partition has a leader. An existing topic is left as it is.
func EnsureTopic(brokers []string, topic string, partitions int32) error {
	return Security{}.EnsureTopic(brokers, topic, partitions)
}

// EnsureTopic is the package's EnsureTopic, connecting with s.
func (s Security) EnsureTopic(brokers []string, topic string, partitions int32) error {
	conf, err := s.Config("microbatch-admin")
	if err != nil {
		return err
	}
	client, err := s.NewClient(brokers, conf)
	if err != nil {
		return err
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return fmt.Errorf("connecting to Kafka %s: %w", strings.Join(brokers, ","), err)
	}
	defer admin.Close()
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	deadline := time.Now().Add(topicReadyTimeout)
	for {
		err = topicReady(client, topic)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for topic %s: %w", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func topicReady(client sarama.Client, topic string) error {
	if err := client.RefreshMetadata(topic); err != nil {
		return err
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := client.Leader(topic, p); err != nil {
			return err
		}
		// Metadata can name a leader before it serves the partition
		// (Apache Kafka answers NOT_LEADER_OR_FOLLOWER for a moment): ask it.
		if _, err := client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return err
		}
	}
	return nil
}

// EndOffsets returns each partition's high-water mark. For a topic written
// without transactions, their sum is the number of records ever written.
func EndOffsets(brokers []string, topic string) (map[int32]int64, error) {
	return Security{}.EndOffsets(brokers, topic)
}

// EndOffsets is the package's EndOffsets, connecting with s.
func (s Security) EndOffsets(brokers []string, topic string) (map[int32]int64, error) {
	conf, err := s.Config("microbatch-offsets")
	if err != nil {
		return nil, err
	}
	client, err := s.NewClient(brokers, conf)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("listing partitions of %s: %w", topic, err)
	}
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		if out[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return nil, fmt.Errorf("reading end offset of %s/%d: %w", topic, p, err)
		}
	}
	return out, nil
}

// Feeder keeps producing a generator sequence to a topic until stopped, in
// chunks whose every event is acknowledged, so that what the topic holds is
// known exactly: tests and benchmarks use it to keep input flowing while
// they kill jobs.
type Feeder struct {
	done   chan struct{}
	cancel context.CancelFunc
	total  event.Expected // in the topic, what was there before included; read after done
	err    error
}

// StartFeeder produces opts's sequence in chunks of opts.Count events at
// opts.Rate, continuing after have.Events (what the topic already holds of
// the sequence; opts.Skip is ignored), until Finish.
func StartFeeder(opts ProduceOptions, have event.Expected) *Feeder {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Feeder{done: make(chan struct{}), cancel: cancel, total: have}
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			o := opts
			o.Skip = f.total.Events
			exp, err := Produce(ctx, o)
			// Stopped inside a chunk, Produce still waited for what it had
			// queued: the part it reports is in the topic.
			f.total.Events += exp.Events
			f.total.Amount += exp.Amount
			if err != nil && !errors.Is(err, context.Canceled) {
				f.err = err
				return
			}
		}
	}()
	return f
}

// Finish stops the feeder and returns what the topic holds of the sequence.
// Safe to call twice.
func (f *Feeder) Finish() (event.Expected, error) {
	f.cancel()
	<-f.done
	if f.err != nil {
		return f.total, fmt.Errorf("feeding the input: %w (the topic may hold part of a chunk)", f.err)
	}
	return f.total, nil
}
