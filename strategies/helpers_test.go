package strategies_test

// Helpers shared by the integration tests of package strategies: which
// servers to use, unique names, running a job, and reading back what the
// sink holds.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// Settings of the integration runs.
const (
	testPartitions = 4
	testKeys       = 1000
	untilIdle      = 2 * time.Second
	batchInterval  = 200 * time.Millisecond
	// runTimeout bounds a run, a production, a child: generous, for a busy
	// machine.
	runTimeout = 5 * time.Minute
	// maxBatch is baseConfig's limit of records a partition in a batch.
	maxBatch = 20_000
)

// The integration tests mostly wait (for batches, idleness, servers) and
// share nothing but the servers (each has its own topics, jobs and
// brokers): more of them run side by side than there are CPUs.
const testParallel = 4

func TestMain(m *testing.M) {
	testutil.DefaultParallel(testParallel)
	code := m.Run()
	// Checked after failures too: a failing test must not hide a leak.
	if !testing.Short() {
		if leaked := testutil.LeakedGoroutines(10 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// A kafkaTarget starts or finds a broker; a sinkTarget returns a sink DSN.
type (
	kafkaTarget struct {
		name    string
		brokers func(t testing.TB) []string
	}
	sinkTarget struct {
		name string
		dsn  func(t testing.TB) string
	}
)

var (
	apacheKafka = kafkaTarget{"ApacheKafka", func(t testing.TB) []string {
		return kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka))
	}}
	kfake   = kafkaTarget{"kfake", startKfake}
	mariaDB = sinkTarget{"MariaDB", func(t testing.TB) string { return testutil.NeedServer(t, testutil.EnvMySQL) }}
	// postgresSink is a database of its own on the test server.
	postgresSink = sinkTarget{"PostgreSQL", func(t testing.TB) string {
		return testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	}}
	sqliteSink = sinkTarget{"SQLite", func(t testing.TB) string {
		if testing.Short() {
			t.Skip("integration test: skipped with -short")
		}
		return "sqlite://" + t.TempDir() + "/sink.db"
	}}
)

// startKfake starts an in-process kfake broker, stopped at cleanup.
func startKfake(t testing.TB) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: testPartitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

var nameSeq atomic.Int64

// uniqueName is a topic/job name unique to this test and process run.
func uniqueName(t testing.TB, prefix string) string {
	clean := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), ".")
	if len(clean) > 60 {
		clean = clean[len(clean)-60:]
	}
	return fmt.Sprintf("%s-%s-%d-%d", prefix, clean, time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

// newTopic creates a fresh topic with testPartitions partitions.
func newTopic(t testing.TB, brokers []string) string {
	t.Helper()
	topic := uniqueName(t, "mbt")
	if err := kafkautil.EnsureTopic(brokers, topic, testPartitions); err != nil {
		t.Fatal(err)
	}
	return topic
}

// produce writes count events of seed's sequence after skip, keyed over
// testKeys keys, and returns what Produce says it wrote.
func produce(t testing.TB, brokers []string, topic string, seed uint64, skip, count int64) event.Expected {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	exp, err := kafkautil.Produce(ctx, kafkautil.ProduceOptions{
		Brokers: brokers, Topic: topic, Count: count, Keys: testKeys, Seed: seed, Skip: skip,
	})
	if err != nil {
		t.Fatalf("producing %d events to %s: %v", count, topic, err)
	}
	if exp.Events != count {
		t.Fatalf("Produce reported %d events, asked for %d", exp.Events, count)
	}
	return exp
}

// keyTotals is a per-key expectation or sink content.
type keyTotals map[string]event.Total

func (k keyTotals) add(key string, amount int64) {
	tt := k[key]
	tt.Key = key
	tt.Events++
	tt.Amount += amount
	k[key] = tt
}

// expectedPerKey replays seed's sequence: events skip..skip+count-1.
func expectedPerKey(seed uint64, skip, count int64) keyTotals {
	g := event.NewGenerator(seed, testKeys)
	for range skip {
		g.Next()
	}
	out := keyTotals{}
	for range count {
		_, key, amount := g.Next()
		out.add(key, amount)
	}
	return out
}

// baseConfig is a txn run of job over topic into sink.
func baseConfig(t testing.TB, brokers []string, topic, job, sink string) strategies.Config {
	return strategies.Config{
		Strategy:        strategies.StrategyTxn,
		Brokers:         brokers,
		Topic:           topic,
		Job:             job,
		Sink:            sink,
		Interval:        batchInterval,
		UntilIdle:       untilIdle,
		MaxBatchRecords: maxBatch,
		Logger:          slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// runJob runs cfg to idleness and fails the test on error.
func runJob(t testing.TB, cfg strategies.Config) strategies.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	start := time.Now()
	res, err := strategies.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run(job %s): %v", cfg.Job, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Run(job %s) did not go idle within %s", cfg.Job, runTimeout)
	}
	t.Logf("run of job %s: %d batches, %d records, %d dead letters in %s (epoch %d)",
		cfg.Job, res.Batches, res.Records, res.DeadLetters, time.Since(start).Round(time.Millisecond), res.Epoch)
	return res
}

func readSinkTotals(t testing.TB, w *sqlsink.Writer, job string) strategies.SinkTotals {
	t.Helper()
	got, err := strategies.ReadSinkTotals(context.Background(), w, job)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// readPerKey reads mb_totals of job.
func readPerKey(t testing.TB, w *sqlsink.Writer, job string) keyTotals {
	t.Helper()
	rows, err := w.DB().Query(`SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := keyTotals{}
	for rows.Next() {
		var tt event.Total
		if err := rows.Scan(&tt.Key, &tt.Events, &tt.Amount); err != nil {
			t.Fatal(err)
		}
		out[tt.Key] = tt
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkPerKey reports every key whose totals differ, at most 10 of them.
func checkPerKey(t testing.TB, got, want keyTotals) {
	t.Helper()
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			report("key %q: missing in the sink, want events=%d amount=%d", k, w.Events, w.Amount)
		case g.Events != w.Events || g.Amount != w.Amount:
			report("key %q: sink has events=%d amount=%d, want events=%d amount=%d", k, g.Events, g.Amount, w.Events, w.Amount)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			report("key %q: in the sink (events=%d amount=%d) but never produced", k, g.Events, g.Amount)
		}
	}
	if bad > 10 {
		t.Errorf("... %d keys differ in all", bad)
	}
}

// checkOffsets asserts the job's stored offsets are the partitions' ends.
func checkOffsets(t testing.TB, w *sqlsink.Writer, brokers []string, job, topic string) {
	t.Helper()
	got, want := sinktest.StoredOffsets(t, w.DB(), job, topic), testutil.EndOffsets(t, brokers, topic)
	if len(got) != len(want) {
		t.Errorf("mb_offsets has %d rows for %s, topic has %d partitions", len(got), topic, len(want))
	}
	for p, end := range want {
		if got[p] != end {
			t.Errorf("mb_offsets %s/%d: next_offset %d, partition ends at %d", topic, p, got[p], end)
		}
	}
}
