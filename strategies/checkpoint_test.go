package strategies_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/filesink"
)

// TestCheckpointFailureRewinds: a checkpoint that times out while a sink
// holds a pre-committed transaction full of records must abort it and
// restart the pipeline in-process from the latest complete checkpoint —
// replaying those records, not skipping them and not committing them
// twice. The file sink's output then holds every input id exactly once.
func TestCheckpointFailureRewinds(t *testing.T) {
	t.Parallel()
	brokers := startKfake(t)
	topic := newTopic(t, brokers)
	exp := produce(t, brokers, topic, 3, 0, 20_000)
	dir := t.TempDir()
	job := uniqueName(t, "ckfail")

	var logMu sync.Mutex
	var logBuf bytes.Buffer
	cfg := strategies.Config{
		Strategy: strategies.StrategyCheckpoint, Brokers: brokers, Topic: topic, Job: job,
		Sink: "file://" + dir + "/out",
		// A timeout no healthy checkpoint reaches on a busy machine; the
		// stalled one below overruns it by construction.
		Checkpoint: strategies.CheckpointConfig{StateDir: dir + "/state", Interval: 100 * time.Millisecond, Timeout: 10 * time.Second},
		UntilIdle:  time.Second,
		Logger:     slog.New(slog.NewTextHandler(&lockedWriter{mu: &logMu, w: &logBuf}, nil)),
	}
	// The first pre-commit that holds records stalls past the checkpoint
	// timeout (after the transaction was pre-committed, before the ack).
	var stalled atomic.Bool
	var failures, recoveries atomic.Int64
	cfg.Checkpoint.OnFailure = func(error) { failures.Add(1) }
	cfg.Checkpoint.OnRecovery = func() { recoveries.Add(1) }
	cfg.CrashPoint = func(point string) {
		if point == strategies.CrashAfterPrecommit && pendingFiles(dir+"/out") > 0 && stalled.CompareAndSwap(false, true) {
			time.Sleep(cfg.Checkpoint.Timeout + time.Second)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	res, err := strategies.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	log := logBuf.String()
	logMu.Unlock()
	if !stalled.Load() || !strings.Contains(log, "restarting from the latest complete checkpoint") {
		t.Fatalf("no checkpoint failed (stalled=%v): the test did not exercise the rewind; log:\n%s", stalled.Load(), log)
	}
	if failures.Load() < 1 || recoveries.Load() != failures.Load() {
		t.Errorf("hooks told of %d checkpoint failures and %d recoveries, want ≥ 1 and as many recoveries", failures.Load(), recoveries.Load())
	}

	seen := map[int64]int{}
	err = filesink.Read(dir+"/out", job, func(line []byte) error {
		var o event.Output
		if err := json.Unmarshal(line, &o); err != nil {
			return err
		}
		seen[o.ID]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, n := range seen {
		if n > 1 {
			dups++
		}
	}
	if int64(len(seen)) != exp.Events || dups != 0 {
		t.Fatalf("output holds %d distinct ids (%d of them more than once), want %d exactly once; run reported %d records",
			len(seen), dups, exp.Events, res.Records)
	}
	if res.Records != exp.Events {
		t.Errorf("run reported %d records committed, want %d (a failed attempt's records must not count)", res.Records, exp.Events)
	}
}

// pendingFiles counts pre-committed (not yet renamed) files of the sink.
// An empty transaction leaves no file.
func pendingFiles(dir string) int {
	entries, _ := os.ReadDir(dir + "/.pending")
	return len(entries)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
