package systemtest

// A compacted input topic whose log cleaner kept an idempotent producer's
// emptied batch in front of a batch larger than one fetch (issue 25): the
// run must read past it and count what the log holds.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
)

const (
	compactedBig        = 1200 // events of the batch behind the emptied one
	compactedEventBytes = 1024 // each: the batch is ~1.2 MiB, more than one 1 MiB fetch
	compactionBound     = 60 * time.Second
)

// TestCompactedInput: on a compacted topic an idempotent producer writes
// one event (offset 0); another producer then writes, in one batch of
// ~1.2 MiB, an event with the same Kafka key and 1199 more (offsets
// 1-1200); one more event rolls the segment. The log cleaner removes the
// first event and keeps its batch as a 61-byte header (the producer's last
// batch), so a fetch of 1 MiB from offset 0 brings that header and the cut
// start of the big batch. The reader used to send that fetch forever; the
// run must finish and count the 1201 events the log holds. The test waits
// (bounded) until the cleaner has run and checks the log has exactly that
// shape, or fails saying it has not: without it the test proves nothing.
func TestCompactedInput(t *testing.T) {
	brokers := testutil.NeedServer(t, testutil.EnvKafka)
	Binary(t)
	topic := UniqueName(t, "compacted")
	createCompactedTopic(t, brokers, topic)

	// Offset 0: the event the cleaner removes, by an idempotent producer.
	conf := kafkautil.Config("compacted-test-idempotent")
	conf.Producer.Idempotent = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Return.Successes = true
	conf.Net.MaxOpenRequests = 1
	produceOne(t, brokers, conf, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("overwritten"),
		Value: sarama.ByteEncoder(event.Append(nil, 0, "removed", 1_000_000, 0))})

	// Offsets 1-1200: one batch, the first record overwriting offset 0.
	conf = kafkautil.Config("compacted-test-big")
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Return.Successes = true
	conf.Producer.MaxMessageBytes = 8 << 20
	conf.Producer.Flush.Messages = compactedBig // all of them in one batch
	conf.Producer.Flush.Frequency = 10 * time.Second
	msgs := make([]*sarama.ProducerMessage, compactedBig)
	for i := range msgs {
		key := fmt.Sprintf("big-%d", i)
		if i == 0 {
			key = "overwritten"
		}
		v := fmt.Appendf(nil, `{"id":%d,"key":"big","amount":1,"ts":0,"pad":"`, 1+i)
		v = append(v, bytes.Repeat([]byte{'x'}, compactedEventBytes-len(v)-2)...)
		v = append(v, `"}`...)
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(v)}
	}
	p, err := sarama.NewSyncProducer(kafkautil.SplitBrokers(brokers), conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	p.Close()

	conn := leaderConn(t, brokers, topic)
	if blk := fetchRaw(t, conn, topic, 1, 16<<20); len(blk.RecordsSet) == 0 || len(blk.RecordsSet[0].RecordBatch.Records) != compactedBig {
		t.Fatalf("the big batch was not written as one batch of %d records: %s", compactedBig, describeFetch(blk))
	}

	// Offset 1201, in a new segment once segment.ms has passed: the
	// segment with offsets 0-1200 is no longer active, so it is cleaned.
	time.Sleep(1500 * time.Millisecond)
	conf = kafkautil.Config("compacted-test-roll")
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Return.Successes = true
	produceOne(t, brokers, conf, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("last"),
		Value: sarama.ByteEncoder(event.Append(nil, 1+compactedBig, "last", 1, 0))})

	// Until the cleaner has run: a 1 MiB fetch from 0 then brings the
	// emptied header (dropped by sarama) and the big batch cut short.
	deadline := time.Now().Add(compactionBound)
	for {
		blk := fetchRaw(t, conn, topic, 0, 1<<20)
		if len(blk.RecordsSet) > 0 {
			rb := blk.RecordsSet[0].RecordBatch
			if rb.FirstOffset == 1 && rb.PartialTrailingRecord {
				t.Logf("compacted: %s", describeFetch(blk))
				break
			}
			if rb.FirstOffset == 1 {
				t.Fatalf("the cleaner removed offset 0's batch whole instead of keeping it as an empty header: the stall can't be reproduced (%s)", describeFetch(blk))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log cleaner did not compact the topic within %s (a 1 MiB fetch from 0 still brings %s): nothing was tested", compactionBound, describeFetch(blk))
		}
		time.Sleep(time.Second)
	}

	dir := t.TempDir()
	sqlSink := "sqlite://" + filepath.Join(dir, "sink.db")
	job := UniqueName(t, "txn")
	r := Run(t, dir, nil, 60*time.Second, "run", "--brokers", brokers, "--topic", topic, "--until-idle", "1s",
		"--strategy", "txn", "--job", job, "--sink", sqlSink, "--interval", "100ms")
	if r.Code != 0 {
		t.Fatalf("run on the compacted topic: %s", r)
	}
	m := regexp.MustCompile(`msg="run finished".* records=(\d+) `).FindStringSubmatch(r.Stderr)
	if m == nil {
		t.Fatalf("no \"run finished\" line with records\n%s", r)
	}
	const want = compactedBig + 1
	if n, _ := strconv.Atoi(m[1]); n != want {
		t.Errorf("the run counted %d records, want %d", n, want)
	}
	var events, amount int64
	if err := sinktest.OpenSQL(t, sqlSink).DB().QueryRow(`SELECT SUM(events), SUM(amount) FROM mb_totals WHERE job = ?`, job).Scan(&events, &amount); err != nil {
		t.Fatal(err)
	}
	if events != want || amount != want {
		t.Errorf("the sink holds events=%d amount=%d, want %d and %d", events, amount, want, want)
	}
}

