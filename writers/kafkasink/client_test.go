package kafkasink

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
)

// A slot's transactions share one producer id and epoch (the package doc,
// # Slots): a Pending's identity names the slot's current transaction
// only while the slot holds it. Apache Kafka 4 with transaction version 2
// would bump the epoch at every EndTxn of a client that speaks it.
func TestKafkaTxnSlotKeepsIdentity(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		topic := kafkaTxnTopic(t, brokers)
		w := newTestTxn(t, brokers, kafkaTxnName(t, "txn"))
		if err := w.Recover(ctx, nil); err != nil {
			t.Fatal(err)
		}
		first := map[string]kafkaTxnData{}
		for txn := int64(1); txn <= 7; txn++ {
			if err := w.Begin(ctx, txn); err != nil {
				t.Fatal(err)
			}
			kafkaTxnWrite(t, w, topic, fmt.Sprint(txn))
			p, err := w.PreCommit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(ctx, p); err != nil {
				t.Fatal(err)
			}
			d, err := parsePending(p)
			if err != nil {
				t.Fatal(err)
			}
			if f, ok := first[p.ID]; !ok {
				first[p.ID] = d
			} else if f.ProducerID != d.ProducerID || f.Epoch != d.Epoch {
				t.Fatalf("txn %d on %s: producer id %d epoch %d, the slot's first transaction had %d epoch %d",
					txn, p.ID, d.ProducerID, d.Epoch, f.ProducerID, f.Epoch)
			}
		}
	})
}

// A key's records go to the partition sarama's hash partitioner picks, as
// they did when the sink produced through sarama: a job upgraded in place
// keeps each key's output in one partition, in order.
func TestKafkaTxnPartitionsLikeSarama(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		const parts = 4
		topic := kafkaTxnName(t, "topic")
		if err := kafkautil.EnsureTopic(brokers, topic, parts); err != nil {
			t.Fatal(err)
		}
		w := newTestTxn(t, brokers, kafkaTxnName(t, "txn"))
		if err := w.Begin(ctx, 1); err != nil {
			t.Fatal(err)
		}
		const n = 64
		for i := range n {
			k := fmt.Sprintf("key-%d", i)
			if err := w.Write(ctx, topic, []byte(k), []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		p, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, p); err != nil {
			t.Fatal(err)
		}
		hash := sarama.NewHashPartitioner(topic)
		got := kafkaTxnReadPartitions(t, brokers, topic, parts, n)
		if len(got) != n {
			t.Fatalf("read %d records, want %d", len(got), n)
		}
		for k, part := range got {
			want, err := hash.Partition(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k)}, parts)
			if err != nil {
				t.Fatal(err)
			}
			if part != want {
				t.Errorf("key %s went to partition %d, sarama's hash partitioner picks %d", k, part, want)
			}
		}
	})
}

// kafkaTxnReadPartitions reads partitions 0..parts-1 of topic, read
// committed, until it has want records or kafkaTxnReadLimit passed, and
// returns each key's partition.
func kafkaTxnReadPartitions(t testing.TB, brokers []string, topic string, parts int32, want int) map[string]int32 {
	t.Helper()
	c, err := sarama.NewConsumer(brokers, kafkautil.Config("kafkatxn-test-reader"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs, done := make(chan *sarama.ConsumerMessage), make(chan struct{})
	for part := range parts {
		pc, err := c.ConsumePartition(topic, part, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-done:
				}
			}
		}()
	}
	defer close(done) // before the partition consumers close
	got := map[string]int32{}
	limit := time.After(kafkaTxnReadLimit)
	for len(got) < want {
		select {
		case m := <-msgs:
			got[string(m.Key)] = m.Partition
		case <-limit:
			return got
		}
	}
	return got
}

// WriteAt stamps the record with the time given (a reading of the clock a
// while before: to the millisecond), and Write with the time of the call.
func TestKafkaTxnWriteAtStamps(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		topic := kafkaTxnTopic(t, brokers)
		w := newTestTxn(t, brokers, kafkaTxnName(t, "txn"))
		if err := w.Begin(ctx, 1); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-2 * time.Second)
		before := time.Now().Truncate(time.Millisecond)
		if err := w.WriteAt(ctx, topic, nil, []byte("at"), at); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ctx, topic, nil, []byte("now")); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		p, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, p); err != nil {
			t.Fatal(err)
		}
		c, err := sarama.NewConsumer(brokers, kafkautil.Config("kafkatxn-test-reader"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		limit := time.After(kafkaTxnReadLimit)
		for _, want := range []string{"at", "now"} {
			select {
			case m := <-pc.Messages():
				switch {
				case string(m.Value) != want:
					t.Fatalf("read %q, want %q", m.Value, want)
				case want == "at" && !m.Timestamp.Equal(at.Truncate(time.Millisecond)):
					t.Errorf("WriteAt's record has timestamp %v, want %v", m.Timestamp, at.Truncate(time.Millisecond))
				case want == "now" && (m.Timestamp.Before(before) || m.Timestamp.After(after)):
					t.Errorf("Write's record has timestamp %v, want between %v and %v", m.Timestamp, before, after)
				}
			case <-limit:
				t.Fatalf("no record %q within %v", want, kafkaTxnReadLimit)
			}
		}
	})
}
