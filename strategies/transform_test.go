package strategies_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
)

// A user's transform: decode the events as any program would (encoding/json
// into its own type) and count them per key into its own table, one row per
// record, so that the upsert adds up rows with the same key within a
// statement too.
type userEvent struct {
	Key    string `json:"key"`
	Amount int64  `json:"amount"`
}

func userTransform(table string) *strategies.Transform {
	u := writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"n", "total"}, Merge: writers.MergeAdd}
	return strategies.NewTransform(u, userTransformDecode,
		func(evs []userEvent) [][]any {
			rows := make([][]any, len(evs))
			for i, ev := range evs {
				rows[i] = []any{ev.Key, 1, ev.Amount}
			}
			return rows
		})
}

// userTransformDecode is userTransform's decode.
func userTransformDecode(rec *batch.Record) (userEvent, error) {
	if string(rec.Value) == "PANIC" {
		panic("a bug in the user's decoder")
	}
	var ev userEvent
	if err := json.Unmarshal(rec.Value, &ev); err != nil {
		return ev, err
	}
	if ev.Key == "" {
		return ev, errors.New("no key")
	}
	return ev, nil
}

// TestTransform runs a user-defined transform with each strategy: the
// user's table (with idempotent, its Redis hashes) holds exact per-key
// counts, bad records (including one that panics the decoder) are
// dead-lettered, and the offsets are at the log ends.
func TestTransform(t *testing.T) {
	t.Parallel()
	const events = 20_000
	for _, c := range []struct {
		strategy strategies.Strategy
		kafka    kafkaTarget
		sink     sinkTarget
	}{
		{strategies.StrategySingle, kfake, sqliteSink},
		{strategies.StrategyAtLeastOnce, kfake, sqliteSink},
		{strategies.StrategyTxn, apacheKafka, mariaDB},
		{strategies.StrategySingle, apacheKafka, mariaDB},
		{strategies.StrategyTxn, apacheKafka, postgresSink}, // rows of a key repeat in one write: pgRounds
		{strategies.StrategySingle, apacheKafka, postgresSink},
		{strategies.StrategyAtLeastOnce, kfake, postgresSink},
		{strategies.StrategyIdempotent, kfake, redisSink},
		{strategies.StrategyIdempotent, apacheKafka, redisSink},
	} {
		t.Run(string(c.strategy)+"/"+c.kafka.name+"To"+c.sink.name, func(t *testing.T) {
			t.Parallel()
			brokers, dsn := c.kafka.brokers(t), c.sink.dsn(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "tr")
			table := "tr_" + strings.NewReplacer("-", "_", ".", "_").Replace(job)
			table = strings.ToLower(table[:min(len(table), 60)]) // PostgreSQL folds an unquoted name; the sink quotes it
			sink := openTransformSink(t, c.strategy, dsn, brokers, job, topic, table)
			exp := produce(t, brokers, topic, 11, 0, events)
			bad := []string{"not json", "PANIC", `{"amount": 3}`}
			produceRaw(t, brokers, topic, bad)

			cfg := baseConfig(t, brokers, topic, job, dsn)
			cfg.Strategy = c.strategy
			cfg.Transform = userTransform(table)
			cfg.MaxBatchRecords = 1500 // several batches
			res := runJob(t, cfg)
			if res.Records != events || res.DeadLetters != int64(len(bad)) {
				t.Errorf("run: %d records, %d dead letters; want %d and %d", res.Records, res.DeadLetters, events, len(bad))
			}
			checkPerKey(t, sink.perKey(), expectedPerKey(11, 0, events))
			if exp.Events != events {
				t.Fatalf("produced %d", exp.Events)
			}
			reasons := sink.deadReasons()
			joined := strings.Join(reasons, " | ")
			if len(reasons) != len(bad) || !strings.Contains(joined, "panicked") || !strings.Contains(joined, "no key") || !strings.Contains(joined, "invalid character") {
				t.Errorf("dead letters = %d %q, want %d with the decoder's reasons", len(reasons), joined, len(bad))
			}
			if c.strategy != strategies.StrategyAtLeastOnce {
				sink.checkOffsets()
			}
			if n := sink.builtinKeys(); n != 0 {
				t.Errorf("the built-in job wrote %d keys; a transform replaces it", n)
			}
		})
	}
}

// transformSink reads what userTransform wrote, from a SQL table or from
// Redis hashes.
type transformSink struct {
	perKey       func() keyTotals
	deadReasons  func() []string
	checkOffsets func()
	builtinKeys  func() int64
}

