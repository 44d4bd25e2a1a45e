package benchmarks

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
)

// TestNoGuaranteeFoldExact: the no-guarantee pipeline reads every record
// of the topic once, whatever the format, and its per-key totals are the
// produced ones — a record skipped or folded twice leaves a key off.
// Small fetches make each partition take many of them, so a fetch handed
// on twice or dropped at a boundary shows.
func TestNoGuaranteeFoldExact(t *testing.T) {
	const events = 5000
	eachFormatOnKfake(t, events, func(t *testing.T, brokers []string, topic string, w Workload) {
		s := DefaultNoGuaranteeSettings
		s.FetchBytes = 64 << 10
		r, err := noGuaranteeConsume(context.Background(), brokers, topic, s)
		if err != nil {
			t.Fatal(err)
		}
		if r.Records != events || r.Rejected != 0 {
			t.Errorf("read %d records (%d rejected), want %d (0)", r.Records, r.Rejected, events)
		}
		if err := foldExact(r.Totals, expectedPerKey(w)); err != nil {
			t.Error(err)
		}
		if r.Duration <= 0 || r.EventsPerSec() <= 0 {
			t.Errorf("duration %v, rate %v", r.Duration, r.EventsPerSec())
		}
	})
}

// TestNoGuaranteeStopsAtEnd: records produced after the end offsets were
// taken are not folded (the pipeline reads what the strategies read).
func TestNoGuaranteeStopsAtEnd(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	w := Workload{Events: 2000, Keys: 10, Partitions: 2, Seed: 9, Format: event.FormatCompact}
	topic := workloadTopic(w)
	if _, err := ensureWorkload(context.Background(), w, brokers, topic); err != nil {
		t.Fatal(err)
	}
	ends, err := kafkautil.EndOffsets(brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	// 700 more after the end offsets were taken, in the same fetches.
	if _, err := kafkautil.Produce(context.Background(), kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: 700, Skip: w.Events,
		Keys: w.Keys, Seed: w.Seed, Format: w.Format}); err != nil {
		t.Fatal(err)
	}
	r, err := noGuaranteeRead(context.Background(), brokers, topic, ends, DefaultNoGuaranteeSettings)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != w.Events {
		t.Errorf("read %d records, want the %d below the end offsets", r.Records, w.Events)
	}
	if err := foldExact(r.Totals, expectedPerKey(w)); err != nil {
		t.Error(err)
	}
}

// TestFoldExactCatches: the comparison itself fails on one record skipped,
// one record counted twice, a wrong amount, and a key that should not be.
func TestFoldExactCatches(t *testing.T) {
	w := Workload{Events: 1000, Keys: 7, Seed: 3}
	want := expectedPerKey(w)
	if err := foldExact(want, expectedPerKey(w)); err != nil {
		t.Fatalf("equal totals: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(map[string]event.Expected)
	}{
		{"a record skipped", func(m map[string]event.Expected) { e := m["k3"]; e.Events--; e.Amount -= 5; m["k3"] = e }},
		{"a record twice", func(m map[string]event.Expected) { e := m["k0"]; e.Events++; e.Amount += 17; m["k0"] = e }},
		{"an amount off", func(m map[string]event.Expected) { e := m["k6"]; e.Amount++; m["k6"] = e }},
		{"a key missing", func(m map[string]event.Expected) { delete(m, "k1") }},
		{"a key too many", func(m map[string]event.Expected) { m["k99"] = event.Expected{Events: 1, Amount: 1} }},
	} {
		got := expectedPerKey(w)
		c.change(got)
		if err := foldExact(got, want); err == nil || !strings.Contains(err.Error(), "not exact") {
			t.Errorf("%s: foldExact = %v, want an error", c.name, err)
		}
	}
}
