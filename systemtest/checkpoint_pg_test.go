package systemtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestCheckpointCrashPG2PC: kfake in, PostgreSQL out through prepared
// transactions; random kills and every crash point (after-precommit lies
// between PREPARE TRANSACTION and COMMIT PREPARED) with the input
// flowing. Every key's total exact, and nothing of the job left prepared.
func TestCheckpointCrashPG2PC(t *testing.T) {
	t.Parallel()
	testCheckpointCrashPrepared(t, freshPostgresForCheckpoint(t), UniqueName(t, "ckpg"), pgPreparedInspect)
}

// TestCheckpointCrashWALPostgres: the write-ahead sink (--sink-mode wal)
// into PostgreSQL; a few kills and every crash point. Every key's total
// exact.
func TestCheckpointCrashWALPostgres(t *testing.T) {
	t.Parallel()
	testCheckpointCrashWAL(t, freshPostgresForCheckpoint(t))
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