// openTransformSink creates the transform's table (SQL) and returns its
// readers.
func openTransformSink(t *testing.T, strategy strategies.Strategy, dsn string, brokers []string, job, topic, table string) transformSink {
	t.Helper()
	if strategy == strategies.StrategyIdempotent {
		return openRedisTransformSink(t, dsn, brokers, job, topic, table)
	}
	w := sinktest.OpenSQL(t, dsn)
	if _, err := w.DB().Exec("CREATE TABLE " + table + " (k VARCHAR(255) PRIMARY KEY, n BIGINT NOT NULL, total BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return transformSink{
		perKey: func() keyTotals {
			got := keyTotals{}
			rows, err := w.DB().Query("SELECT k, n, total FROM " + table)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var k string
				var n, total int64
				if err := rows.Scan(&k, &n, &total); err != nil {
					t.Fatal(err)
				}
				got[k] = event.Total{Key: k, Events: n, Amount: total}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return got
		},
		deadReasons: func() []string {
			var reasons []string
			drows, err := w.DB().Query("SELECT reason FROM mb_dead_letters WHERE job = ?", job)
			if err != nil {
				t.Fatal(err)
			}
			defer drows.Close()
			for drows.Next() {
				var r string
				if err := drows.Scan(&r); err != nil {
					t.Fatal(err)
				}
				reasons = append(reasons, r)
			}
			return reasons
		},
		checkOffsets: func() { checkOffsets(t, w, brokers, job, topic) },
		builtinKeys: func() int64 {
			var n int64
			if err := w.DB().QueryRow("SELECT COUNT(*) FROM mb_totals WHERE job = ?", job).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}

// openRedisTransformSink reads the hashes of userTransform's value
// columns, mb:{job}:rows:<table>:n and :total, and the job's dead letters.
func openRedisTransformSink(t *testing.T, dsn string, brokers []string, job, topic, table string) transformSink {
	t.Helper()
	r, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keys, _ := r.Client().Keys(context.Background(), "mb:{"+job+"}:*").Result(); len(keys) > 0 {
			r.Client().Del(context.Background(), keys...)
		}
		r.Close()
	})
	return transformSink{
		perKey: func() keyTotals { return redisRows(t, r, job, table) },
		deadReasons: func() []string {
			var reasons []string
			for p := range int32(testPartitions) {
				all, err := r.Client().HGetAll(t.Context(), fmt.Sprintf("mb:{%s}:dead:%s:%d", job, topic, p)).Result()
				if err != nil {
					t.Fatal(err)
				}
				for off, v := range all {
					var d struct{ Reason string }
					if err := json.Unmarshal([]byte(v), &d); err != nil {
						t.Fatalf("dead letter %d@%s = %q: %v", p, off, v, err)
					}
					reasons = append(reasons, d.Reason)
				}
			}
			if n, err := redisJobOf(t, r, job).DeadLetterCount(t.Context()); err != nil || n != int64(len(reasons)) {
				t.Errorf("DeadLetterCount = %d, %v; the dead keys hold %d", n, err, len(reasons))
			}
			return reasons
		},
		checkOffsets: func() {
			got, err := redisJobOf(t, r, job).Offsets(t.Context(), topic)
			if err != nil {
				t.Fatal(err)
			}
			if want := testutil.EndOffsets(t, brokers, topic); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("stored offsets %v, partition ends %v", got, want)
			}
		},
		builtinKeys: func() int64 {
			_, _, keys, err := redisJobOf(t, r, job).Totals(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return keys
		},
	}
}

// redisRows reads userTransform's per-key counts and sums from Redis.
func redisRows(t *testing.T, r *redissink.Sink, job, table string) keyTotals {
	t.Helper()
	ns, err := redisJobOf(t, r, job).Rows(t.Context(), table, "n")
	if err != nil {
		t.Fatal(err)
	}
	totals, err := redisJobOf(t, r, job).Rows(t.Context(), table, "total")
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != len(totals) {
		t.Errorf("%d keys have a count, %d a total", len(ns), len(totals))
	}
	got := keyTotals{}
	for k, n := range ns {
		tt := event.Total{Key: k}
		if _, err := fmt.Sscan(n, &tt.Events); err != nil {
			t.Fatalf("count of %q = %q", k, n)
		}
		if _, err := fmt.Sscan(totals[k], &tt.Amount); err != nil {
			t.Fatalf("total of %q = %q", k, totals[k])
		}
		got[k] = tt
	}
	return got
}

