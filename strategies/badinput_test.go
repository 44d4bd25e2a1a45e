package strategies_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// badRecord is a record the built-in job must dead-letter.
type badRecord struct {
	name   string
	value  []byte
	reason string // a word the reason must contain (case-insensitive)
}

func badRecords() []badRecord {
	// A valid event padded past the decoder's size limit: rejected for its
	// size alone. The padding varies so that a mangled payload shows.
	rng := rand.New(rand.NewPCG(1, 2))
	huge := []byte(`{"id":1,"key":"k1","amount":5,"ts":1,"pad":"`)
	for len(huge) < 1_000_000-2 {
		huge = append(huge, byte('a'+rng.IntN(26)))
	}
	huge = append(huge, `"}`...)
	return []badRecord{
		{"not JSON", []byte("hello, world"), "json"},
		{"binary garbage", []byte("\xff\xfe\x00\x01garbage\x00\x80"), "json"},
		{"truncated JSON", []byte(`{"id":1,"key":"k1","amount":`), "json"},
		{"JSON array", []byte(`[1,2,3]`), "json"},
		{"JSON null", []byte(`null`), "missing"},
		{"trailing data", []byte(`{"id":1,"key":"k1","amount":5,"ts":1} {"id":2}`), "trailing"},
		{"wrong type id", []byte(`{"id":"x","key":"k1","amount":5,"ts":1}`), "number"},
		{"numbers as strings", []byte(`{"id":"7","key":"k1","amount":"5","ts":"1"}`), "type"},
		{"fractional amount", []byte(`{"id":1,"key":"k1","amount":1.5,"ts":1}`), "amount"},
		{"amount overflows int64", []byte(`{"id":1,"key":"k1","amount":9223372036854775808,"ts":1}`), "amount"},
		{"key not a string", []byte(`{"id":1,"key":7,"amount":5,"ts":1}`), "key"},
		{"missing key field", []byte(`{"id":1,"amount":5,"ts":1}`), "key"},
		{"empty key", []byte(`{"id":1,"key":"","amount":5,"ts":1}`), "key"},
		{"key of 256 bytes", []byte(`{"id":1,"key":"` + strings.Repeat("x", 256) + `","amount":5,"ts":1}`), "key"},
		{"empty value", []byte{}, "empty"},
		{"null value", nil, "empty"},
		{"1,000,000-byte value", huge, "limit"},
	}
}

// edgeGoodRecords are valid events off the generator's canonical form.
func edgeGoodRecords() []struct {
	key    string
	amount int64
	value  []byte
} {
	canon := func(key string, amount int64) []byte { return event.Append(nil, 1, key, amount, 1) }
	return []struct {
		key    string
		amount int64
		value  []byte
	}{
		{"k1", 11, []byte(` { "ts": 1 , "amount": 11, "key": "k1", "id": 9 } `)},
		{"ключ-ü", 12, canon("ключ-ü", 12)},
		{`quote"back\slash`, 13, canon(`quote"back\slash`, 13)},
		{strings.Repeat("y", 255), 14, canon(strings.Repeat("y", 255), 14)},
		{"neg", -15, canon("neg", -15)},
		// Keys differing only by trailing spaces are different keys.
		{"pad", 16, canon("pad", 16)},
		{"pad ", 17, canon("pad ", 17)},
		{"Pad", 18, canon("Pad", 18)},
	}
}

// TestBadInput checks invariant 6: every record that is not a valid event
// lands in mb_dead_letters with its partition, offset, a reason and its
// exact payload, in the same run as the good records, whose totals are
// exact.
func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kafka kafkaTarget
		sink  sinkTarget
	}{
		{kfake, sqliteSink},
		{apacheKafka, mariaDB},
	} {
		t.Run(c.kafka.name+"To"+c.sink.name, func(t *testing.T) {
			t.Parallel()
			dsn := c.sink.dsn(t)
			testBadInput(t, c.kafka.brokers(t), dsn)
		})
	}
}

type partOff struct {
	part int32
	off  int64
}

