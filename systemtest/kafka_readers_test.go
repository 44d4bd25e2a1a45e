package systemtest

// Readers of Kafka topics: the output read committed and uncommitted,
// last stable offsets and high-water marks, a live read-committed
// consumer, and the input by position.

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/record"
)

// kafkaOffsets returns each partition's last stable offset (read-committed
// end) and high-water mark.
func kafkaOffsets(t *testing.T, brokers, topic string) (lso, hwm map[int32]int64) {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("ckpt-test-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bounds, err := src.Bounds(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lso, hwm = map[int32]int64{}, map[int32]int64{}
	for p, b := range bounds {
		lso[p] = b.End
		if hwm[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatal(err)
		}
	}
	return lso, hwm
}

// kafkaRecord is one output record and where it is.
type kafkaRecord struct {
	part int32
	off  int64
	out  event.Output
}

func decodeOutput(t *testing.T, value []byte) event.Output {
	t.Helper()
	var o event.Output
	if err := json.Unmarshal(value, &o); err != nil {
		t.Fatalf("output record %q: %v", value, err)
	}
	return o
}

func outputsOf(recs []kafkaRecord) []event.Output {
	outs := make([]event.Output, len(recs))
	for i, r := range recs {
		outs[i] = r.out
	}
	return outs
}

// rawRecord is one record's offset and value.
type rawRecord struct {
	off   int64
	value []byte
}

// readTopicCommitted reads every partition of topic read-committed, from
// the log start to the last stable offset, all partitions at once, and
// returns each partition's records in offset order.
func readTopicCommitted(t *testing.T, brokers, topic string) map[int32][]rawRecord {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("ckpt-test-committed"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bounds, err := src.Bounds(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		out  = map[int32][]rawRecord{}
		errs []error
		wg   sync.WaitGroup
	)
	for _, p := range src.Partitions() {
		r := record.Range{Topic: topic, Partition: p, From: bounds[p].Start, To: bounds[p].End}
		if r.Len() == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var recs []rawRecord
			err := src.Read(t.Context(), r, func(rec *batch.Record) error {
				recs = append(recs, rawRecord{rec.Offset, slices.Clone(rec.Value)})
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			out[p] = recs
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("reading %s read-committed: %v", topic, errs)
	}
	return out
}

// readCommitted reads the output topic read-committed, up to the last
// stable offset, partition after partition.
func readCommitted(t *testing.T, brokers, topic string) []kafkaRecord {
	t.Helper()
	parts := readTopicCommitted(t, brokers, topic)
	var out []kafkaRecord
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		for _, r := range parts[p] {
			out = append(out, kafkaRecord{p, r.off, decodeOutput(t, r.value)})
		}
	}
	return out
}

// readUncommitted reads every data record of topic read-uncommitted, the
// records of aborted and open transactions included, up to the high-water
// mark. The consumer skips transaction markers, so a partition whose log
// ends in markers is done once nothing arrives for a second and at most a
// few offsets (markers) are left.
func readUncommitted(t *testing.T, brokers, topic string) []kafkaRecord {
	t.Helper()
	conf := kafkautil.Config("ckpt-test-uncommitted")
	conf.Consumer.IsolationLevel = sarama.ReadUncommitted
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), conf)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		out  []kafkaRecord
		errs []string
		wg   sync.WaitGroup
	)
	for _, p := range parts {
		hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if hwm == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pc.Close()
			mine, err := readPartitionUncommitted(pc, topic, p, hwm)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			out = append(out, mine...)
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("reading %s read-uncommitted: %s", topic, strings.Join(errs, "; "))
	}
	return out
}

// maxTailMarkers is how many offsets at the end of a partition
// readUncommitted takes for transaction markers: more than the
// transactions that can be open on a partition at once.
const maxTailMarkers = 16

