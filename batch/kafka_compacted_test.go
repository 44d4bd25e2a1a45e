package batch

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/microbatch/microbatch/internal/kafkautil"
)

// A log as the broker keeps it after compaction, served by kfake to the
// fetches of a KafkaSource: the partition's record batches, hand-built,
// read the way the broker reads a log segment — from the batch holding
// the fetch offset, the first batch whole whatever its size, then as many
// bytes as the fetch asked for, cutting the last batch.
type compactedLog struct {
	batches  [][]byte
	lso, hwm int64

	mu      sync.Mutex
	fetches []fetchAt // every fetch the source sent
}

type fetchAt struct {
	offset int64
	size   int32
}

// batchBytes encodes a record batch of values at offsets first…, or an
// emptied one (no records, lastOffsetDelta still covering the removed
// records) when values is empty: the 61-byte header the log cleaner keeps
// of an idempotent producer's last batch.
func batchBytes(first int64, lastDelta int32, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // the rest after a 1-byte varint 0
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{FirstOffset: first, Magic: 2, LastOffsetDelta: lastDelta, FirstTimestamp: 1, MaxTimestamp: 1,
		ProducerID: 7, FirstSequence: 0, NumRecords: int32(len(values)), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

func (l *compactedLog) read(offset int64, size int32) []byte {
	out := []byte{} // no batches is empty bytes, not null
	for _, b := range l.batches {
		first := int64(binary.BigEndian.Uint64(b))
		last := first + int64(binary.BigEndian.Uint32(b[23:]))
		if last < offset || first >= l.lso { // read committed: up to the last stable offset
			continue
		}
		if len(out) == 0 || len(out)+len(b) <= int(size) {
			out = append(out, b...)
			continue
		}
		out = append(out, b[:int(size)-len(out)]...)
		break
	}
	return out
}

// serve makes c answer every fetch of mockTopic from l, and cancels the
// test's reads (stop) when the source sends the same fetch twice in a row:
// below the last stable offset that is a loop without progress.
func (l *compactedLog) serve(c *kfake.Cluster, stop context.CancelFunc) {
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				l.mu.Lock()
				at := fetchAt{rp.FetchOffset, rp.PartitionMaxBytes}
				if n := len(l.fetches); n > 0 && l.fetches[n-1] == at {
					stop()
				}
				l.fetches = append(l.fetches, at)
				l.mu.Unlock()
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.HighWatermark, sp.LastStableOffset = rp.Partition, l.hwm, l.lso
				sp.RecordBatches = l.read(rp.FetchOffset, rp.PartitionMaxBytes)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// TestKafkaSourceReadsCompactedLog: after compaction a fetch can bring
// nothing the reader can use yet — an emptied batch header (which sarama
// drops) followed by a batch cut by the fetch size (which sarama keeps as
// PartialTrailingRecord without setting blk.Partial), or nothing at all
// below the last stable offset when the cleaner removed an aborted
// transaction and its marker before a transaction still open. The source
// must move on (past the emptied batch, to the last stable offset) or
// grow the fetch, deliver every record, and never send the same fetch
// twice in a row; it used to send the same fetch forever.
func TestKafkaSourceReadsCompactedLog(t *testing.T) {
	var big []string // 30 records of 100 bytes: a batch of ~3.5 KiB
	for i := range 30 {
		big = append(big, fmt.Sprintf("%-100d", i+3))
	}
	emptied := batchBytes(0, 2) // offsets 0-2, every record removed
	if len(emptied) != 61 {
		t.Fatalf("an emptied batch encodes to %d bytes, want the 61-byte header", len(emptied))
	}
	for _, tc := range []struct {
		name       string
		batches    [][]byte
		lso, hwm   int64
		fetchBytes int32
		from, to   int64
		want       []string
	}{
		{
			name:    "emptied batch, then a batch larger than the fetch",
			batches: [][]byte{emptied, batchBytes(3, 29, big...)}, lso: 33, hwm: 33,
			fetchBytes: 1024, from: 0, to: 33, want: big,
		},
		{
			name:    "emptied batch, then a batch cut inside its header",
			batches: [][]byte{emptied, batchBytes(3, 29, big...)}, lso: 33, hwm: 33,
			fetchBytes: 61 + 30, from: 0, to: 33, want: big,
		},
		{
			name:    "emptied batch, then a batch larger than the fetch, read from inside the emptied batch",
			batches: [][]byte{emptied, batchBytes(3, 29, big...)}, lso: 33, hwm: 33,
			fetchBytes: 1024, from: 1, to: 20, want: big[:17],
		},
		{
			// An aborted transaction and its marker, offsets 0-4, cleaned
			// away; a transaction still open at 5-6.
			name:    "nothing left below the last stable offset",
			batches: [][]byte{batchBytes(5, 1, "open", "open")}, lso: 5, hwm: 7,
			fetchBytes: 1024, from: 0, to: 5, want: nil,
		},
		{
			name:    "nothing left below the last stable offset, read from inside",
			batches: [][]byte{batchBytes(5, 1, "open", "open")}, lso: 5, hwm: 7,
			fetchBytes: 1024, from: 3, to: 5, want: nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, mockTopic))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			log := &compactedLog{batches: tc.batches, lso: tc.lso, hwm: tc.hwm}
			log.serve(c, cancel)

			client, err := sarama.NewClient(c.ListenAddrs(), kafkautil.Config("compacted-test"))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			src, err := NewKafkaSource(client, mockTopic)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			src.FetchBytes = tc.fetchBytes

			got, err := read(t, ctx, src, tc.from, tc.to)
			log.mu.Lock()
			fetches := slices.Clone(log.fetches)
			log.mu.Unlock()
			for i := 1; i < len(fetches); i++ {
				if fetches[i] == fetches[i-1] {
					t.Fatalf("the source sent the same fetch twice in a row (offset %d, %d bytes), below the last stable offset %d: a loop without progress (fetches %v)",
						fetches[i].offset, fetches[i].size, tc.lso, fetches)
				}
			}
			if err != nil {
				t.Fatalf("Read [%d, %d) = %v (fetches %v)", tc.from, tc.to, err, fetches)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Read [%d, %d) delivered %d records %q…, want %d", tc.from, tc.to, len(got), got[:min(len(got), 3)], len(tc.want))
			}
			t.Logf("fetches: %v", fetches)
		})
	}
}