func testBadInput(t *testing.T, brokers []string, dsn string) {
	topic := newTopic(t, brokers)
	job := uniqueName(t, "bad")
	bad := badRecords()
	in := badInputMessages(t, topic, bad)
	var wantEvents, wantAmount int64
	for _, tt := range in.want {
		wantEvents += tt.Events
		wantAmount += tt.Amount
	}
	wantDL := produceBadInput(t, brokers, in)

	res := runJob(t, baseConfig(t, brokers, topic, job, dsn))
	if res.DeadLetters != int64(len(bad)) || res.Records != wantEvents {
		t.Errorf("run reported %d records and %d dead letters, want %d and %d", res.Records, res.DeadLetters, wantEvents, len(bad))
	}

	w := sinktest.OpenSQL(t, dsn)
	checkBadInputDeadLetters(t, w, job, topic, wantDL)
	got := readSinkTotals(t, w, job)
	if got.Events != wantEvents || !got.AmountIs(wantAmount) || got.DeadLetters != int64(len(bad)) {
		t.Errorf("sink totals %+v, want events=%d amount=%d dead letters=%d", got, wantEvents, wantAmount, len(bad))
	}
	checkPerKey(t, readPerKey(t, w, job), in.want)
	checkOffsets(t, w, brokers, job, topic)
	if t.Failed() {
		t.Logf("topic %s, job %s, sink %s", topic, job, w)
	}
}

// badInput is the topic's content: generated events with the bad records
// and the edge cases interleaved.
type badInput struct {
	msgs  []*sarama.ProducerMessage
	badOf map[*sarama.ProducerMessage]badRecord
	want  keyTotals // of the good records
}

func badInputMessages(t *testing.T, topic string, bad []badRecord) badInput {
	const goodEvents = 3000
	edge := edgeGoodRecords()
	in := badInput{badOf: map[*sarama.ProducerMessage]badRecord{}, want: keyTotals{}}
	gen := event.NewGenerator(7, testKeys)
	every := goodEvents / (len(bad) + len(edge) + 1)
	for i := range goodEvents {
		id, key, amount := gen.Next()
		in.msgs = append(in.msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(event.Append(nil, id, key, amount, time.Now().UnixMilli()))})
		in.want.add(key, amount)
		if i%every != every-1 {
			continue
		}
		switch n := i / every; {
		case n < len(bad):
			m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("bad-" + bad[n].name)}
			if bad[n].value != nil {
				m.Value = sarama.ByteEncoder(bad[n].value)
			}
			in.msgs = append(in.msgs, m)
			in.badOf[m] = bad[n]
		case n-len(bad) < len(edge):
			e := edge[n-len(bad)]
			in.msgs = append(in.msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(e.key), Value: sarama.ByteEncoder(e.value)})
			in.want.add(e.key, e.amount)
		}
	}
	if len(in.badOf) != len(bad) {
		t.Fatalf("test set-up: placed %d of %d bad records", len(in.badOf), len(bad))
	}
	return in
}

// produceBadInput writes in's messages and returns where each bad record
// landed.
func produceBadInput(t *testing.T, brokers []string, in badInput) map[partOff]badRecord {
	cfg := kafkautil.Config("microbatch-test-bad-producer")
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	// Under kfake's 1 MiB batch limit, over the 1 MB record.
	cfg.Producer.MaxMessageBytes = 1_040_000
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = p.SendMessages(in.msgs)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("producing: %v", err)
	}
	wantDL := map[partOff]badRecord{}
	for m, b := range in.badOf {
		wantDL[partOff{m.Partition, m.Offset}] = b
	}
	return wantDL
}

// checkBadInputDeadLetters checks that mb_dead_letters holds exactly the
// bad records, each with its topic, a reason and its exact payload.
func checkBadInputDeadLetters(t *testing.T, w *sqlsink.Writer, job, topic string, wantDL map[partOff]badRecord) {
	rows, err := w.DB().Query(`SELECT topic, part, off, reason, payload FROM mb_dead_letters WHERE job = ?`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[partOff]bool{}
	for rows.Next() {
		var (
			dlTopic, reason string
			po              partOff
			payload         []byte
		)
		if err := rows.Scan(&dlTopic, &po.part, &po.off, &reason, &payload); err != nil {
			t.Fatal(err)
		}
		seen[po] = true
		b, ok := wantDL[po]
		if !ok {
			t.Errorf("dead letter %s/%d@%d is not a bad record: reason %q, payload %.80q", dlTopic, po.part, po.off, reason, payload)
			continue
		}
		if dlTopic != topic {
			t.Errorf("%s: dead letter has topic %q, want %q", b.name, dlTopic, topic)
		}
		if reason == "" || !strings.Contains(strings.ToLower(reason), b.reason) {
			t.Errorf("%s: reason %q, want a non-empty reason mentioning %q", b.name, reason, b.reason)
		}
		if !bytes.Equal(payload, b.value) {
			t.Errorf("%s: stored payload (%d bytes, %.40q…) differs from the record (%d bytes, %.40q…)",
				b.name, len(payload), payload, len(b.value), b.value)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for po, b := range wantDL {
		if !seen[po] {
			t.Errorf("%s at %s/%d@%d (%.60q) is not in mb_dead_letters", b.name, topic, po.part, po.off, b.value)
		}
	}
}
