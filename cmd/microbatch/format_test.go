package main_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestCLIProduceFormat: produce --format writes records of that format
// which the event decoder accepts, and whose events sum to the totals
// produce prints (what verify expects) whatever the format.
func TestCLIProduceFormat(t *testing.T) {
	b := systemtest.StartBroker(t)
	const (
		count = 3000
		keys  = 40
		seed  = 11
	)
	want := event.ExpectedTotals(seed, keys, count)
	line := "expected events=" + strconv.FormatInt(want.Events, 10) + " amount=" + strconv.FormatInt(want.Amount, 10)
	for _, f := range event.Formats {
		t.Run(string(f), func(t *testing.T) {
			topic := systemtest.UniqueName(t, "fmt")
			r := systemtest.Run(t, t.TempDir(), nil, time.Minute, "produce", "--brokers", b.Addr, "--topic", topic, "--partitions", "2",
				"--count", strconv.Itoa(count), "--keys", strconv.Itoa(keys), "--seed", strconv.Itoa(seed), "--format", string(f))
			if r.Code != 0 || !strings.Contains(r.Stdout, line) {
				t.Fatalf("produce --format %s: want exit 0 and %q\n%s", f, line, r)
			}
			var got event.Expected
			var size int
			for _, v := range readTopic(t, b.Addr, topic, count) {
				var ev event.Event
				if err := event.Decode(v, &ev); err != nil {
					t.Fatalf("record %s: %v", v, err)
				}
				// The record is the event in the asked format, byte for byte.
				if w := event.AppendFormat(nil, f, seed, ev.ID, string(ev.Key), ev.Amount, ev.TS); !bytes.Equal(v, w) {
					t.Fatalf("record\n%s\nis not event %d in format %s:\n%s", v, ev.ID, f, w)
				}
				got.Events++
				got.Amount += ev.Amount
				size += len(v)
			}
			if got != want {
				t.Errorf("the topic's events sum to %+v, want %+v", got, want)
			}
			t.Logf("%s: %d records, %d bytes on average", f, count, size/count)
		})
	}
}

// TestCLIProduceBadFormat: an unknown --format is a configuration error
// (exit 2, one line naming it), refused before connecting.
func TestCLIProduceBadFormat(t *testing.T) {
	systemtest.Binary(t)
	r := systemtest.Run(t, t.TempDir(), nil, time.Minute, "produce", "--brokers", unreachable, "--format", "jsonl")
	checkConfigError(t, r, `"jsonl"`, "format")
}

// readTopic reads n records from every partition of topic, in order.
func readTopic(t *testing.T, addr, topic string, n int) [][]byte {
	t.Helper()
	brokers := []string{addr}
	ends, err := kafkautil.EndOffsets(brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sarama.NewConsumer(brokers, kafkautil.Config("microbatch-format-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out [][]byte
	for p, end := range ends {
		if end == 0 {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(time.Minute)
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				out = append(out, m.Value)
				done = m.Offset >= end-1
			case e := <-pc.Errors():
				t.Fatalf("reading %s/%d: %v", topic, p, e.Err)
			case <-timeout:
				t.Fatalf("reading %s/%d: not at its end offset %d after a minute", topic, p, end)
			}
		}
		pc.Close()
	}
	if len(out) != n {
		t.Fatalf("topic %s holds %d records, want %d", topic, len(out), n)
	}
	return out
}
