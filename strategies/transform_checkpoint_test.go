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

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// checkpointTransformConfig is a checkpoint-mode run of userTransform into
// table, with three operators (a Transform's values all go to subtask 0;
// its dead letters are spread) and short intervals (several checkpoints).
func checkpointTransformConfig(t testing.TB, brokers []string, topic, job, dsn, mode, stateDir, table string) strategies.Config {
	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategies.StrategyCheckpoint
	cfg.Checkpoint.SinkMode = strategies.SinkMode(mode)
	cfg.Checkpoint.StateDir = stateDir
	cfg.Checkpoint.OperatorParallelism = 3
	cfg.Checkpoint.Interval = 50 * time.Millisecond
	cfg.Checkpoint.Timeout = 30 * time.Second
	cfg.Transform = userTransform(table)
	return cfg
}

// checkpointAtEnds asserts that job's latest checkpoint resumes at the
// partitions' ends.
func checkpointAtEnds(t testing.TB, stateDir string, brokers []string, job, topic string) {
	t.Helper()
	chk := latestCheckpoint(t, stateDir, job)
	if want := testutil.EndOffsets(t, brokers, topic); fmt.Sprint(chk.Offsets) != fmt.Sprint(want) {
		t.Errorf("checkpoint %d resumes at %v, partition ends %v", chk.ID, chk.Offsets, want)
	}
}

// transformTable names a test's table of the user's transform.
func transformTable(job string) string {
	table := "tr_" + strings.NewReplacer("-", "_", ".", "_").Replace(job)
	return strings.ToLower(table[:min(len(table), 60)]) // PostgreSQL folds an unquoted name; the sink quotes it
}

// checkpointTransformSinks are the SQL sinks of checkpoint mode; killed
// ones also run TestTransformCheckpointKilled.
var checkpointTransformSinks = []struct {
	name, mode string
	sink       sinkTarget
	killed     bool
}{
	{"XA", string(strategies.SinkMode2PC), mariaDB, true},
	{"WAL", string(strategies.SinkModeWAL), sqliteSink, true},
	{"WAL", string(strategies.SinkModeWAL), mariaDB, false},
	{"PG2PC", string(strategies.SinkMode2PC), postgresSink, true},
	{"WAL", string(strategies.SinkModeWAL), postgresSink, true},
}

// TestTransformCheckpoint runs a user-defined transform in checkpoint mode
// into each SQL two-phase sink: the user's table holds exact per-key
// counts, bad records (one panics the decoder) are dead-lettered with the
// decoder's reasons, the built-in job wrote nothing, and the last
// checkpoint is at the log ends.
func TestTransformCheckpoint(t *testing.T) {
	t.Parallel()
	const events = 20_000
	for _, c := range checkpointTransformSinks {
		t.Run(c.name+"To"+c.sink.name, func(t *testing.T) {
			t.Parallel()
			dsn := c.sink.dsn(t)
			brokers := kfake.brokers(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "trc")
			table := transformTable(job)
			sink := openTransformSink(t, strategies.StrategyCheckpoint, dsn, brokers, job, topic, table)
			produce(t, brokers, topic, 23, 0, events/2)
			bad := []string{"not json", "PANIC", `{"amount": 3}`}
			produceRaw(t, brokers, topic, bad)
			produce(t, brokers, topic, 23, events/2, events/2)

			stateDir := t.TempDir()
			cfg := checkpointTransformConfig(t, brokers, topic, job, dsn, c.mode, stateDir, table)
			res := runJob(t, cfg)
			if res.Records != events || res.DeadLetters != int64(len(bad)) {
				t.Errorf("run: %d records, %d dead letters; want %d and %d", res.Records, res.DeadLetters, events, len(bad))
			}
			if res.Batches < 2 {
				t.Errorf("run: %d checkpoints, want several", res.Batches)
			}
			checkPerKey(t, sink.perKey(), expectedPerKey(23, 0, events))
			reasons := sink.deadReasons()
			joined := strings.Join(reasons, " | ")
			if len(reasons) != len(bad) || !strings.Contains(joined, "panicked") || !strings.Contains(joined, "no key") || !strings.Contains(joined, "invalid character") {
				t.Errorf("dead letters = %d %q, want %d with the decoder's reasons", len(reasons), joined, len(bad))
			}
			if n := sink.builtinKeys(); n != 0 {
				t.Errorf("the built-in job wrote %d keys; a transform replaces it", n)
			}
			checkpointAtEnds(t, stateDir, brokers, job, topic)

			// A second run over more input adds to the same rows.
			produce(t, brokers, topic, 23, events, events/4)
			res = runJob(t, cfg)
			if res.Records != events/4 {
				t.Errorf("second run: %d records, want %d", res.Records, events/4)
			}
			checkPerKey(t, sink.perKey(), expectedPerKey(23, 0, events+events/4))
			checkpointAtEnds(t, stateDir, brokers, job, topic)
		})
	}
}

