package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/testutil"
)

// TestRawConsumeFormat: the ceiling reads every record of a topic once,
// whatever the format, and counts their value bytes.
func TestRawConsumeFormat(t *testing.T) {
	const events = 5000
	eachFormatOnKfake(t, events, func(t *testing.T, brokers []string, topic string, w Workload) {
		f := w.Format
		// Small fetches, so a partition takes many of them.
		s := DefaultRawSettings
		s.FetchBytes = 64 << 10
		r, err := consumeAll(context.Background(), brokers, topic, s)
		if err != nil {
			t.Fatal(err)
		}
		if r.Records != events {
			t.Fatalf("read %d records, want %d", r.Records, events)
		}
		// The values' sizes do not depend on ts's digits here: every ts
		// of this run has 13.
		g := event.NewGenerator(w.Seed, w.Keys)
		var want int64
		for range events {
			id, key, amount := g.Next()
			want += int64(len(event.AppendFormat(nil, f, w.Seed, id, key, amount, 1_700_000_000_000)))
		}
		if r.Bytes != want {
			t.Errorf("counted %d value bytes, want %d", r.Bytes, want)
		}
	})
}

// eachFormatOnKfake writes a workload of events in every format to a dev
// broker of its own and runs read on each (a subtest per format); after
// the broker's close no goroutine of the reads may be left.
func eachFormatOnKfake(t *testing.T, events int64, read func(t *testing.T, brokers []string, topic string, w Workload)) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	brokers := c.ListenAddrs()
	for _, f := range event.Formats {
		t.Run(string(f), func(t *testing.T) {
			w := Workload{Events: events, Keys: 30, Partitions: 3, Seed: 5, Format: f}
			topic := workloadTopic(w)
			if _, err := ensureWorkload(context.Background(), w, brokers, topic); err != nil {
				t.Fatal(err)
			}
			read(t, brokers, topic, w)
		})
	}
	c.Close()
	if leaked := testutil.LeakedGoroutines(10 * time.Second); leaked != "" {
		t.Errorf("goroutines left after the reads and the broker's close:\n%s", leaked)
	}
}