// TestTransformConfigErrors: a transform with a sink that can't take it
// (checkpoint mode's kafka:// and file://), or whose table is missing or
// keyless, stops before reading with a config error.
func TestTransformConfigErrors(t *testing.T) {
	brokers := kfake.brokers(t)
	topic := newTopic(t, brokers)
	dsn := sqliteSink.dsn(t)
	w := sinktest.OpenSQL(t, dsn)
	if _, err := w.DB().Exec("CREATE TABLE keyless (k TEXT, n INTEGER, total INTEGER)"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name              string
		strategy          strategies.Strategy
		mode              strategies.SinkMode
		sink, table, want string
	}{
		{"checkpoint to files", strategies.StrategyCheckpoint, "", "file://" + t.TempDir(), "t", "built-in job's per-event output only"},
		{"checkpoint to kafka", strategies.StrategyCheckpoint, "", "kafka://" + brokers[0] + "/out", "t", "to an SQL sink"},
		{"checkpoint missing table", strategies.StrategyCheckpoint, strategies.SinkModeWAL, dsn, "no_such_table", "no_such_table"},
		{"checkpoint table without a key on k", strategies.StrategyCheckpoint, strategies.SinkModeWAL, dsn, "keyless", "no primary or unique key"},
		{"bad table name", strategies.StrategyTxn, "", dsn, "t; drop", "transform"},
		{"missing table", strategies.StrategyTxn, "", dsn, "no_such_table", "no_such_table"},
		{"table without a key on k", strategies.StrategyTxn, "", dsn, "keyless", "no primary or unique key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(t, brokers, topic, uniqueName(t, "cfg"), c.sink)
			cfg.Strategy = c.strategy
			cfg.Checkpoint.SinkMode = c.mode
			cfg.Checkpoint.StateDir = t.TempDir()
			cfg.Transform = userTransform(c.table)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := strategies.Run(ctx, cfg)
			if !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v, want ErrConfig mentioning %q", err, c.want)
			}
		})
	}
}

func TestTransformNilFunctions(t *testing.T) {
	u := writers.Upsert{Table: "t", Keys: []string{"k"}, Values: []string{"v"}}
	for name, tr := range map[string]*strategies.Transform{
		"nil decode":     strategies.NewTransform[int](u, nil, func([]int) [][]any { return nil }),
		"nil rows":       strategies.NewTransform(u, func(*batch.Record) (int, error) { return 0, nil }, nil),
		"zero Transform": {},
	} {
		cfg := strategies.Config{Brokers: []string{"x:9092"}, Sink: "sqlite://x.db", Transform: tr}
		if err := cfg.Validate(); !errors.Is(err, strategies.ErrConfig) {
			t.Errorf("%s: Validate = %v, want ErrConfig", name, err)
		}
	}
}

