package systemtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/strategies"
)

// TestGracefulStop sends SIGTERM to `microbatch run` just after a batch
// started: the batch in flight must commit, the run must exit 0, and after
// a final drain the sink holds every event exactly once.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	bin := Binary(t)
	topic := UniqueName(t, "term")
	job := UniqueName(t, "term-job")
	sink := "sqlite://" + t.TempDir() + "/sink.db"
	produced, expAmount := Produce(t, b.Addr, topic, crashSeed, 0, crashInitial)
	w := sinktest.OpenSQL(t, sink)
	logDir := t.TempDir()
	args := []string{"run", "--brokers", b.Addr, "--topic", topic, "--job", job, "--sink", sink,
		"--interval", crashInterval.String(), "--max-batch-records", strconv.Itoa(crashMaxBatch), "--log-level", "debug"}
	for i := 1; i <= 3; i++ {
		logPath := filepath.Join(logDir, fmt.Sprintf("run-%d.log", i))
		ps := stopRun(t, bin, args, logPath, crashMinDelay, true, 0, syscall.SIGTERM)
		log, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		st := parseBatchLog(string(log))
		if ps.ExitCode() != 0 || st.started == 0 || st.open || !strings.Contains(string(log), `msg="run finished"`) {
			t.Fatalf("SIGTERM %d: want exit 0 after committing the batch in flight, got %v, %+v; log:\n%s", i, ps, st, log)
		}
	}
	final := Run(t, logDir, nil, 5*time.Minute, append(args, "--until-idle", "2s")...)
	if final.Code != 0 {
		t.Fatalf("final run: %s", final)
	}
	got, err := strategies.ReadSinkTotals(context.Background(), w, job)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != produced || !got.AmountIs(expAmount) {
		t.Errorf("sink totals %+v, want events=%d amount=%d", got, produced, expAmount)
	}
}
