package batch_test

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/microbatch/microbatch/record"
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
				t.Parallel()
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
				src := newSource(t, client, topic)
				if end := waitLSO(t, src, tc.end); end != tc.end {
					t.Fatalf("last stable offset %d, want %d", end, tc.end)
				}
				if got := readRange(t, src, topic, 0, tc.end); !slices.Equal(got, want) {
					t.Fatalf("whole range: got %v, want %v", got, want)
				}
				for _, cut := range tc.cuts {
					// A fresh source per cut, so that the first range is
					// read on a new connection and the second reuses it.
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

// TestKafkaSourceLongAbortedTail reads a partition whose committed records
// are followed by one aborted transaction of about 6 MiB — several times
// what one fetch brings — with nothing after it yet. A range ending in
// aborted records has no last record to end on: it must end once its
// fetches got past them (issue #14: it waited forever), and so must ranges
// cut inside the aborted span. Then a committed transaction follows, and
// the source that read the first range must get past the aborted data to
// it.
func TestKafkaSourceLongAbortedTail(t *testing.T) {
	const (
		aborted     = 6000 // records of the aborted transaction
		recordBytes = 1024
	)
	for name, brokers := range sourceBrokers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topic := fmt.Sprintf("aborted-tail-%d", time.Now().UnixNano())
			if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
				t.Fatal(err)
			}
			p := newTxnProducer(t, brokers, topic)
			before := p.transaction(t, "c", 10, true) // offsets 0-9, marker 10
			p.bulkTransaction(t, "a", aborted, recordBytes, false)
			abortEnd := int64(10 + 1 + aborted + 1) // past the abort marker

			client, err := sarama.NewClient(brokers, kafkautil.Config("source-test"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			src := newSource(t, client, topic)
			if end := waitLSO(t, src, abortEnd); end != abortEnd {
				t.Fatalf("last stable offset %d, want %d", end, abortEnd)
			}
			began := time.Now()
			if got := readRange(t, src, topic, 0, abortEnd); !slices.Equal(got, before) {
				t.Fatalf("[0,%d): got %d records %v, want %v", abortEnd, len(got), head(got), before)
			}
			t.Logf("%s: a range ending in %d aborted records of %d bytes settled in %s", name, aborted, recordBytes, time.Since(began).Round(time.Millisecond))
			// A stop does not cut short a tail that the fetches are
			// getting through: it is not a wait for records.
			stopped := batch.WithStop(context.Background(), closedStop())
			if got := readRangeIn(t, stopped, newSource(t, client, topic), topic, 0, abortEnd); !slices.Equal(got, before) {
				t.Fatalf("[0,%d) after a stop: got %d records %v, want %v", abortEnd, len(got), head(got), before)
			}
			for _, cut := range []int64{5, 11, 12, 3000, abortEnd - 2, abortEnd - 1} {
				src := newSource(t, client, topic)
				got := append(readRange(t, src, topic, 0, cut), readRange(t, src, topic, cut, abortEnd)...)
				src.Close()
				if !slices.Equal(got, before) {
					t.Fatalf("cut at %d: got %v, want %v", cut, head(got), before)
				}
			}

			after := p.transaction(t, "d", 5, true)
			end := abortEnd + 5 + 1
			if got := waitLSO(t, src, end); got != end {
				t.Fatalf("last stable offset %d, want %d", got, end)
			}
			if got := readRange(t, src, topic, abortEnd, end); !slices.Equal(got, after) {
				t.Fatalf("[%d,%d) after the aborted span: got %v, want %v", abortEnd, end, head(got), after)
			}
			fresh := newSource(t, client, topic)
			if got, want := readRange(t, fresh, topic, 0, end), append(slices.Clone(before), after...); !slices.Equal(got, want) {
				t.Fatalf("[0,%d): got %v, want %v", end, head(got), want)
			}
		})
	}
}