// TestTransformCheckpointBadRows: a transform whose rows can't be written
// as they are stops the job with ErrConfig before any checkpoint holds
// them: a row of the wrong width (any sink), and for the write-ahead sink
// a value that its checkpoint JSON would not give back (a time.Time).
func TestTransformCheckpointBadRows(t *testing.T) {
	for _, c := range []struct {
		name, mode string
		row        func(ev userEvent) []any
		want       string
	}{
		{"width", string(strategies.SinkModeWAL), func(ev userEvent) []any { return []any{ev.Key, 1} }, "want 3"},
		{"time", string(strategies.SinkModeWAL), func(ev userEvent) []any { return []any{time.UnixMilli(ev.Amount), 1, ev.Amount} }, ".k ="},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := sqliteSink.dsn(t)
			brokers := kfake.brokers(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "trb")
			table := transformTable(job)
			sink := openTransformSink(t, strategies.StrategyCheckpoint, dsn, brokers, job, topic, table)
			produce(t, brokers, topic, 29, 0, 200)
			cfg := checkpointTransformConfig(t, brokers, topic, job, dsn, c.mode, t.TempDir(), table)
			u := writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"n", "total"}, Merge: writers.MergeAdd}
			cfg.Transform = strategies.NewTransform(u,
				func(rec *batch.Record) (userEvent, error) {
					var ev userEvent
					return ev, json.Unmarshal(rec.Value, &ev)
				},
				func(evs []userEvent) [][]any {
					rows := make([][]any, len(evs))
					for i, ev := range evs {
						rows[i] = c.row(ev)
					}
					return rows
				})
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			_, err := strategies.Run(ctx, cfg)
			t.Logf("Run: %v", err)
			if !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v, want ErrConfig mentioning %q", err, c.want)
			}
			if got := sink.perKey(); len(got) != 0 {
				t.Errorf("the table holds %d keys after refused rows", len(got))
			}
		})
	}
}

