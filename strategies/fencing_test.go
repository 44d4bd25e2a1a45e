package strategies_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
)

// TestFencing checks invariant 3 end to end with two instances of one job
// that the consumer group can't keep apart: they run in different groups
// (the same --job with another --group), so each is assigned every
// partition and claims it in the sink with a newer epoch than the other.
// The sink must refuse every commit of the instance that was claimed over
// (offsets.ErrFenced), so nothing is counted twice; the instance fenced
// maxFencedSessions sessions in a row stops with an error naming the cause;
// and a final run ends with every event exactly once.
func TestFencing(t *testing.T) {
	t.Parallel()
	for _, sink := range []sinkTarget{sqliteSink, mariaDB, postgresSink} {
		t.Run("kfakeTo"+sink.name, func(t *testing.T) {
			t.Parallel()
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

	done := make(chan fenceOutcome, 2)
	start := func(name, group string, maxBatch int64, progress chan<- int64) context.CancelFunc {
		return startFencingInstance(t, baseConfig(t, brokers, topic, job, dsn), name, group, maxBatch, progress, done)
	}

	// A: slow batches. B starts once A has committed twice.
	committed := make(chan int64, 1000)
	cancelA := start("A", job+"-a", 500, committed)
	defer cancelA()
	for range 2 {
		select {
		case <-committed:
		case <-time.After(time.Minute):
			t.Fatal("instance A committed no two batches within a minute")
		}
	}
	cancelB := start("B", job+"-b", 2000, nil)
	defer cancelB()
	// Input keeps coming while they fight: an instance fenced with nothing
	// left to commit would just idle (no harm done, and no stop either).
	feed := kafkautil.StartFeeder(kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: 500, Keys: testKeys, Seed: 5, Rate: 5000}, exp)
	defer feed.Finish()

	var first, second fenceOutcome
	select {
	case first = <-done:
	case <-time.After(4 * time.Minute):
		// Each fenced session is a rebalance and a claim: a few seconds
		// on a quiet machine, tens of seconds each on a busy one.
		t.Fatal("neither instance stopped within 4 min although they keep claiming the same partitions: a zombie keeps running")
	}
	if !errors.Is(first.err, offsets.ErrFenced) || !strings.Contains(first.err.Error(), "--group") {
		t.Fatalf("instance %s returned %v, want offsets.ErrFenced naming --group", first.name, first.err)
	}
	if first.res.Fenced < 3 {
		t.Errorf("instance %s reports %d fenced commits, want at least 3 (one per fenced session)", first.name, first.res.Fenced)
	}
	total, err := feed.Finish()
	if err != nil {
		t.Fatal(err)
	}
	cancelA()
	cancelB()
	second = <-done
	if second.err != nil && !errors.Is(second.err, offsets.ErrFenced) {
		t.Fatalf("instance %s returned %v", second.name, second.err)
	}
	t.Logf("%s stopped fenced (%v) after committing %d records, %d fenced commits; %s committed %d records, %d fenced",
		first.name, first.err, first.res.Records, first.res.Fenced, second.name, second.res.Records, second.res.Fenced)

	checkFencingDrain(t, baseConfig(t, brokers, topic, job, dsn), first, second, total)
}

// fenceOutcome is how one instance of testFencing ended.
type fenceOutcome struct {
	name string
	res  strategies.Result
	err  error
}

// startFencingInstance runs cfg in group until cancelled, reporting each
// committed batch to progress (if not nil) and its end to done.
func startFencingInstance(t *testing.T, cfg strategies.Config, name, group string, maxBatch int64, progress chan<- int64, done chan<- fenceOutcome) context.CancelFunc {
	cfg.Group.ID = group
	cfg.UntilIdle = 0
	cfg.MaxBatchRecords = maxBatch
	if progress != nil {
		cfg.OnProgress = func(p batch.Progress) {
			select {
			case progress <- p.BatchID:
			default:
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		res, err := strategies.Run(ctx, cfg)
		done <- fenceOutcome{name, res, err}
	}()
	return cancel
}

// checkFencingDrain runs a third instance, cfg in the job's own group, to
// drain what is left and checks that the three together committed every
// event exactly once.
func checkFencingDrain(t *testing.T, cfg strategies.Config, first, second fenceOutcome, total event.Expected) {
	brokers, topic, job, dsn := cfg.Brokers, cfg.Topic, cfg.Job, cfg.Sink
	// A third instance in the job's own group drains what is left.
	resC := runJob(t, cfg)
	if resC.Epoch <= max(first.res.Epoch, second.res.Epoch) {
		t.Errorf("C has epoch %d, not newer than %d and %d", resC.Epoch, first.res.Epoch, second.res.Epoch)
	}
	if n := first.res.Records + second.res.Records + resC.Records; n != total.Events {
		// Counting a fenced, rolled-back task would over-report.
		t.Errorf("the instances report %d + %d + %d records committed, want %d together",
			first.res.Records, second.res.Records, resC.Records, total.Events)
	}

	w := sinktest.OpenSQL(t, dsn)
	got := readSinkTotals(t, w, job)
	if got.Events != total.Events || !got.AmountIs(total.Amount) {
		t.Errorf("sink totals %+v, want events=%d amount=%d", got, total.Events, total.Amount)
	}
	checkPerKey(t, readPerKey(t, w, job), expectedPerKey(5, 0, total.Events))
	checkOffsets(t, w, brokers, job, topic)
}