// TestKafkaSourceStopEndsWait reads a range that reaches past the end of
// the log, so its last records never come: Read waits. The stop its
// context carries must end the wait with ErrStopped (which no caller
// retries), after the records that were there. A range whose records are
// all there is read whole even after a stop.
func TestKafkaSourceStopEndsWait(t *testing.T) {
	for name, brokers := range sourceBrokers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			topic := fmt.Sprintf("stop-wait-%d", time.Now().UnixNano())
			if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
				t.Fatal(err)
			}
			want := newTxnProducer(t, brokers, topic).transaction(t, "c", 3, true) // 0-2, marker 3
			client, err := sarama.NewClient(brokers, kafkautil.Config("source-test"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			// Records that are there, and a tail that settles, are read
			// after a stop too.
			stopped := batch.WithStop(context.Background(), closedStop())
			if got := readRangeIn(t, stopped, newSource(t, client, topic), topic, 0, 4); !slices.Equal(got, want) {
				t.Fatalf("[0,4) after a stop: got %v, want %v", got, want)
			}

			src := newSource(t, client, topic)
			stop := make(chan struct{})
			ctx, cancel := context.WithTimeout(batch.WithStop(context.Background(), stop), readRangeTimeout)
			defer cancel()
			var got []string
			allThere := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- src.Read(ctx, record.Range{Topic: topic, Partition: 0, From: 0, To: 10}, func(r *batch.Record) error {
					if got = append(got, string(r.Value)); len(got) == len(want) {
						close(allThere)
					}
					return nil
				})
			}()
			select {
			case <-allThere:
			case err := <-done:
				t.Fatalf("Read returned %v before the stop, with %v", err, got)
			}
			// Read can't end now but by the stop: it is waiting for offsets
			// 4-9. Give it several fetch waits to show it does wait.
			select {
			case err := <-done:
				t.Fatalf("Read of offsets that never come returned %v without a stop", err)
			case <-time.After(3 * time.Second):
			}
			close(stop)
			err = <-done
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Read still waiting %s after the stop", readRangeTimeout)
			}
			if !errors.Is(err, batch.ErrStopped) {
				t.Fatalf("Read after the stop = %v, want ErrStopped", err)
			}
			if batch.IsRetryable(err) {
				t.Errorf("IsRetryable(%v) = true: a stop must not be retried", err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("delivered %v, want %v", got, want)
			}
		})
	}
}

// waitLSO returns partition 0's last stable offset once it is want, or
// what it is after 30 s. A transaction's commit returns before the broker
// has written its markers everywhere, so the offset may lag a moment.
func waitLSO(t *testing.T, src *batch.KafkaSource, want int64) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := src.Bounds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if b[0].End == want || time.Now().After(deadline) {
			return b[0].End
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closedStop is a stop that has fired.
func closedStop() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// head is the start of a list of records, for failure messages.
func head(recs []string) []string { return recs[:min(len(recs), 20)] }

func newSource(t *testing.T, client sarama.Client, topic string) *batch.KafkaSource {
	t.Helper()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// readRangeTimeout bounds a Read in these tests: far more than a range
// takes on a loaded machine, far less than forever.
const readRangeTimeout = 60 * time.Second

func readRange(t *testing.T, src *batch.KafkaSource, topic string, from, to int64) []string {
	t.Helper()
	return readRangeIn(t, context.Background(), src, topic, from, to)
}

// readRangeIn is readRange on a context of the caller's (one carrying a
// stop, say).
func readRangeIn(t *testing.T, ctx context.Context, src *batch.KafkaSource, topic string, from, to int64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, readRangeTimeout)
	defer cancel()
	var got []string
	err := src.Read(ctx, record.Range{Topic: topic, Partition: 0, From: from, To: to}, func(r *batch.Record) error {
		if r.Offset < from || r.Offset >= to {
			t.Errorf("record at offset %d outside [%d,%d)", r.Offset, from, to)
		}
		got = append(got, string(r.Value))
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reading [%d,%d): no end after %s (%d records delivered): the range's tail never settled", from, to, readRangeTimeout, len(got))
	}
	if err != nil {
		t.Fatalf("reading [%d,%d): %v", from, to, err)
	}
	return got
}

// txnProducer writes transactions into one topic (of one partition).
type txnProducer struct{ *testutil.TxnProducer }

func newTxnProducer(t *testing.T, brokers []string, topic string) txnProducer {
	return txnProducer{testutil.NewTxnProducer(t, brokers, topic)}
}

// transaction writes n records prefix0… in one transaction, commits or
// aborts it, and returns what a read-committed reader must see of it.
func (tp txnProducer) transaction(t *testing.T, prefix string, n int, commit bool) []string {
	t.Helper()
	msgs := make([]*sarama.ProducerMessage, n)
	var visible []string
	for i := range msgs {
		v := fmt.Sprintf("%s%d", prefix, i)
		msgs[i] = &sarama.ProducerMessage{Topic: tp.Topic, Value: sarama.StringEncoder(v)}
		if commit {
			visible = append(visible, v)
		}
	}
	tp.Txn(t, msgs, commit)
	return visible
}

// bulkTransaction writes n records of size bytes each (prefix0…, padded)
// in one transaction and commits or aborts it.
func (tp txnProducer) bulkTransaction(t *testing.T, prefix string, n, size int, commit bool) {
	t.Helper()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		v := fmt.Appendf(nil, "%s%d ", prefix, i)
		v = append(v, bytes.Repeat([]byte{'x'}, max(0, size-len(v)))...)
		msgs[i] = &sarama.ProducerMessage{Topic: tp.Topic, Value: sarama.ByteEncoder(v)}
	}
	tp.Txn(t, msgs, commit)
}