func produceRaw(t *testing.T, brokers []string, topic string, values []string) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, v := range values {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(i % testPartitions),
			Value: sarama.StringEncoder(v), Key: sarama.StringEncoder(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTransformIdempotentZombie stops a transform on Redis between a
// batch's contributions and its fold — after one partition's contribution
// (mid-write), and after all of them (after-write-before-offsets) — by
// holding the run at that crash point. (Cancelling its context would not
// do: a cancelled run finishes the batch in flight.) A second run of the
// job takes over, finishes the held batch and the rest; then the first is
// let go, as a process that was only paused would be, and is fenced: the
// hashes hold exact per-key counts before and after.
func TestTransformIdempotentZombie(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		point string
		nth   int64 // hold at the nth call of point
	}{
		{strategies.CrashMidWrite, 9},                // in the 3rd batch (4 partitions)
		{strategies.CrashAfterWriteBeforeOffsets, 3}, // the 3rd batch
	} {
		t.Run(c.point, func(t *testing.T) {
			brokers, dsn := kfake.brokers(t), redisSink.dsn(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "trz")
			const table = "per_key"
			sink := openRedisTransformSink(t, dsn, brokers, job, topic, table)
			const events = 12_000
			produce(t, brokers, topic, 13, 0, events)
			bad := []string{"not json", "PANIC", `{"amount": 3}`, "x", "y"}
			produceRaw(t, brokers, topic, bad)

			cfg := baseConfig(t, brokers, topic, job, dsn)
			cfg.Strategy = strategies.StrategyIdempotent
			cfg.Transform = userTransform(table)
			cfg.MaxBatchRecords = 500  // 3000 records a partition: 6 batches and more
			cfg.Group.InstanceID = job // the second run takes the partitions at once
			first := cfg
			reached, release := make(chan struct{}), make(chan struct{})
			var calls atomic.Int64
			first.CrashPoint = func(point string) {
				if point == c.point && calls.Add(1) == c.nth {
					close(reached)
					<-release
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := strategies.Run(ctx, first)
				done <- err
			}()
			select {
			case <-reached:
			case err := <-done:
				t.Fatalf("the first run ended (%v) before call %d of %s", err, c.nth, c.point)
			}
			checkInterrupted(t, dsn, brokers, job, topic, table)

			runJob(t, cfg)
			want := expectedPerKey(13, 0, events)
			checkPerKey(t, sink.perKey(), want)
			if reasons := sink.deadReasons(); len(reasons) != len(bad) {
				t.Errorf("%d dead letters %q, want %d", len(reasons), reasons, len(bad))
			}
			sink.checkOffsets()

			close(release)
			err := <-done
			t.Logf("the first run, let go: %v", err)
			// Fenced by Redis (its fold) or by the group (its static
			// membership), whichever it hits first.
			if !errors.Is(err, offsets.ErrFenced) && !errors.Is(err, sarama.ErrFencedInstancedId) {
				t.Errorf("the first run, let go after the second, ended with %v; want it fenced", err)
			}
			checkPerKey(t, sink.perKey(), want)
			sink.checkOffsets()
		})
	}
}

// checkInterrupted asserts that a batch of the transform was left written
// and not folded — a range logged and still pending, its contribution
// there — and that what was folded agrees with the offsets: the counts in
// the hashes plus the dead letters are the records below the stored
// offsets (the input is produced without transactions: one record per
// offset).
func checkInterrupted(t *testing.T, dsn string, brokers []string, job, topic, table string) {
	t.Helper()
	r, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	parts := make([]int32, testPartitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	pending, err := redisJobOf(t, r, job).PendingRanges(t.Context(), topic, parts)
	if err != nil {
		t.Fatal(err)
	}
	contribs, err := r.Client().Keys(t.Context(), "mb:{"+job+"}:contrib:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) == 0 || len(contribs) == 0 {
		t.Fatalf("after the interruption: %d pending ranges, contributions %v; want a batch written and not folded", len(pending), contribs)
	}
	offs, err := redisJobOf(t, r, job).Offsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var below int64
	for _, o := range offs {
		below += o
	}
	var counted int64
	for _, tt := range redisRows(t, r, job, table) {
		counted += tt.Events
	}
	dead, err := redisJobOf(t, r, job).DeadLetterCount(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if below == 0 || counted+dead != below {
		t.Errorf("after the interruption: %d counted + %d dead letters, %d records below the offsets; want equal and > 0", counted, dead, below)
	}
	t.Logf("interrupted with %d ranges pending (%d contributions written), %d records folded before", len(pending), len(contribs), below)
}

// TestTransformIdempotentKilled runs a transform on Redis in a child
// process (this test binary again) and SIGKILLs it twice: once after a
// partition's contribution is written (mid-write), once after all of a
// batch's are and before the fold. The child waits at the crash point for
// the kill, so each kill lands exactly between contribution and fold. A
// final run in this process finishes the job: the hashes hold exact
// per-key counts, every bad record is dead-lettered once, and the offsets
// are at the log ends.
func TestTransformIdempotentKilled(t *testing.T) {
	if spec := os.Getenv("MB_TRANSFORM_CHILD"); spec != "" {
		transformChild(t, spec)
		return
	}
	t.Parallel()
	brokers, dsn := kfake.brokers(t), redisSink.dsn(t)
	topic, job := newTopic(t, brokers), uniqueName(t, "trk")
	const table = "per_key"
	sink := openRedisTransformSink(t, dsn, brokers, job, topic, table)
	const events = 12_000
	produce(t, brokers, topic, 17, 0, events)
	bad := []string{"not json", "PANIC", `{"amount": 3}`, "x", "y"}
	produceRaw(t, brokers, topic, bad)

	for _, kill := range []struct {
		point string
		nth   int
	}{
		{strategies.CrashMidWrite, 6},                // in the 2nd batch
		{strategies.CrashAfterWriteBeforeOffsets, 3}, // the 1st is the fold of the batch recovered
	} {
		marker := filepath.Join(t.TempDir(), "at-crash-point")
		spec, err := json.Marshal(transformChildSpec{Brokers: brokers, Topic: topic, Job: job, Sink: dsn, Table: table,
			Point: kill.point, Nth: kill.nth, Marker: marker})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestTransformIdempotentKilled$", "-test.count=1")
		cmd.Env = append(os.Environ(), "MB_TRANSFORM_CHILD="+string(spec))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.After(runTimeout)
	wait:
		for {
			select {
			case err := <-exited:
				t.Fatalf("the child ended (%v) before reaching %s:\n%s", err, kill.point, out.String())
			case <-deadline:
				cmd.Process.Kill()
				<-exited
				t.Fatalf("the child did not reach %s within %s:\n%s", kill.point, runTimeout, out.String())
			case <-time.After(10 * time.Millisecond):
				if _, err := os.Stat(marker); err == nil {
					break wait
				}
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = <-exited
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the child ended with %v, not by our SIGKILL:\n%s", err, out.String())
		}
		t.Logf("killed the child at call %d of %s", kill.nth, kill.point)
		checkInterrupted(t, dsn, brokers, job, topic, table)
	}

	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategies.StrategyIdempotent
	cfg.Transform = userTransform(table)
	cfg.MaxBatchRecords = 500
	cfg.Group.InstanceID = job
	runJob(t, cfg)
	checkPerKey(t, sink.perKey(), expectedPerKey(17, 0, events))
	if reasons := sink.deadReasons(); len(reasons) != len(bad) {
		t.Errorf("%d dead letters %q, want %d", len(reasons), reasons, len(bad))
	}
	sink.checkOffsets()
}

type transformChildSpec struct {
	Brokers                        []string
	Topic, Job, Sink, Table, Point string
	Nth                            int
	Marker                         string
}

// transformChild is the child of TestTransformIdempotentKilled: it runs the
// job and, at the Nth call of the crash point, creates the marker file and
// waits to be killed.
func transformChild(t *testing.T, spec string) {
	var s transformChildSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(t, s.Brokers, s.Topic, s.Job, s.Sink)
	cfg.Strategy = strategies.StrategyIdempotent
	cfg.Transform = userTransform(s.Table)
	cfg.MaxBatchRecords = 500
	cfg.Group.InstanceID = s.Job
	var calls atomic.Int64
	cfg.CrashPoint = func(point string) {
		if point == s.Point && calls.Add(1) == int64(s.Nth) {
			if err := os.WriteFile(s.Marker, nil, 0o600); err != nil {
				panic(err)
			}
			time.Sleep(time.Hour) // the parent SIGKILLs us here
		}
	}
	_, err := strategies.Run(context.Background(), cfg)
	t.Fatalf("the child's run ended (%v) before the crash point", err)
}

// TestTransformIdempotentBadValue: a transform whose MergeAdd rows hold a
// value Redis can't add (a float) stops the job with ErrConfig naming the
// column, and nothing of the batch is folded.
func TestTransformIdempotentBadValue(t *testing.T) {
	brokers, dsn := kfake.brokers(t), redisSink.dsn(t)
	topic, job := newTopic(t, brokers), uniqueName(t, "trb")
	sink := openRedisTransformSink(t, dsn, brokers, job, topic, "per_key")
	produce(t, brokers, topic, 19, 0, 100)
	u := writers.Upsert{Table: "per_key", Keys: []string{"k"}, Values: []string{"n", "total"}, Merge: writers.MergeAdd}
	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategies.StrategyIdempotent
	cfg.Transform = strategies.NewTransform(u,
		func(rec *batch.Record) (userEvent, error) {
			var ev userEvent
			return ev, json.Unmarshal(rec.Value, &ev)
		},
		func(evs []userEvent) [][]any {
			rows := make([][]any, len(evs))
			for i, ev := range evs {
				rows[i] = []any{ev.Key, 1, float64(ev.Amount) / 2}
			}
			return rows
		})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	_, err := strategies.Run(ctx, cfg)
	t.Logf("Run: %v", err)
	if !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), "per_key.total") {
		t.Fatalf("Run = %v, want ErrConfig naming per_key.total", err)
	}
	if got := sink.perKey(); len(got) != 0 {
		t.Errorf("the hashes hold %d keys after a refused batch", len(got))
	}
	r, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	offs, err := redisJobOf(t, r, job).Offsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for p, o := range offs {
		if o != 0 {
			t.Errorf("partition %d's offset moved to %d after a refused batch", p, o)
		}
	}
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
