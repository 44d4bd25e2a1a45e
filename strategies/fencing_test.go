package strategies_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
)

// TestFencing checks invariant 3 end to end: while instance A is still
// working through a job, instance B claims it; A's next commit must be
// refused with offsets.ErrFenced, and B ends with every event exactly once.
func TestFencing(t *testing.T) {
	for _, sink := range []sinkTarget{sqliteSink, mariaDB} {
		t.Run("kfakeTo"+sink.name, func(t *testing.T) {
			dsn := sink.dsn(t)
			testFencing(t, kfake.brokers(t), dsn)
		})
	}
}

func testFencing(t *testing.T, brokers []string, dsn string) {
	const events = 50_000
	topic := newTopic(t, brokers)
	job := uniqueName(t, "fence")
	exp := produce(t, brokers, topic, 5, 0, events)

	// A: slow batches, never idle-stops.
	cfgA := baseConfig(t, brokers, topic, job, dsn)
	cfgA.UntilIdle = 0
	cfgA.MaxBatchRecords = 500
	committed := make(chan int64, 1000)
	cfgA.OnProgress = func(p batch.Progress) { committed <- p.BatchID }
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	type outcome struct {
		res strategies.Result
		err error
	}
	doneA := make(chan outcome, 1)
	go func() {
		res, err := strategies.Run(ctxA, cfgA)
		doneA <- outcome{res, err}
	}()
	for range 2 {
		select {
		case <-committed:
		case o := <-doneA:
			t.Fatalf("instance A ended before its second batch: %v", o.err)
		case <-time.After(time.Minute):
			t.Fatal("instance A committed no two batches within a minute")
		}
	}

	// B claims the job and drains it.
	resB := runJob(t, baseConfig(t, brokers, topic, job, dsn))

	var a outcome
	select {
	case a = <-doneA:
	case <-time.After(30 * time.Second):
		cancelA()
		a = <-doneA
		t.Fatalf("instance A was not stopped within 30s of B draining the job (returned %v after cancel): a zombie keeps running", a.err)
	}
	if !errors.Is(a.err, offsets.ErrFenced) {
		t.Errorf("instance A returned %v, want offsets.ErrFenced", a.err)
	}
	if resB.Epoch <= a.res.Epoch {
		t.Errorf("B has epoch %d, not newer than A's %d", resB.Epoch, a.res.Epoch)
	}
	t.Logf("A (epoch %d) committed %d records before it was fenced; B (epoch %d) %d", a.res.Epoch, a.res.Records, resB.Epoch, resB.Records)
	if a.res.Records+resB.Records != events {
		// Counting a task that rolled back would over-report.
		t.Errorf("A and B report %d + %d records committed, want %d together (sink is exact: A's Result counts records of its failed, rolled-back batch)",
			a.res.Records, resB.Records, events)
	}

	w := sinktest.OpenSQL(t, dsn)
	got := readSinkTotals(t, w, job)
	if got.Events != exp.Events || got.Amount != exp.Amount {
		t.Errorf("sink totals %+v, want events=%d amount=%d", got, exp.Events, exp.Amount)
	}
	checkPerKey(t, readPerKey(t, w, job), expectedPerKey(5, 0, events))
	checkOffsets(t, w, brokers, job, topic)
}
