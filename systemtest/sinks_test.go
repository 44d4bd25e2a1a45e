package systemtest

// What the sinks hold: stored offsets and totals read from MariaDB,
// SQLite and Redis, per-key checks against a replay of the input, and
// the counts `microbatch verify` prints.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// storedNext is where the job will resume: mb_offsets for the exactly-once
// strategies, the consumer group for the controls.
func storedNext(t *testing.T, strategy, sink, brokers, job, topic string) map[int32]int64 {
	switch strategies.Strategy(strategy) {
	case strategies.StrategyIdempotent:
		r, err := redissink.Open(t.Context(), sink)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		next, err := redisJobOf(t, r, job).Offsets(t.Context(), topic)
		if err != nil {
			t.Fatal(err)
		}
		return next
	case strategies.StrategyTxn, strategies.StrategySingle:
		w := sinktest.OpenSQL(t, sink)
		return sinktest.StoredOffsets(t, w.DB(), job, topic)
	}
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("crash-test-group"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	next, err := offsets.NewKafkaGroup(client, job, topic).Load(t.Context(), []int32{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// checkCrashPerKey compares every key's totals with a replay of the first
// produced events of the sequence.
func checkCrashPerKey(t *testing.T, w *sqlsink.Writer, job string, produced int64) {
	t.Helper()
	want := map[string]event.Total{}
	g := event.NewGenerator(crashSeed, crashKeys)
	for range produced {
		_, k, a := g.Next()
		tt := want[k]
		tt.Events++
		tt.Amount += a
		want[k] = tt
	}
	rows, err := w.DB().Query(`SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	bad := 0
	for rows.Next() {
		var got event.Total
		if err := rows.Scan(&got.Key, &got.Events, &got.Amount); err != nil {
			t.Fatal(err)
		}
		wt := want[got.Key]
		delete(want, got.Key)
		if got.Events != wt.Events || got.Amount != wt.Amount {
			if bad++; bad <= 10 {
				t.Errorf("key %q: sink events=%d amount=%d, want %d and %d", got.Key, got.Events, got.Amount, wt.Events, wt.Amount)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if bad++; bad <= 10 {
			t.Errorf("key %q: missing in the sink", k)
		}
	}
	if bad > 10 {
		t.Errorf("%d keys differ in all", bad)
	}
}

// groupSink reads a job's stored offsets and per-key totals from a SQL or
// Redis sink.
type groupSink struct {
	dsn   string
	sql   *sqlsink.Writer
	redis *redissink.Sink
}

func openGroupSink(t *testing.T, strategy, dsn string) *groupSink {
	t.Helper()
	gs := &groupSink{dsn: dsn}
	if strategies.Strategy(strategy) != strategies.StrategyIdempotent {
		gs.sql = sinktest.OpenSQL(t, dsn)
		return gs
	}
	r, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	gs.redis = r
	return gs
}

// next is where the job resumes on each partition.
func (gs *groupSink) next(t *testing.T, job, topic string) map[int32]int64 {
	t.Helper()
	if gs.sql != nil {
		return sinktest.StoredOffsets(t, gs.sql.DB(), job, topic)
	}
	next, err := redisJobOf(t, gs.redis, job).Offsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// checkPerKey compares every key's totals with a replay of the first
// produced events of the crash sequence.
func (gs *groupSink) checkPerKey(t *testing.T, job string, produced int64) {
	t.Helper()
	if gs.sql != nil {
		checkCrashPerKey(t, gs.sql, job, produced)
		return
	}
	ctx := t.Context()
	evs, err := gs.redis.Client().HGetAll(ctx, redissink.EventsKey(job)).Result()
	if err != nil {
		t.Fatal(err)
	}
	ams, err := gs.redis.Client().HGetAll(ctx, redissink.AmountKey(job)).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]event.Total{}
	g := event.NewGenerator(crashSeed, crashKeys)
	for range produced {
		_, k, a := g.Next()
		tt := want[k]
		tt.Events++
		tt.Amount += a
		want[k] = tt
	}
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for k := range evs {
		if _, ok := ams[k]; !ok {
			ams[k] = "0"
		}
	}
	for k, am := range ams {
		ev, _ := strconv.ParseInt(evs[k], 10, 64)
		a, _ := strconv.ParseInt(am, 10, 64)
		wt := want[k]
		delete(want, k)
		if ev != wt.Events || a != wt.Amount {
			report("key %q: sink events=%d amount=%d, want %d and %d", k, ev, a, wt.Events, wt.Amount)
		}
	}
	for k := range want {
		report("key %q: missing in the sink", k)
	}
	if bad > 10 {
		t.Errorf("%d keys differ in all", bad)
	}
}

// waitDrained waits until the sink's offsets reach the end of every
// partition (the feeder has stopped), while procs keep running.
func waitDrained(t *testing.T, gs *groupSink, brokers, topic, job string, procs ...*groupProc) {
	t.Helper()
	end := testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic)
	// A bound for a busy machine, where the drain of the scale-out test's
	// input takes tens of seconds.
	waitEvery(t, 100*time.Millisecond, 5*time.Minute, "the sink to reach the end of every partition", func() bool {
		for _, p := range procs {
			p.requireRunning(t)
		}
		return fmt.Sprint(gs.next(t, job, topic)) == fmt.Sprint(end)
	})
}

// checkGroupSink checks the job's totals (ReadTotals, then `microbatch
// verify`), every key's totals and the stored offsets against the input.
func checkGroupSink(t *testing.T, gs *groupSink, brokers, topic, job, strategy, dir string, produced, expAmount int64) strategies.SinkTotals {
	t.Helper()
	got, _, err := strategies.ReadTotals(context.Background(), gs.dsn, job)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != produced || !got.AmountIs(expAmount) || got.DeadLetters != 0 {
		t.Errorf("sink totals %+v, want events=%d amount=%d and no dead letters (duplicates %d, losses %d)",
			got, produced, expAmount, max(got.Events-produced, 0), max(produced-got.Events, 0))
	}
	gs.checkPerKey(t, job, produced)
	end, stored := testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic), gs.next(t, job, topic)
	if len(end) != groupPartitions || fmt.Sprint(end) != fmt.Sprint(stored) {
		t.Errorf("stored offsets %v, partition ends %v", stored, end)
	}
	if sum(end) != produced {
		t.Errorf("the topic holds %d records, the feeder reports %d events", sum(end), produced)
	}
	v := Run(t, dir, nil, time.Minute, "verify", "--sink", gs.dsn, "--job", job, "--strategy", strategy,
		"--expect-events", strconv.FormatInt(produced, 10), "--expect-amount", strconv.FormatInt(expAmount, 10))
	if v.Code != 0 || !strings.Contains(v.Stdout, "OK: exactly once") {
		t.Errorf("microbatch verify: %s", v)
	}
	return got
}

var (
	duplicatesRE = regexp.MustCompile(`duplicates\s+(\d+)\n`)
	lossesRE     = regexp.MustCompile(`losses\s+(\d+)\n`)
)

func count(t *testing.T, re *regexp.Regexp, out string) int64 {
	t.Helper()
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s in verify output:\n%s", re, out)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// redisJobOf binds s to job.
func redisJobOf(t testing.TB, s *redissink.Sink, job string) *redissink.Job {
	t.Helper()
	j, err := s.Job(job)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
