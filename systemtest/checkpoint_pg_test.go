package systemtest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestCheckpointCrashPG2PC: kfake in, PostgreSQL out through prepared
// transactions; random kills and every crash point (after-precommit lies
// between PREPARE TRANSACTION and COMMIT PREPARED) with the input
// flowing. Every key's total exact, and nothing of the job left prepared.
func TestCheckpointCrashPG2PC(t *testing.T) {
	t.Parallel()
	dsn := freshPostgresForCheckpoint(t)
	b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	h := newCkptHarness(t, b.Addr, UniqueName(t, "ckpg"), dsn)
	w := sinktest.OpenSQL(t, dsn)
	h.inspect = pgPreparedInspect(t, w, h.job)
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

// TestCheckpointCrashWALPostgres: the write-ahead sink (--sink-mode wal)
// into PostgreSQL; a few kills and every crash point. Every key's total
// exact.
func TestCheckpointCrashWALPostgres(t *testing.T) {
	t.Parallel()
	dsn := freshPostgresForCheckpoint(t)
	b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	h := newCkptHarness(t, b.Addr, UniqueName(t, "ckpt-job"), dsn, "--sink-mode", string(strategies.SinkModeWAL))
	w := sinktest.OpenSQL(t, dsn)
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

// freshPostgresForCheckpoint is a database of its own on the test server.
// Whatever a failed test leaves prepared in it is rolled back before it is
// dropped: a prepared transaction keeps a database from being dropped and
// takes one of the server's max_prepared_transactions.
func freshPostgresForCheckpoint(t *testing.T) string {
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w, err := sqlsink.Open(ctx, dsn)
		if err != nil {
			t.Errorf("rolling back what the test left prepared: %v", err)
			return
		}
		defer w.Close()
		gids, err := preparedGIDs(ctx, w)
		for _, gid := range gids {
			if err == nil {
				_, err = w.DB().ExecContext(ctx, "ROLLBACK PREPARED '"+strings.ReplaceAll(gid, "'", "''")+"'")
			}
		}
		if err != nil {
			t.Errorf("rolling back what the test left prepared: %v", err)
		}
	})
	return dsn
}

func preparedGIDs(ctx context.Context, w *sqlsink.Writer) ([]string, error) {
	rows, err := w.DB().QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gids []string
	for rows.Next() {
		var gid string
		if err := rows.Scan(&gid); err != nil {
			return nil, err
		}
		gids = append(gids, gid)
	}
	return gids, rows.Err()
}

// pgPreparedInspect: the job's prepared transactions (gids
// mb-<subtask>-<txn>-<job>) in pg_prepared_xacts.
func pgPreparedInspect(t *testing.T, w *sqlsink.Writer, job string) func() (bool, string) {
	return func() (bool, string) {
		gids, err := preparedGIDs(t.Context(), w)
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, gid := range gids {
			if strings.HasPrefix(gid, "mb-") && strings.HasSuffix(gid, "-"+job) {
				mine = append(mine, gid)
			}
		}
		slices.Sort(mine)
		return len(mine) > 0, fmt.Sprintf("(pg_prepared_xacts: %d prepared %v)", len(mine), mine)
	}
}
