package strategies_test

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies"
)

// cutAt is where in a batch the proxy cuts the sink's connection: on the
// depth-th message the job sends to the sink after the batch started
// (point ""), or after the batch first reaches crash point point.
type cutAt struct {
	point string
	depth int
}

func (c cutAt) String() string {
	if c.point == "" {
		return fmt.Sprintf("message %d of the batch", c.depth)
	}
	return fmt.Sprintf("message %d after %s", c.depth, c.point)
}

// TestRetriesLostConnections cuts the connection between the job and its
// sink once in every batch: transactions (txn and single on MariaDB and on
// PostgreSQL) and
// contribution writes and folds (idempotent on Redis) lose their
// connection before a statement reaches the server, or after it ran with
// its reply lost. The run must retry (the progress reports show it did),
// never stop, and end exactly once.
//
// The cuts land by construction, not by timing: each batch arms the proxy
// once, for a message at a place of the batch (its start, or a crash
// point the batch passes, so the cut lands on the statement that follows:
// the dead letters, the offsets, the COMMIT, the fold), in turn, and
// alternately before forwarding and after. A cut fires once, on whichever
// connection carries that message, and the batch is disarmed when it has
// committed; so every batch is cut, and its retry goes through however
// slow the machine is.
func TestRetriesLostConnections(t *testing.T) {
	t.Parallel()
	sqlCuts := []cutAt{
		{"", 1}, {"", 3}, {strategies.CrashMidWrite, 1},
		{strategies.CrashAfterWriteBeforeOffsets, 1}, {strategies.CrashAfterOffsetsBeforeWrite, 1},
	}
	for _, c := range []struct {
		strategy strategies.Strategy
		sink     sinkTarget
		cuts     []cutAt
	}{
		{strategies.StrategyTxn, mariaDB, sqlCuts},
		{strategies.StrategySingle, mariaDB, sqlCuts},
		{strategies.StrategyIdempotent, redisSink, []cutAt{
			{"", 1}, {strategies.CrashMidWrite, 1}, {strategies.CrashAfterWriteBeforeOffsets, 1},
		}},
		{strategies.StrategyTxn, postgresSink, sqlCuts},
		{strategies.StrategySingle, postgresSink, sqlCuts},
	} {
		name := string(c.strategy)
		if c.sink.name == postgresSink.name {
			name += "/" + c.sink.name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRetriesLostConnections(t, c.strategy, c.sink.dsn(t), c.cuts)
		})
	}
}

func testRetriesLostConnections(t *testing.T, strategy strategies.Strategy, upstream string, cuts []cutAt) {
	brokers := kfake.brokers(t)
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testutil.StartCutProxy(t, u.Host)
	u.Host = proxy.Addr()
	dsn := u.String()

	topic := newTopic(t, brokers)
	job := uniqueName(t, "job")
	// 13 batches of at most 2,000 records a partition: every place and
	// mode of cutAt is cut at least once.
	const events = 100_000
	exp := produce(t, brokers, topic, integrationSeed, 0, events)

	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategy
	cfg.MaxBatchRecords = 2_000
	cfg.Interval = 20 * time.Millisecond
	var (
		started, retries atomic.Int64
		// This batch's cut: where and how; armed once it is.
		cut   cutAt
		mode  testutil.CutMode
		armed atomic.Bool
		// Cuts that fired, by mode, and batches that were not cut.
		fired        = map[testutil.CutMode]int{}
		cutPlaces    = map[string]int{}
		uncut        []int64
		firedBatches int64
	)
	cfg.OnBatchStart = func(b batch.Info, _ []record.Range) {
		n := int(started.Add(1)) - 1
		cut, mode = cuts[n%len(cuts)], testutil.CutMode(n/len(cuts)%2)
		armed.Store(false)
		if cut.point == "" {
			armed.Store(true)
			proxy.Arm(cut.depth, mode)
		}
	}
	// Called from the batch's tasks, concurrently, and again by retries:
	// the first call of the batch arms.
	cfg.CrashPoint = func(point string) {
		if point == cut.point && armed.CompareAndSwap(false, true) {
			proxy.Arm(cut.depth, mode)
		}
	}
	cfg.OnProgress = func(p batch.Progress) {
		retries.Add(int64(p.Retries))
		if proxy.Disarm() || !armed.Load() {
			uncut = append(uncut, p.BatchID)
			return
		}
		firedBatches++
		fired[mode]++
		cutPlaces[cut.String()+", "+mode.String()]++
	}
	res := runJob(t, cfg)
	proxy.Disarm()

	var places []string
	for _, k := range slices.Sorted(maps.Keys(cutPlaces)) {
		places = append(places, fmt.Sprintf("%s: %d", k, cutPlaces[k]))
	}
	t.Logf("%d batches: %d cut (%d before forwarding, %d after), %d retries; cuts:\n%s",
		res.Batches, firedBatches, fired[testutil.CutBeforeForward], fired[testutil.CutAfterForward], retries.Load(), strings.Join(places, "\n"))
	if len(uncut) != 0 {
		t.Errorf("batches %v were not cut: their armed cut never found its message", uncut)
	}
	if firedBatches != proxy.Fired.Load() {
		t.Errorf("%d cuts fired in %d batches: a cut landed outside a batch", proxy.Fired.Load(), firedBatches)
	}
	// A statement that never reached the server failed its attempt, which
	// was retried. (A lost reply may not need one: a COMMIT that landed is
	// settled as done.)
	if firedBatches == 0 || retries.Load() < int64(fired[testutil.CutBeforeForward]) {
		t.Fatalf("%d retries after %d cuts before forwarding: the cuts did not land inside a write", retries.Load(), fired[testutil.CutBeforeForward])
	}
	checkSinkAfterCuts(t, strategy, upstream, brokers, job, topic, exp, events)
}

// checkSinkAfterCuts checks that the sink holds every event exactly once.
func checkSinkAfterCuts(t *testing.T, strategy strategies.Strategy, upstream string, brokers []string, job, topic string, exp event.Expected, events int64) {
	got, _, err := strategies.ReadTotals(context.Background(), upstream, job)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != exp.Events || !got.AmountIs(exp.Amount) {
		t.Fatalf("sink holds events=%d amount=%d, want %d %d", got.Events, got.Amount, exp.Events, exp.Amount)
	}
	if strategy != strategies.StrategyIdempotent {
		w := sinktest.OpenSQL(t, upstream)
		checkPerKey(t, readPerKey(t, w, job), expectedPerKey(integrationSeed, 0, events))
		checkOffsets(t, w, brokers, job, topic)
	}
}
