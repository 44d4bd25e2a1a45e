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
	if k := os.Getenv("MICROBATCH_TEST_KAFKA"); k != "" {
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
	for name, brokers := range sourceBrokers(t) {
		t.Run(name, func(t *testing.T) {
			topic := fmt.Sprintf("txn-input-%d", time.Now().UnixNano())
			if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
				t.Fatal(err)
			}
			want := produceTransactions(t, brokers, topic)

			client, err := sarama.NewClient(brokers, kafkautil.Config("source-test"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			src, err := batch.NewKafkaSource(client, topic)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			bounds, err := src.Bounds(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			end := bounds[0].End
			// 10 committed + marker, 10 aborted + marker, 5 committed +
			// marker, 3 aborted + marker.
			if end != 32 {
				t.Fatalf("last stable offset %d, want 32", end)
			}
			if got := readRange(t, src, topic, 0, end); !slices.Equal(got, want) {
				t.Fatalf("whole range: got %v, want %v", got, want)
			}
			// Cut points: inside committed data, right at and after a commit
			// marker, inside an aborted transaction, at its abort marker.
			for _, cut := range []int64{5, 10, 11, 15, 21, 22, 27, 31} {
				got := append(readRange(t, src, topic, 0, cut), readRange(t, src, topic, cut, end)...)
				if !slices.Equal(got, want) {
					t.Fatalf("cut at %d: got %v, want %v", cut, got, want)
				}
			}
		})
	}
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

// produceTransactions writes four transactions and returns the values a
// read-committed reader must see, in order.
func produceTransactions(t *testing.T, brokers []string, topic string) []string {
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
	defer p.Close()
	var want []string
	for _, txn := range []struct {
		prefix string
		n      int
		commit bool
	}{{"c", 10, true}, {"a", 10, false}, {"d", 5, true}, {"x", 3, false}} {
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for i := range txn.n {
			v := fmt.Sprintf("%s%d", txn.prefix, i)
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(v)}); err != nil {
				t.Fatal(err)
			}
			if txn.commit {
				want = append(want, v)
			}
		}
		if txn.commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return want
}
