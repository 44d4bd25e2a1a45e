package systemtest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/strategies"
)

// TestCheckpointMemoryBackendDuplicates is the negative control: with
// --state-backend memory a killed run's checkpoints die with it, so the
// restart begins again at the start of the input while the committed
// files of the killed run stay. The output must show exactly those
// records twice; if it is clean, the kill missed or the backend kept
// state, and the checkpoint crash tests would prove nothing.
func TestCheckpointMemoryBackendDuplicates(t *testing.T) {
	t.Parallel()
	b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	dir := filepath.Join(t.TempDir(), "out")
	h := newCkptHarness(t, b.Addr, UniqueName(t, "ckpt-job"), "file://"+dir, "--state-backend", string(strategies.StateBackendMemory))
	h.startFeeder()
	// Killed a little after a checkpoint completed, once its files are
	// committed: the sinks commit after the coordinator logs the
	// completion, so the run is stopped and the directory read before the
	// kill (a later checkpoint's completion is tried if none is there yet).
	logPath := filepath.Join(h.logDir, "run-01.log")
	ps, tries := stopRunAt(t, h.bin, h.args(), logPath, stopPlan{
		delay: 3 * ckptInterval, marker: ckptCompletedMarker, lag: ckptInterval / 2, tries: ckptAlignTries,
		inside: func(string) bool { return len(readFileOutputs(t, dir, h.job)) > 0 },
	}, syscall.SIGKILL)
	if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("run ended with %v, not by our SIGKILL", ps)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	st := parseCheckpointLog(string(log))
	committedBefore := int64(len(readFileOutputs(t, dir, h.job)))
	t.Logf("killed after %d completed checkpoints (%d records), try %d; %d records committed before the restart", st.completed, st.records, tries, committedBefore)
	if st.completed == 0 || committedBefore == 0 {
		t.Fatalf("the killed run committed nothing: the control proves nothing (log %s)", logPath)
	}
	h.drain()
	outs := readFileOutputs(t, dir, h.job)
	seen := map[int64]int{}
	for _, o := range outs {
		seen[o.ID]++
	}
	var dups, losses int64
	for id := range h.produced {
		switch n := seen[id]; {
		case n == 0:
			losses++
		case n > 1:
			dups += int64(n - 1)
		}
	}
	t.Logf("memory backend: produced %d, output %d records: %d duplicates, %d losses", h.produced, len(outs), dups, losses)
	if dups == 0 {
		t.Fatalf("the memory backend came out without duplicates after a kill: the kill missed, or the state survived the process")
	}
	if dups != committedBefore || losses != 0 {
		t.Errorf("want exactly the %d records committed before the kill twice and no loss, got %d duplicates, %d losses", committedBefore, dups, losses)
	}
	v := Run(t, h.logDir, nil, time.Minute, "verify", "--strategy", string(strategies.StrategyCheckpoint), "--sink", h.sink, "--job", h.job,
		"--expect-events", strconv.FormatInt(h.produced, 10), "--expect-amount", strconv.FormatInt(h.amount, 10))
	if v.Code == 0 || count(t, duplicatesRE, v.Stdout) != dups {
		t.Errorf("verify should fail and show %d duplicates: %s", dups, v)
	}
}