// readPartitionUncommitted reads partition p of topic from pc up to hwm,
// the high-water mark, or up to the markers at its end once nothing
// arrives for a second.
func readPartitionUncommitted(pc sarama.PartitionConsumer, topic string, p int32, hwm int64) ([]kafkaRecord, error) {
	var mine []kafkaRecord
	last := int64(-1)
	quiet := time.NewTimer(time.Second)
	defer quiet.Stop()
	// A bound on a stall, not on the whole read: on a busy
	// machine tens of thousands of records take a while.
	stall := time.NewTimer(time.Minute)
	defer stall.Stop()
	for last < hwm-1 {
		select {
		case m, ok := <-pc.Messages():
			if !ok {
				return nil, fmt.Errorf("%s/%d: consumer closed at %d of %d", topic, p, last, hwm)
			}
			var o event.Output
			if err := json.Unmarshal(m.Value, &o); err != nil {
				return nil, fmt.Errorf("%s/%d@%d: %q: %v", topic, p, m.Offset, m.Value, err)
			}
			mine = append(mine, kafkaRecord{p, m.Offset, o})
			last = m.Offset
			quiet.Reset(time.Second)
			stall.Reset(time.Minute)
		case e, ok := <-pc.Errors():
			if ok {
				return nil, fmt.Errorf("%s/%d: %v", topic, p, e)
			}
		case <-quiet.C:
			if hwm-1-last <= maxTailMarkers {
				return mine, nil
			}
			quiet.Reset(time.Second)
		case <-stall.C:
			return nil, fmt.Errorf("%s/%d: no record for a minute after offset %d of %d", topic, p, last, hwm)
		}
	}
	return mine, nil
}

// liveReader is a read-committed consumer of the output that runs while
// the job is killed and restarted, as a downstream application would, and
// counts every id it is given twice.
type liveReader struct {
	client   sarama.Client
	consumer sarama.Consumer
	stopc    chan struct{}
	wg       sync.WaitGroup

	mu       sync.Mutex
	seen     map[int64]bool
	records  int64
	dups     int64
	firstDup string
	errs     []string
}

func startLiveReader(t *testing.T, brokers, topic string) *liveReader {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("ckpt-test-live"))
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	l := &liveReader{client: client, consumer: consumer, stopc: make(chan struct{}), seen: map[int64]bool{}}
	parts, err := client.Partitions(topic)
	if err != nil {
		l.stop()
		t.Fatal(err)
	}
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			l.stop()
			t.Fatal(err)
		}
		l.wg.Add(1)
		go l.read(pc)
	}
	return l
}

func (l *liveReader) read(pc sarama.PartitionConsumer) {
	defer l.wg.Done()
	defer pc.Close()
	for {
		select {
		case <-l.stopc:
			return
		case m, ok := <-pc.Messages():
			if !ok {
				return
			}
			var o event.Output
			err := json.Unmarshal(m.Value, &o)
			l.mu.Lock()
			if err != nil {
				l.errs = append(l.errs, fmt.Sprintf("%s/%d@%d: %q: %v", m.Topic, m.Partition, m.Offset, m.Value, err))
			} else {
				l.records++
				if l.seen[o.ID] {
					if l.dups++; l.dups == 1 {
						l.firstDup = fmt.Sprintf("id %d again at %s/%d@%d", o.ID, m.Topic, m.Partition, m.Offset)
					}
				}
				l.seen[o.ID] = true
			}
			l.mu.Unlock()
		case e, ok := <-pc.Errors():
			if !ok {
				return
			}
			// sarama retries by itself; keep the message for the report.
			l.mu.Lock()
			l.errs = append(l.errs, e.Error())
			l.mu.Unlock()
		}
	}
}

// count is how many records the reader has been given so far.
func (l *liveReader) count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records
}

// waitFor waits until the reader has seen n distinct ids, or timeout.
func (l *liveReader) waitFor(n int64, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		have := int64(len(l.seen))
		l.mu.Unlock()
		if have >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *liveReader) stop() {
	select {
	case <-l.stopc:
		return
	default:
	}
	close(l.stopc)
	l.wg.Wait()
	l.consumer.Close()
	l.client.Close()
}

// inputRecord is one input event and where it is.
type inputRecord struct {
	part int32
	off  int64
	id   int64
}

func readInput(t *testing.T, brokers, topic string) []inputRecord {
	t.Helper()
	var out []inputRecord
	var ev event.Event
	for p, recs := range readTopicCommitted(t, brokers, topic) {
		for _, r := range recs {
			if err := event.Decode(r.value, &ev); err != nil {
				t.Fatalf("input %s/%d@%d: %v", topic, p, r.off, err)
			}
			out = append(out, inputRecord{p, r.off, ev.ID})
		}
	}
	return out
}
