package batch

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/record"
)

const mockTopic = "mock"

// mockSource is a KafkaSource on sarama mock brokers, bootstrapped from
// the first.
func mockSource(t *testing.T, brokers ...*sarama.MockBroker) (*KafkaSource, sarama.Client) {
	t.Helper()
	conf := kafkautil.Config("mock-test")
	conf.ApiVersionsRequest = false // the mock answers the versions the request asks
	return testSource(t, []string{brokers[0].Addr()}, conf)
}

// testSource is a source over mockTopic with a client of its own on
// addrs; both are closed when the test ends.
func testSource(t *testing.T, addrs []string, conf *sarama.Config) (*KafkaSource, sarama.Client) {
	t.Helper()
	client, err := sarama.NewClient(addrs, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	src, err := NewKafkaSource(client, mockTopic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src, client
}

func records(first int64, values ...string) *sarama.FetchResponse {
	r := &sarama.FetchResponse{Version: 11}
	for i, v := range values {
		r.AddRecordBatch(mockTopic, 0, nil, sarama.StringEncoder(v), first+int64(i), 0, false)
	}
	blk := r.GetBlock(mockTopic, 0)
	blk.HighWaterMarkOffset, blk.LastStableOffset = first+int64(len(values)), first+int64(len(values))
	return r
}

func read(t *testing.T, ctx context.Context, src *KafkaSource, from, to int64) ([]string, error) {
	t.Helper()
	var got []string
	err := src.Read(ctx, record.Range{Topic: mockTopic, Partition: 0, From: from, To: to}, func(r *Record) error {
		got = append(got, string(r.Value))
		return nil
	})
	return got, err
}

// TestKafkaSourcePastEmptiedBatch: a fetch whose only batch has no records
// left (the log cleaner keeps a producer's last batch, emptied) brings
// nothing sarama shows; the source must still learn where it ended and go
// on from there, not fetch the same offset forever.
func TestKafkaSourcePastEmptiedBatch(t *testing.T) {
	b := sarama.NewMockBroker(t, 1)
	defer b.Close()
	emptied := records(0, "gone")
	blk := emptied.GetBlock(mockTopic, 0)
	blk.RecordsSet[0].RecordBatch.Records = nil
	blk.RecordsSet[0].RecordBatch.LastOffsetDelta = 2 // offsets 0-2, all cleaned away
	blk.HighWaterMarkOffset, blk.LastStableOffset = 5, 5
	meta := sarama.NewMockMetadataResponse(t).SetBroker(b.Addr(), b.BrokerID()).SetLeader(mockTopic, 0, b.BrokerID())
	b.SetHandlerByMap(map[string]sarama.MockResponse{
		"MetadataRequest": meta,
		"FetchRequest":    sarama.NewMockSequence(emptied, records(3, "d", "e")),
	})
	src, _ := mockSource(t, b)
	conn, err := src.connect(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got, _, err := fetchOnce(t.Context(), conn, mockTopic, 0, 0, defaultFetchBytes)
	if err != nil {
		t.Fatal(err)
	}
	if it := (batchIter{in: got.RecordBatches}); !it.next() || it.b.NumRecords != 0 || it.next() {
		t.Fatalf("the response is not one emptied batch (%+v, %v): the test builds the wrong response", it.b, it.err)
	}
	if st, err := advance(got, step{next: 0, size: defaultFetchBytes}, false); err != nil || st.next != 3 || st.wait {
		t.Fatalf("after a fetch of an emptied batch of offsets 0-2: next step %+v, %v; want a fetch at 3", st, err)
	}
}

// TestKafkaSourceFollowsTheLeader: a connection kept from an earlier Read
// is dropped when the partition's leader has moved to another broker — a
// follower would answer fetches too (fetch v11), from behind the leader.
func TestKafkaSourceFollowsTheLeader(t *testing.T) {
	b1, b2 := sarama.NewMockBroker(t, 1), sarama.NewMockBroker(t, 2)
	defer b1.Close()
	defer b2.Close()
	meta := sarama.NewMockMetadataResponse(t).SetBroker(b1.Addr(), b1.BrokerID()).SetBroker(b2.Addr(), b2.BrokerID()).
		SetLeader(mockTopic, 0, b1.BrokerID())
	b1.SetHandlerByMap(map[string]sarama.MockResponse{"MetadataRequest": meta, "FetchRequest": sarama.NewMockWrapper(records(0, "from b1"))})
	b2.SetHandlerByMap(map[string]sarama.MockResponse{"MetadataRequest": meta, "FetchRequest": sarama.NewMockWrapper(records(0, "from b2"))})
	src, client := mockSource(t, b1, b2)
	if got, err := read(t, t.Context(), src, 0, 1); err != nil || !slices.Equal(got, []string{"from b1"}) {
		t.Fatalf("first Read = %v, %v; want the leader b1's record", got, err)
	}
	meta.SetLeader(mockTopic, 0, b2.BrokerID())
	if err := client.RefreshMetadata(mockTopic); err != nil {
		t.Fatal(err)
	}
	if got, err := read(t, t.Context(), src, 0, 1); err != nil || !slices.Equal(got, []string{"from b2"}) {
		t.Fatalf("Read after the leader moved to b2 = %v, %v; want b2's record", got, err)
	}
}

// TestKafkaSourceCancelEndsFetch: a Read whose fetch the broker does not
// answer returns when its context ends, not when the network gives up.
func TestKafkaSourceCancelEndsFetch(t *testing.T) {
	const answerAfter = 5 * time.Second
	b := sarama.NewMockBroker(t, 1)
	defer b.Close()
	meta := sarama.NewMockMetadataResponse(t).SetBroker(b.Addr(), b.BrokerID()).SetLeader(mockTopic, 0, b.BrokerID())
	b.SetHandlerByMap(map[string]sarama.MockResponse{"MetadataRequest": meta, "FetchRequest": sarama.NewMockWrapper(records(0, "late"))})
	src, _ := mockSource(t, b)
	b.SetLatency(answerAfter)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := read(t, ctx, src, 0, 1)
	if took := time.Since(began); took >= answerAfter/2 {
		t.Fatalf("Read returned after %s (%v), with the broker answering after %s: the cancel did not end the fetch", took, err, answerAfter)
	}
	if err == nil {
		t.Fatal("Read of a broker that did not answer returned no error")
	}
}

// TestKafkaSourceFetchRetries: the partition's fetch fails with errors a
// new connection to the (maybe new) leader may not meet — the leader moved,
// the partition is not there yet — and then succeeds. Read must fetch
// again and deliver the range whole, not fail the batch; and an error no
// retry cures (the offset is out of range) must come back as a ReadError
// at once.
func TestKafkaSourceFetchRetries(t *testing.T) {
	failed := func(err sarama.KError) *sarama.FetchResponse {
		r := &sarama.FetchResponse{Version: 11}
		r.AddError(mockTopic, 0, err)
		return r
	}
	for _, tc := range []struct {
		name    string
		fetches []any
		want    []string
		wantErr sarama.KError
	}{
		{"leader moved", []any{failed(sarama.ErrNotLeaderForPartition), failed(sarama.ErrLeaderNotAvailable), records(0, "a", "b", "c")}, []string{"a", "b", "c"}, 0},
		{"out of range", []any{failed(sarama.ErrOffsetOutOfRange), records(0, "a", "b", "c")}, nil, sarama.ErrOffsetOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sarama.NewMockBroker(t, 1)
			defer b.Close()
			meta := sarama.NewMockMetadataResponse(t).SetBroker(b.Addr(), b.BrokerID()).SetLeader(mockTopic, 0, b.BrokerID())
			b.SetHandlerByMap(map[string]sarama.MockResponse{"MetadataRequest": meta, "FetchRequest": sarama.NewMockSequence(tc.fetches...)})
			src, _ := mockSource(t, b)
			got, err := read(t, t.Context(), src, 0, 3)
			if tc.wantErr != 0 {
				if err == nil || !IsRetryable(err) || !errors.Is(err, tc.wantErr) {
					t.Fatalf("Read = %v, want a ReadError of %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read = %v, want the range after the retries", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
