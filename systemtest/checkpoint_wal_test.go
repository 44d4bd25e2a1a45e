package systemtest

import (
	"strconv"
	"testing"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/strategies"
)

// TestCheckpointCrashWAL: the write-ahead sink (--sink-mode wal) into
// SQLite; a few kills and every crash point. Every key's total exact.
func TestCheckpointCrashWAL(t *testing.T) {
	t.Parallel()
	testCheckpointCrashWAL(t, "sqlite://"+t.TempDir()+"/sink.db")
}

// testCheckpointCrashWAL runs the write-ahead sink into sink through 4
// random kills and every crash point with the input flowing: every key's
// total exact.
func testCheckpointCrashWAL(t *testing.T, sink string) {
	b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	h := newCkptHarness(t, b.Addr, UniqueName(t, "ckpt-job"), sink, "--sink-mode", string(strategies.SinkModeWAL))
	w := sinktest.OpenSQL(t, sink)
	h.inspect = walInspect(t, w, h.stateDir, h.job)
	// Checkpoint saved, its buffered writes not applied: recovery applies them.
	h.requireLanding(strategies.CrashAfterCheckpointBeforeCommit)
	h.startFeeder()
	for range 4 {
		h.randomKill()
	}
	for _, p := range strategies.CheckpointCrashPoints {
		h.crashPoint(p)
	}
	h.drain()
	dups, losses := h.verify()
	checkCrashPerKey(t, w, h.job, h.produced)
	s := h.summary()
	t.Logf("produced %d events; verify: %d duplicates, %d losses", h.produced, dups, losses)
	if s.midCheckpoint == 0 {
		t.Errorf("no random kill landed inside a checkpoint (logs in %s)", h.logDir)
	}
	h.requireInTxn()
}