// TestTransformCheckpointKilled runs a transform in checkpoint mode in a
// child process (this test binary again) and SIGKILLs it at crash points:
// after a pre-commit (a prepared XA branch / a WAL buffer handed over, no
// checkpoint listing it: rolled back, its records read again), after a
// checkpoint was saved and before any sink committed (its transactions
// committed by recovery), and mid-commit. The child waits at the crash
// point for the kill, once subtask 0's transaction holds minCrashRows rows
// or more; the kill after a saved checkpoint must leave a transaction that
// the next run's recovery commits. A final run in this process finishes
// the job: the user's table holds exact per-key counts and every bad
// record is dead-lettered once.
func TestTransformCheckpointKilled(t *testing.T) {
	if spec := os.Getenv("MB_TRANSFORM_CKPT_CHILD"); spec != "" {
		transformCheckpointChild(t, spec)
		return
	}
	t.Parallel()
	for _, c := range checkpointTransformSinks {
		if !c.killed {
			continue
		}
		t.Run(c.name+"To"+c.sink.name, func(t *testing.T) {
			dsn := c.sink.dsn(t)
			brokers := kfake.brokers(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "trck")
			table := transformTable(job)
			sink := openTransformSink(t, strategies.StrategyCheckpoint, dsn, brokers, job, topic, table)
			// Each child gets fresh input (perChild more events) on top of
			// what earlier children left unread, so that it never runs out
			// before its crash point, however slowly it reads.
			const first, perChild = 12_000, 6_000
			events := int64(first)
			produce(t, brokers, topic, 31, 0, first)
			bad := []string{"not json", "PANIC", `{"amount": 3}`, "x", "y"}
			produceRaw(t, brokers, topic, bad)
			stateDir := t.TempDir()

			var before int64 // events in the table after the previous kill
			for _, point := range []string{strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit, strategies.CrashMidCommit} {
				if point != strategies.CrashAfterPrecommit {
					produce(t, brokers, topic, 31, events, perChild)
					events += perChild
				}
				marker := filepath.Join(t.TempDir(), "at-crash-point")
				// Each run decodes 1000 records or more before its crash.
				spec, err := json.Marshal(transformCkptChildSpec{Brokers: brokers, Topic: topic, Job: job, Sink: dsn, Mode: c.mode,
					StateDir: stateDir, Table: table, Point: point, After: 1000, Marker: marker})
				if err != nil {
					t.Fatal(err)
				}
				killChildAt(t, "^TestTransformCheckpointKilled$", "MB_TRANSFORM_CKPT_CHILD="+string(spec), point, marker)
				var counted int64
				for _, tt := range sink.perKey() {
					counted += tt.Events
				}
				t.Logf("killed the child at %s: %d events in the table", point, counted)
				if counted >= events {
					t.Errorf("after the kill at %s the table holds %d events: want a part of the %d", point, counted, events)
				}
				switch point {
				case strategies.CrashMidCommit:
					// The previous child's checkpoint listed a transaction
					// of at least minCrashRows rows: this child's recovery
					// committed it (and maybe more) before it was killed.
					if counted < before+minCrashRows {
						t.Errorf("after the kill at %s the table holds %d events, %d before: recovery did not commit the pending transaction of ≥ %d rows", point, counted, before, minCrashRows)
					}
				case strategies.CrashAfterPrecommit:
					// 2PC: subtask 0's transaction holding rows is prepared
					// on the server, in no checkpoint: recovery rolls it
					// back.
					if c.mode == string(strategies.SinkMode2PC) && preparedTxns(t, dsn, job) == 0 {
						t.Errorf("after the kill at %s no transaction of job %s is prepared", point, job)
					}
				case strategies.CrashAfterCheckpointBeforeCommit:
					// The saved checkpoint lists subtask 0's transaction
					// with rows, uncommitted: recovery commits it.
					if !pendingRows(t, stateDir, job, table) {
						t.Errorf("after the kill at %s the latest checkpoint lists no pending transaction of subtask 0", point)
					}
				}
				before = counted
			}

			cfg := checkpointTransformConfig(t, brokers, topic, job, dsn, c.mode, stateDir, table)
			runJob(t, cfg)
			checkPerKey(t, sink.perKey(), expectedPerKey(31, 0, events))
			if reasons := sink.deadReasons(); len(reasons) != len(bad) {
				t.Errorf("%d dead letters %q, want %d", len(reasons), reasons, len(bad))
			}
			checkpointAtEnds(t, stateDir, brokers, job, topic)
		})
	}
}

