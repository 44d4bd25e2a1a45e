package batch_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/record"
)

// TestKafkaSourceReadsCompressedBatches reads topics a producer wrote
// compressed with each codec Kafka has (gzip, snappy, lz4, zstd), and
// checks every record's key, value, offset and timestamp — records with
// headers too, which the reader skips. The test first checks, with a
// fetch of its own, that the log really holds batches of that codec.
func TestKafkaSourceReadsCompressedBatches(t *testing.T) {
	const n = 500
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		attr  int16
	}{
		{"gzip", kgo.GzipCompression(), 1},
		{"snappy", kgo.SnappyCompression(), 2},
		{"lz4", kgo.Lz4Compression(), 3},
		{"zstd", kgo.ZstdCompression(), 4},
	}
	stamp := time.UnixMilli(1_700_000_000_000)
	for name, brokers := range sourceBrokers(t) {
		for _, c := range codecs {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				topic := fmt.Sprintf("codec-%s-%d", c.name, time.Now().UnixNano())
				if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
					t.Fatal(err)
				}
				prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
					kgo.ProducerBatchCompression(c.codec), kgo.ProducerLinger(50*time.Millisecond),
					kgo.MaxVersions(kversion.V3_0_0())) // fetch v12 at most: firstBatchCodec names its topic
				if err != nil {
					t.Fatal(err)
				}
				defer prod.Close()
				recs := make([]*kgo.Record, n)
				for i := range recs {
					recs[i] = &kgo.Record{
						Key:       fmt.Appendf(nil, "key-%d", i%7),
						Value:     fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, i, strings.Repeat("abc", i%50)),
						Timestamp: stamp.Add(time.Duration(i) * time.Millisecond),
						Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte("v")}},
					}
				}
				if err := prod.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if got := firstBatchCodec(t, prod, topic); got != c.attr {
					t.Fatalf("the log's first batch has codec %d, want %d (%s): the test reads no %s batch", got, c.attr, c.name, c.name)
				}

				client, err := sarama.NewClient(brokers, kafkautil.Config("codec-test"))
				if err != nil {
					t.Fatal(err)
				}
				defer client.Close()
				src := newSource(t, client, topic)
				i := 0
				kept := make([][]byte, 0, n) // values not copied: see the lifetime note in kafka_records.go
				err = src.Read(t.Context(), record.Range{Topic: topic, Partition: 0, From: 0, To: n}, func(r *batch.Record) error {
					want := recs[i]
					if r.Offset != int64(i) || string(r.Key) != string(want.Key) || string(r.Value) != string(want.Value) || !r.Timestamp.Equal(want.Timestamp) {
						return fmt.Errorf("record %d: offset %d key %q value %q at %v; want key %q value %q at %v",
							i, r.Offset, r.Key, r.Value, r.Timestamp, want.Key, want.Value, want.Timestamp)
					}
					kept = append(kept, r.Value)
					i++
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if i != n {
					t.Fatalf("read %d records, want %d", i, n)
				}
				for i, v := range kept {
					if string(v) != string(recs[i].Value) {
						t.Fatalf("record %d's value, kept past its callback, is now %q: a buffer was reused", i, v)
					}
				}
			})
		}
	}
}

// firstBatchCodec fetches the start of partition 0 of topic and returns
// the codec bits of its first record batch.
func firstBatchCodec(t *testing.T, cl *kgo.Client, topic string) int16 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MaxBytes = 100, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch response has no partition: %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	raw := p.RecordBatches
	if len(raw) < 61 || len(raw) < 12+int(binary.BigEndian.Uint32(raw[8:])) {
		t.Fatalf("fetch of %s brought no whole record batch (%d bytes, error %d)", topic, len(raw), p.ErrorCode)
	}
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw[:12+int(binary.BigEndian.Uint32(raw[8:]))]); err != nil {
		t.Fatal(err)
	}
	return b.Attributes & 0x07
}

// TestKafkaSourceAllocatesPerFetch: reading a range allocates per fetch
// and per batch, not per record — the records of a response are decoded
// into one reused Record, their keys and values left in the response's
// bytes. sarama's decoder allocated per batch, but a sarama.Record (~110
// bytes) of each record, more than the small records here take on the
// wire. It counts the process's allocations across one Read, so it runs
// alone (not in parallel).
func TestKafkaSourceAllocatesPerFetch(t *testing.T) {
	const n = 20000
	for name, brokers := range sourceBrokers(t) {
		t.Run(name, func(t *testing.T) {
			topic := fmt.Sprintf("allocs-%d", time.Now().UnixNano())
			if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
				t.Fatal(err)
			}
			prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
				kgo.ProducerLinger(50*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))
			if err != nil {
				t.Fatal(err)
			}
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)}
			}
			err = prod.ProduceSync(t.Context(), recs...).FirstErr()
			prod.Close()
			if err != nil {
				t.Fatal(err)
			}
			client, err := sarama.NewClient(brokers, kafkautil.Config("allocs-test"))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			src := newSource(t, client, topic)
			var got int
			fn := func(r *batch.Record) error {
				got++
				return nil
			}
			// A first Read opens the connection; the second is measured.
			if err := src.Read(t.Context(), record.Range{Topic: topic, Partition: 0, From: 0, To: 10}, fn); err != nil {
				t.Fatal(err)
			}
			got = 0
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err = src.Read(t.Context(), record.Range{Topic: topic, Partition: 0, From: 0, To: n}, fn)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if got != n {
				t.Fatalf("read %d records, want %d", got, n)
			}
			allocs, bytes := after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
			t.Logf("%s: %d allocations, %d bytes for %d records", name, allocs, bytes, n)
			// A record here is ~15 bytes on the wire: the response takes
			// that (kfake, in this process, allocates it twice more to
			// serve it), and a sarama.Record of each took ~110 more. The
			// count is the per-record signal (sarama: one allocation a
			// record at least); the bytes also hold whole fetch bodies —
			// the first Read's fetch ahead, discarded by this Read, may
			// land in the window with kfake's copies of it — hence the
			// few MiB of slack.
			if allocs > n/10 || bytes > 80*n+4<<20 {
				t.Fatalf("%d allocations, %d bytes reading %d records: the reader allocates per record", allocs, bytes, n)
			}
		})
	}
}
