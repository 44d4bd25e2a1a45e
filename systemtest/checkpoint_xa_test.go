package systemtest

import (
	"strconv"
	"testing"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestCheckpointCrashXA: kfake in, MariaDB out through XA transactions;
// random kills and every crash point (after-precommit lies between XA
// PREPARE and XA COMMIT) with the input flowing. Every key's total exact.
func TestCheckpointCrashXA(t *testing.T) {
	t.Parallel()
	testCheckpointCrashPrepared(t, testutil.NeedServer(t, testutil.EnvMySQL), shortJob("ckx"), xaInspect)
}

// testCheckpointCrashPrepared runs a two-phase sink (XA, PostgreSQL's
// prepared transactions) through 8 random kills and every crash point with
// the input flowing: every key's total exact, nothing of the job left
// prepared, and the kills between prepare and commit landed. inspect says
// what the job holds prepared on the server.
func testCheckpointCrashPrepared(t *testing.T, dsn, job string, inspect func(*testing.T, *sqlsink.Writer, string) func() (bool, string)) {
	b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	h := newCkptHarness(t, b.Addr, job, dsn)
	w := sinktest.OpenSQL(t, dsn)
	h.inspect = inspect(t, w, h.job)
	// Prepared and not committed at these two, whatever the timing.
	h.requireLanding(strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit)
	h.startFeeder()
	for range 8 {
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
	if prepared, detail := h.inspect(); prepared {
		t.Errorf("after the drain the job still has prepared transactions %s", detail)
	}
	if s.inTxn+s.midCheckpoint == 0 {
		t.Errorf("no random kill landed inside a checkpoint or left a prepared transaction (logs in %s)", h.logDir)
	}
	h.requireInTxn()
}
