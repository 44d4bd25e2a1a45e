package systemtest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/microbatch/microbatch/strategies"
)

// TestCheckpointCrashFile: kfake in, file sink out; random kills and every
// crash point, with the input flowing. Every id exactly once across the
// committed files, with consistent running totals; a reader polling the
// directory during all the kills never sees a partial or changing file or
// an id twice; nothing is left in .pending after the drain.
func TestCheckpointCrashFile(t *testing.T) {
	t.Parallel()
	b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	dir := filepath.Join(t.TempDir(), "out")
	h := newCkptHarness(t, b.Addr, UniqueName(t, "ckpt-job"), "file://"+dir)
	checked := map[string]bool{}
	h.inspect = fileInspect(t, dir, checked)
	h.alignInTxn = true
	h.requireLanding(strategies.CrashAfterBarrier, strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit)
	watch := startFileWatcher(dir)
	defer watch.stop()
	h.startFeeder()
	for range 8 {
		h.randomKill()
	}
	for _, p := range strategies.CheckpointCrashPoints {
		h.crashPoint(p)
	}
	h.drain()
	watch.stop()
	checkCommittedFiles(t, dir, checked)
	c := checkOutputs(t, "committed files", readFileOutputs(t, dir, h.job), ckptExpected(h.produced))
	dups, losses := h.verify()
	s := h.summary()
	t.Logf("produced %d events; committed files (%d): %d records, %d duplicates, %d losses, %d wrong totals, %d out of order; verify: %d duplicates, %d losses",
		h.produced, len(checked), c.records, c.duplicates, c.losses, c.wrong, c.unordered, dups, losses)
	t.Logf("reader polling the directory during the kills: %d polls, %d files, %d records, %d ids twice, %d partial files, %d files changed after they appeared",
		watch.polls, len(watch.files), watch.records, watch.dups, watch.partial, watch.changed)
	if watch.dups != 0 || watch.partial != 0 || watch.changed != 0 {
		t.Errorf("the reader polling during the kills saw %d ids twice (%s), %d partial files (%s), %d changed files (%s)",
			watch.dups, watch.firstDup, watch.partial, watch.firstPartial, watch.changed, watch.change)
	}
	if int64(len(watch.ids)) != h.produced {
		t.Errorf("the reader polling during the kills saw %d distinct ids of %d produced", len(watch.ids), h.produced)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, ".pending")); len(left) != 0 {
		t.Errorf("after the drain .pending still holds %d files", len(left))
	}
	if s.inTxn == 0 {
		t.Errorf("no random kill left a pending file with records (logs in %s)", h.logDir)
	}
	h.requireInTxn()
}