// createCompactedTopic creates a one-partition topic the log cleaner
// compacts as soon as it can: segments rolled after a second, no dirty
// ratio or lag to wait for, batches up to 8 MiB.
func createCompactedTopic(t *testing.T, brokers, topic string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(kafkautil.SplitBrokers(brokers), kafkautil.Config("compacted-test-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	str := func(s string) *string { return &s }
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: map[string]*string{
		"cleanup.policy":            str("compact"),
		"segment.ms":                str("1000"),
		"min.cleanable.dirty.ratio": str("0"),
		"min.compaction.lag.ms":     str("0"),
		"max.message.bytes":         str(strconv.Itoa(8 << 20)),
	}}, false)
	if err != nil {
		t.Fatalf("creating compacted topic %s: %v", topic, err)
	}
	if err := kafkautil.EnsureTopic(kafkautil.SplitBrokers(brokers), topic, 1); err != nil {
		t.Fatal(err)
	}
}

func produceOne(t *testing.T, brokers string, conf *sarama.Config, m *sarama.ProducerMessage) {
	t.Helper()
	p, err := sarama.NewSyncProducer(kafkautil.SplitBrokers(brokers), conf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(m); err != nil {
		t.Fatal(err)
	}
}

// leaderConn is a connection to the leader of topic's partition 0.
func leaderConn(t *testing.T, brokers, topic string) *sarama.Broker {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("compacted-test-fetch"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	b, err := client.Leader(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fetchRaw fetches topic's partition 0 from offset from, read committed,
// size bytes at most (past the first batch).
func fetchRaw(t *testing.T, b *sarama.Broker, topic string, from int64, size int32) *sarama.FetchResponseBlock {
	t.Helper()
	req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 100, MinBytes: 1, MaxBytes: 64 << 20, Isolation: sarama.ReadCommitted, SessionEpoch: -1}
	req.AddBlock(topic, 0, from, size, -1)
	resp, err := b.Fetch(req)
	if err != nil {
		t.Fatal(err)
	}
	blk := resp.GetBlock(topic, 0)
	if blk == nil || blk.Err != sarama.ErrNoError {
		t.Fatalf("fetching %s/0 from %d: %v", topic, from, blk)
	}
	return blk
}

func describeFetch(blk *sarama.FetchResponseBlock) string {
	s := fmt.Sprintf("%d batches sarama keeps, partial=%v", len(blk.RecordsSet), blk.Partial)
	for i, rs := range blk.RecordsSet {
		if rb := rs.RecordBatch; rb != nil && i < 3 {
			s += fmt.Sprintf("; batch at %d-%d, %d records, cut=%v", rb.FirstOffset, rb.LastOffset(), len(rb.Records), rb.PartialTrailingRecord)
		}
	}
	return s
}
