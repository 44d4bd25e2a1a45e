package kafkasink

import (
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
)

// The Txn cases run against kfake (in process) and against Apache
// Kafka named by MICROBATCH_TEST_KAFKA (not in -short mode). Every case
// uses its own topic (one partition, so order is checkable) and its own
// transactional id prefix.

type kafkaTxnTarget struct {
	name  string
	start func(testing.TB) []string
}

var kafkaTxnTargets = []kafkaTxnTarget{
	{"kfake", kafkaTxnStartKfake},
	{"ApacheKafka", func(t testing.TB) []string {
		return kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka))
	}},
}

func kafkaTxnStartKfake(t testing.TB) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// forEachKafka runs f once per broker kind.
func forEachKafka(t *testing.T, f func(t *testing.T, brokers []string)) {
	for _, target := range kafkaTxnTargets {
		t.Run(target.name, func(t *testing.T) { f(t, target.start(t)) })
	}
}

var kafkaTxnSeq atomic.Int64

// kafkaTxnName is a topic or transactional id prefix unique to this test
// and run.
func kafkaTxnName(t testing.TB, kind string) string {
	clean := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), ".")
	if len(clean) > 60 {
		clean = clean[len(clean)-60:]
	}
	return fmt.Sprintf("mbt-%s-%s-%d-%d", kind, clean, time.Now().UnixNano()%1e9, kafkaTxnSeq.Add(1))
}

func kafkaTxnTopic(t testing.TB, brokers []string) string {
	t.Helper()
	topic := kafkaTxnName(t, "topic")
	if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
		t.Fatal(err)
	}
	return topic
}

func newTestTxn(t testing.TB, brokers []string, prefix string) *Txn {
	t.Helper()
	w, err := New(Config{Brokers: brokers, TransactionalID: prefix, Subtask: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// kafkaTxnWrite writes the values (keyed by themselves) into the open
// transaction.
func kafkaTxnWrite(t testing.TB, w *Txn, topic string, values ...string) {
	t.Helper()
	for _, v := range values {
		if err := w.Write(t.Context(), topic, []byte(v), []byte(v)); err != nil {
			t.Fatalf("Write(%s): %v", v, err)
		}
	}
}

func kafkaTxnValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// Read quiet times: how long to wait for more records once the expected
// ones are in (for duplicates), or for any record when none are expected.
const (
	kafkaTxnQuietMore = 250 * time.Millisecond
	kafkaTxnQuietNone = 600 * time.Millisecond
	kafkaTxnReadLimit = 15 * time.Second
)

// kafkaTxnRead reads partition 0 of topic from the start at the given
// isolation level: until want records and then a quiet time, or until
// kafkaTxnReadLimit. It returns the values.
func kafkaTxnRead(t testing.TB, brokers []string, topic string, level sarama.IsolationLevel, want int) []string {
	t.Helper()
	conf := kafkautil.Config("kafkatxn-test-reader")
	conf.Consumer.IsolationLevel = level
	conf.Consumer.MaxWaitTime = 50 * time.Millisecond
	c, err := sarama.NewConsumer(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := []string{}
	quiet := kafkaTxnQuietMore
	if want == 0 {
		quiet = kafkaTxnQuietNone
	}
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	limit := time.After(kafkaTxnReadLimit)
	for {
		select {
		case m := <-pc.Messages():
			got = append(got, string(m.Value))
			timer.Reset(quiet)
		case err := <-pc.Errors():
			t.Fatalf("reading %s: %v", topic, err)
		case <-timer.C:
			if len(got) >= want {
				return got
			}
			timer.Reset(quiet)
		case <-limit:
			return got
		}
	}
}

func kafkaTxnExpect(t testing.TB, brokers []string, topic string, level sarama.IsolationLevel, want []string) {
	t.Helper()
	got := kafkaTxnRead(t, brokers, topic, level, len(want))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		name := "read-committed"
		if level == sarama.ReadUncommitted {
			name = "read-uncommitted"
		}
		t.Fatalf("%s reader of %s got %d records %q, want %d %q", name, topic, len(got), got, len(want), want)
	}
}

// kafkaTxnSettle waits until the records written so far in the open
// transaction are acknowledged, before a test makes records fail, so that
// which records reached the broker doesn't depend on timing. (It also
// kept sarama's data race between a record failing and the sending of
// others, IBM/sarama#2913, out of -race runs while the sink used sarama.)
func kafkaTxnSettle(t testing.TB, w *Txn) {
	t.Helper()
	if err := w.open.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// kafkaTxnOffsets returns partition 0's last stable offset and high-water
// mark. They are equal when no transaction is open on it.
func kafkaTxnOffsets(t testing.TB, brokers []string, topic string) (lso, hwm int64) {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkautil.Config("kafkatxn-test-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	leader, err := client.Leader(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]int64
	for i, level := range []sarama.IsolationLevel{sarama.ReadCommitted, sarama.ReadUncommitted} {
		req := sarama.NewOffsetRequest(kafkautil.Version)
		req.IsolationLevel = level
		req.AddBlock(topic, 0, sarama.OffsetNewest, 1)
		res, err := leader.GetAvailableOffsets(req)
		if err != nil {
			t.Fatal(err)
		}
		b := res.GetBlock(topic, 0)
		if b == nil || b.Err != sarama.ErrNoError {
			t.Fatalf("list offsets of %s: %+v", topic, b)
		}
		out[i] = b.Offset
		if len(b.Offsets) > 0 {
			out[i] = b.Offsets[0]
		}
	}
	return out[0], out[1]
}

// kafkaTxnWaitStable waits until no transaction holds partition 0 of
// topic open (LSO = HWM): a read-committed reader isn't blocked.
func kafkaTxnWaitStable(t testing.TB, brokers []string, topic string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		lso, hwm := kafkaTxnOffsets(t, brokers, topic)
		if lso == hwm {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last stable offset %d still below high-water mark %d after %v: a transaction is still open", topic, lso, hwm, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kafkaTxnGroupOffset returns group's committed offset of partition 0 of
// topic (-1 if none). stable: ask with require_stable and wait while a
// transaction holds pending offsets of the partition (UNSTABLE_OFFSET_COMMIT);
// otherwise the broker answers with the last committed offset, ignoring
// pending ones.
func kafkaTxnGroupOffset(t testing.TB, brokers []string, group, topic string, stable bool) int64 {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkautil.Config("kafkatxn-test-group-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	deadline := time.Now().Add(time.Minute) // a bound for a busy machine
	for {
		b, err := client.Coordinator(group)
		if err != nil {
			t.Fatal(err)
		}
		req := sarama.NewOffsetFetchRequest(kafkautil.Version, group, map[string][]int32{topic: {0}})
		req.RequireStable = stable
		res, err := b.FetchOffset(req)
		if err != nil {
			t.Fatal(err)
		}
		blk := res.GetBlock(topic, 0)
		code := res.Err
		if code == sarama.ErrNoError && blk != nil {
			code = blk.Err
		}
		switch {
		case code == sarama.ErrNoError && blk != nil:
			return blk.Offset
		case code == sarama.ErrGroupIDNotFound: // kfake, for a group without offsets
			return -1
		case code == sarama.ErrUnstableOffsetCommit && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("fetching offsets of group %s: %v (block %+v)", group, code, blk)
		}
	}
}
