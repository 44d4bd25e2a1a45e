package batch_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/record"
)

// TestKafkaSourceFetchRetries: the partition's fetch fails with errors a
// new connection to the (maybe new) leader may not meet — the leader moved,
// the partition is not there yet — and then succeeds. Read must fetch
// again and deliver the range whole, not fail the batch; and an error no
// retry cures (the offset is out of range) must come back as a ReadError
// at once.
func TestKafkaSourceFetchRetries(t *testing.T) {
	const topic = "retry"
	records := func() *sarama.FetchResponse {
		r := &sarama.FetchResponse{Version: 11}
		for i, v := range []string{"a", "b", "c"} {
			r.AddRecordBatch(topic, 0, nil, sarama.StringEncoder(v), int64(i), 0, false)
		}
		return r
	}
	failed := func(err sarama.KError) *sarama.FetchResponse {
		r := &sarama.FetchResponse{Version: 11}
		r.AddError(topic, 0, err)
		return r
	}
	for _, tc := range []struct {
		name    string
		fetches []any
		want    []string
		wantErr sarama.KError
	}{
		{"leader moved", []any{failed(sarama.ErrNotLeaderForPartition), failed(sarama.ErrLeaderNotAvailable), records()}, []string{"a", "b", "c"}, 0},
		{"out of range", []any{failed(sarama.ErrOffsetOutOfRange), records()}, nil, sarama.ErrOffsetOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sarama.NewMockBroker(t, 1)
			defer b.Close()
			b.SetHandlerByMap(map[string]sarama.MockResponse{
				"MetadataRequest": sarama.NewMockMetadataResponse(t).SetBroker(b.Addr(), b.BrokerID()).
					SetLeader(topic, 0, b.BrokerID()),
				"FetchRequest": sarama.NewMockSequence(tc.fetches...),
			})
			conf := kafkautil.Config("retry-test")
			conf.ApiVersionsRequest = false // the mock answers the versions the request asks
			client, err := sarama.NewClient([]string{b.Addr()}, conf)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			src, err := batch.NewKafkaSource(client, topic)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			var got []string
			err = src.Read(context.Background(), record.Range{Topic: topic, Partition: 0, From: 0, To: 3}, func(r *batch.Record) error {
				got = append(got, string(r.Value))
				return nil
			})
			if tc.wantErr != 0 {
				if err == nil || !batch.IsRetryable(err) || !errors.Is(err, tc.wantErr) {
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
