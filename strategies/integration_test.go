package strategies_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// The drain: 25k events a partition in batches of at most 10k, so three
// batches, as many as with the 200k events in batches of 20k that it was
// before (in the race-instrumented test process, on a busy machine,
// producing 200k events three times at once took over 2 minutes).
const (
	integrationSeed     = 42
	integrationEvents   = 100_000
	integrationMaxBatch = 10_000
	resumeEvents        = 10_000
	latestEvents        = 5_000
)

// TestIntegrationTxn runs the txn strategy against real brokers and sinks:
// a full drain of 100k events, a resumed run over 10k more, and a fresh job
// starting from "latest" that must skip the backlog.
func TestIntegrationTxn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kafka kafkaTarget
		sink  sinkTarget
	}{
		{apacheKafka, mariaDB},
		{kfake, sqliteSink},
		{kfake, mariaDB},
		// ApacheKafka→SQLite adds nothing the three above don't cover.
	} {
		t.Run(c.kafka.name+"To"+c.sink.name, func(t *testing.T) {
			t.Parallel()
			dsn := c.sink.dsn(t)
			brokers := c.kafka.brokers(t)
			testTxnPipeline(t, brokers, dsn)
		})
	}
}

func testTxnPipeline(t *testing.T, brokers []string, dsn string) {
	topic := newTopic(t, brokers)
	job := uniqueName(t, "job")
	w := sinktest.OpenSQL(t, dsn)

	start := time.Now()
	exp := produce(t, brokers, topic, integrationSeed, 0, integrationEvents)
	t.Logf("produced %d events in %s", exp.Events, time.Since(start).Round(time.Millisecond))

	// Drain everything.
	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.MaxBatchRecords = integrationMaxBatch
	res := runJob(t, cfg)
	if res.Records != integrationEvents || res.DeadLetters != 0 {
		t.Errorf("first run processed %d records and %d dead letters, want %d and 0", res.Records, res.DeadLetters, integrationEvents)
	}
	if minBatches := int64(integrationEvents / testPartitions / integrationMaxBatch); res.Batches < minBatches {
		t.Errorf("first run took %d batches, want at least %d with max %d records a partition", res.Batches, minBatches, integrationMaxBatch)
	}
	got := readSinkTotals(t, w, job)
	if got.Events != exp.Events || !got.AmountIs(exp.Amount) || got.DeadLetters != 0 {
		t.Errorf("sink totals after the first run: %+v, want events=%d amount=%d and no dead letters", got, exp.Events, exp.Amount)
	}
	checkPerKey(t, readPerKey(t, w, job), expectedPerKey(integrationSeed, 0, integrationEvents))
	checkOffsets(t, w, brokers, job, topic)
	if t.Failed() {
		return
	}

	// Resume: a second run over the same job only adds the new events.
	more := produce(t, brokers, topic, integrationSeed, integrationEvents, resumeEvents)
	res = runJob(t, baseConfig(t, brokers, topic, job, dsn))
	if res.Records != resumeEvents {
		t.Errorf("resumed run processed %d records, want only the %d new ones", res.Records, resumeEvents)
	}
	got = readSinkTotals(t, w, job)
	if want := (event.Expected{Events: exp.Events + more.Events, Amount: exp.Amount + more.Amount}); got.Events != want.Events || !got.AmountIs(want.Amount) {
		t.Errorf("sink totals after the resumed run: events=%d amount=%d, want %d and %d", got.Events, got.Amount, want.Events, want.Amount)
	}
	checkPerKey(t, readPerKey(t, w, job), expectedPerKey(integrationSeed, 0, integrationEvents+resumeEvents))
	checkOffsets(t, w, brokers, job, topic)

	// Start from latest: a fresh job skips the 110k events already there
	// and takes only what arrives after it claimed its partitions.
	t.Run("StartFromLatest", func(t *testing.T) {
		testStartFromLatest(t, brokers, dsn, topic, integrationEvents+resumeEvents)
	})
}

func testStartFromLatest(t *testing.T, brokers []string, dsn, topic string, present int64) {
	job := uniqueName(t, "latest")
	w := sinktest.OpenSQL(t, dsn)
	before := testutil.EndOffsets(t, brokers, topic)
	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.StartFrom = strategies.StartLatest
	type outcome struct {
		res strategies.Result
		err error
	}
	done := make(chan outcome, 1)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	go func() {
		res, err := strategies.Run(ctx, cfg)
		done <- outcome{res, err}
	}()

	// The job has claimed its start once its offset rows exist; they must
	// hold the ends of the partitions as they were before.
	deadline := time.Now().Add(30 * time.Second)
	for len(sinktest.StoredOffsets(t, w.DB(), job, topic)) < testPartitions {
		select {
		case o := <-done:
			t.Fatalf("run ended before claiming the job: %v", o.err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatal("job did not create its offset rows within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := sinktest.StoredOffsets(t, w.DB(), job, topic); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("start-from latest stored %v, want the partition ends %v", got, before)
	}

	exp := produce(t, brokers, topic, integrationSeed, present, latestEvents)
	o := <-done
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	if o.res.Records != latestEvents {
		t.Errorf("latest run processed %d records, want the %d produced after it started", o.res.Records, latestEvents)
	}
	got := readSinkTotals(t, w, job)
	if got.Events != exp.Events || !got.AmountIs(exp.Amount) || got.DeadLetters != 0 {
		t.Errorf("sink totals of the latest job: %+v, want events=%d amount=%d", got, exp.Events, exp.Amount)
	}
	checkPerKey(t, readPerKey(t, w, job), expectedPerKey(integrationSeed, present, latestEvents))
	checkOffsets(t, w, brokers, job, topic)
}