// killChildAt runs this test binary's test run with env added, waits until
// it creates marker (it is then waiting at crash point) and SIGKILLs it.
func killChildAt(t *testing.T, run, env, point, marker string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(runTimeout)
	for {
		select {
		case err := <-exited:
			t.Fatalf("the child ended (%v) before reaching %s:\n%s", err, point, out.String())
		case <-deadline:
			cmd.Process.Kill()
			<-exited
			t.Fatalf("the child did not reach %s within %s:\n%s", point, runTimeout, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if _, err := os.Stat(marker); err == nil {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-exited
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, not by our SIGKILL:\n%s", err, out.String())
	}
}

// minCrashRows is how many rows subtask 0's transaction holds at least
// when a child of TestTransformCheckpointKilled is killed.
const minCrashRows = 200

type transformCkptChildSpec struct {
	Brokers                                        []string
	Topic, Job, Sink, Mode, StateDir, Table, Point string
	After                                          int64 // records decoded before the crash point counts
	Marker                                         string
}

// transformCheckpointChild is the child of TestTransformCheckpointKilled:
// it runs the job with a decoder slowed down (so that the input spans many
// checkpoints) and, at the first call of the crash point after After
// records were decoded and after subtask 0 pre-committed rows, creates the
// marker file and waits to be killed.
func transformCheckpointChild(t *testing.T, spec string) {
	var s transformCkptChildSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatal(err)
	}
	cfg := checkpointTransformConfig(t, s.Brokers, s.Topic, s.Job, s.Sink, s.Mode, s.StateDir, s.Table)
	// Intervals long enough to hold minCrashRows rows on a slow, busy
	// machine (the crash point waits for one that does).
	cfg.Checkpoint.Interval = 250 * time.Millisecond
	var decoded, withRows atomic.Int64
	cfg.Transform = strategies.NewTransform(userTransform(s.Table).Upsert(),
		func(rec *batch.Record) (userEvent, error) {
			if decoded.Add(1)%10 == 0 {
				time.Sleep(time.Millisecond)
			}
			return userTransformDecode(rec)
		},
		func(evs []userEvent) [][]any {
			if decoded.Load() >= s.After && len(evs) >= minCrashRows {
				withRows.Add(1) // this interval's transaction holds rows
			}
			rows := make([][]any, len(evs))
			for i, ev := range evs {
				rows[i] = []any{ev.Key, 1, ev.Amount}
			}
			return rows
		})
	var fired atomic.Bool
	cfg.CrashPoint = func(point string) {
		if point == s.Point && withRows.Load() > 0 && fired.CompareAndSwap(false, true) {
			if err := os.WriteFile(s.Marker, nil, 0o600); err != nil {
				panic(err)
			}
			time.Sleep(time.Hour) // the parent SIGKILLs us here
		}
	}
	_, err := strategies.Run(context.Background(), cfg)
	t.Fatalf("the child's run ended (%v) before the crash point", err)
}

// preparedTxns counts the prepared transactions on the server that name
// job: XA branches (MySQL/MariaDB), or PostgreSQL's in pg_prepared_xacts
// (gid mb-<subtask>-<txn>-<job>).
func preparedTxns(t *testing.T, dsn, job string) int {
	t.Helper()
	w := sinktest.OpenSQL(t, dsn)
	if w.Dialect() == offsets.Postgres {
		var n int
		err := w.DB().QueryRow("SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE 'mb-%' AND right(gid, length($1) + 1) = '-' || $1", job).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	rows, err := w.DB().Query("XA RECOVER")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var format, glen, blen int
		var data string
		if err := rows.Scan(&format, &glen, &blen, &data); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(data, job) {
			n++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// latestCheckpoint reads job's latest complete checkpoint from the file
// store in stateDir; there must be one.
func latestCheckpoint(t testing.TB, stateDir, job string) *offsets.Checkpoint {
	t.Helper()
	store, err := offsets.NewFileCheckpoints(stateDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := store.Latest(context.Background(), job)
	if err != nil || chk == nil {
		t.Fatalf("latest checkpoint of %s: %v, %v", job, chk, err)
	}
	return chk
}

// pendingRows says whether job's latest checkpoint lists a pending
// transaction of subtask 0 (for the write-ahead sink: one holding rows of
// table).
func pendingRows(t *testing.T, stateDir, job, table string) bool {
	t.Helper()
	chk := latestCheckpoint(t, stateDir, job)
	var data struct{ Pending []writers.Pending }
	if err := json.Unmarshal(chk.Data, &data); err != nil {
		t.Fatal(err)
	}
	for _, p := range data.Pending {
		if p.Subtask == 0 && (p.Sink != "wal" || bytes.Contains(p.Data, []byte(table))) {
			return true
		}
	}
	return false
}
