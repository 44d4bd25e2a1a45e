package batch_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
)

// sourceBrokers returns the brokers KafkaSource is tested against: an
// in-process kfake always, Apache Kafka when MICROBATCH_TEST_KAFKA is set.
func sourceBrokers(t *testing.T) map[string][]string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a broker; skipped with -short")
	}
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	out := map[string][]string{"kfake": b.Addrs()}
	if k := os.Getenv(testutil.EnvKafka); k != "" {
		out["apache-kafka"] = []string{k}
	} else {
		t.Log("MICROBATCH_TEST_KAFKA not set: testing against kfake only")
	}
	return out
}

// TestKafkaSourceTransactionalInput reads a partition written by a
// transactional producer — committed and aborted transactions, so the log
// has markers and aborted records a read-committed consumer never sees —
// and checks that ranges cut anywhere, including right after a marker or
// inside an aborted transaction, deliver exactly the committed records and
// return instead of waiting for offsets that never come.
func TestKafkaSourceTransactionalInput(t *testing.T) {
	type txn struct {
		prefix string
		n      int
		commit bool
	}
	cases := []struct {
		name string
		txns []txn
		end  int64 // last stable offset: records plus one marker a transaction
		cuts []int64
	}{
		{
			name: "mixed",
			// 10 committed + marker, 10 aborted + marker, 5 committed +
			// marker, 3 aborted + marker.
			txns: []txn{{"c", 10, true}, {"a", 10, false}, {"d", 5, true}, {"x", 3, false}},
			end:  32,
			// Inside committed data, right at and after a commit marker,
			// inside an aborted transaction, at its abort marker.
			cuts: []int64{5, 10, 11, 15, 21, 22, 27, 31},
		},
		{
			// One record a transaction: record, marker, record, marker. A
			// range cut after a record leaves the next record pending and
			// the following range ends on a marker.
			name: "one record a transaction",
			txns: []txn{{"p", 1, true}, {"q", 1, true}, {"r", 1, true}},
			end:  6,
			cuts: []int64{1, 2, 3, 4, 5},
		},
	}
	for name, brokers := range sourceBrokers(t) {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				t.Parallel() // mostly waiting for quiet tails
				topic := fmt.Sprintf("txn-input-%d", time.Now().UnixNano())
				if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
					t.Fatal(err)
				}
				var want []string
				p := newTxnProducer(t, brokers, topic)
				for _, x := range tc.txns {
					want = append(want, p.transaction(t, x.prefix, x.n, x.commit)...)
				}

				client, err := sarama.NewClient(brokers, kafkautil.Config("source-test"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { client.Close() })
				bounds := func(src *batch.KafkaSource) int64 {
					b, err := src.Bounds(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					return b[0].End
				}
				src := newSource(t, client, topic)
				if end := bounds(src); end != tc.end {
					t.Fatalf("last stable offset %d, want %d", end, tc.end)
				}
				if got := readRange(t, src, topic, 0, tc.end); !slices.Equal(got, want) {
					t.Fatalf("whole range: got %v, want %v", got, want)
				}
				for _, cut := range tc.cuts {
					// A fresh source per cut, so that the first range is
					// read from a new consumer and the second continues it.
					// Closed at once: idle consumers on the same client would
					// queue their long polls ahead of the next one's fetches.
					src := newSource(t, client, topic)
					got := append(readRange(t, src, topic, 0, cut), readRange(t, src, topic, cut, tc.end)...)
					src.Close()
					if !slices.Equal(got, want) {
						t.Fatalf("cut at %d: got %v, want %v", cut, got, want)
					}
				}
			})
		}
	}
}

func newSource(t *testing.T, client sarama.Client, topic string) *batch.KafkaSource {
	t.Helper()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func readRange(t *testing.T, src *batch.KafkaSource, topic string, from, to int64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	err := src.Read(ctx, batch.Range{Topic: topic, Partition: 0, From: from, To: to}, func(r *batch.Record) error {
		if r.Offset < from || r.Offset >= to {
			t.Errorf("record at offset %d outside [%d,%d)", r.Offset, from, to)
		}
		got = append(got, string(r.Value))
		return nil
	})
	if err != nil {
		t.Fatalf("reading [%d,%d): %v", from, to, err)
	}
	return got
}

// txnProducer writes transactions into partition 0 of one topic.
type txnProducer struct {
	p     sarama.SyncProducer
	topic string
}

func newTxnProducer(t *testing.T, brokers []string, topic string) *txnProducer {
	t.Helper()
	cfg := kafkautil.Config("source-test-producer")
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = topic + "-txn"
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &txnProducer{p: p, topic: topic}
}

// transaction writes n records prefix0… in one transaction, commits or
// aborts it, and returns what a read-committed reader must see of it.
func (tp *txnProducer) transaction(t *testing.T, prefix string, n int, commit bool) []string {
	t.Helper()
	if err := tp.p.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	var visible []string
	for i := range n {
		v := fmt.Sprintf("%s%d", prefix, i)
		if _, _, err := tp.p.SendMessage(&sarama.ProducerMessage{Topic: tp.topic, Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatal(err)
		}
		if commit {
			visible = append(visible, v)
		}
	}
	var err error
	if commit {
		err = tp.p.CommitTxn()
	} else {
		err = tp.p.AbortTxn()
	}
	if err != nil {
		t.Fatal(err)
	}
	return visible
}
