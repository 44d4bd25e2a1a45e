package writertest_test

import (
	"context"
	"testing"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
	"github.com/microbatch/microbatch/writers/writertest"
)

// The two-phase writers of checkpoint mode on PostgreSQL: sqlsink.PG2PC
// (PREPARE TRANSACTION) and sqlsink.WAL, each test in a database of its
// own (FreshPostgresDatabase), rows into mb_totals and the position into
// writertest_positions as for XA.

func TestConformancePG2PC(t *testing.T) {
	t.Parallel()
	writertest.Run(t, func(t *testing.T) writertest.Subject {
		sink := sinktest.OpenSQL(t, testutil.FreshPostgresDatabase(t, needServer(t, testutil.EnvPostgres)))
		job := uniqueName(t)
		createPositionsPostgres(t, sink)
		// Rolls back what a failed test left prepared, which would also
		// keep its database from being dropped.
		t.Cleanup(func() {
			x, err := sqlsink.NewPG2PC(sink, job, 0)
			if err == nil {
				err = x.Recover(context.Background(), nil)
				x.Close()
			}
			if err != nil {
				t.Errorf("rolling back what the test left prepared: %v", err)
			}
		})
		return &twoPhaseSubject{
			caps: writertest.Capabilities{
				TwoPhase: true,
				// A committed transaction's commit is recorded in
				// mb_prepared_txns, so committing it again is success.
				Replay: writertest.ReplayIgnored,
				// A prepared transaction belongs to no session: a newer
				// writer's Recover rolls back the older one's, whose
				// Commit then finds it gone and not recorded as
				// committed (ErrTxnLost).
				Fencing:         writertest.FencedInFlightByOpen,
				FencedErr:       writers.ErrTxnLost,
				NoFencingReason: "a transaction the older writer begins after the newer writer's Recover is prepared and committed like any other: there is no epoch in the database to check it against; in checkpoint mode the checkpoint decides which transactions commit, and a zombie's are never listed in a newer run's checkpoints",
			},
			open: func(context.Context) (twoPhaseWriter, error) {
				x, err := sqlsink.NewPG2PC(sink, job, 0)
				return &pg2pcWriter{x, job}, err
			},
			read: func(ctx context.Context) (writertest.State, error) { return readSQLWithPosition(ctx, sink, job) },
		}
	})
}

func TestConformanceWALPostgres(t *testing.T) {
	t.Parallel()
	writertest.Run(t, func(t *testing.T) writertest.Subject {
		sink := sinktest.OpenSQL(t, testutil.FreshPostgresDatabase(t, needServer(t, testutil.EnvPostgres)))
		job := uniqueName(t)
		createPositionsPostgres(t, sink)
		return &twoPhaseSubject{
			caps: writertest.Capabilities{
				TwoPhase:  true,
				Replay:    writertest.ReplayIgnored,
				Fencing:   writertest.FencedByNewerCommit,
				FencedErr: writers.ErrTxnLost,
			},
			open: func(context.Context) (twoPhaseWriter, error) {
				return &walWriter{sqlsink.NewWAL(sink, job, 0), job}, nil
			},
			read: func(ctx context.Context) (writertest.State, error) { return readSQLWithPosition(ctx, sink, job) },
		}
	})
}

func createPositionsPostgres(t *testing.T, sink *sqlsink.Writer) {
	t.Helper()
	if _, err := sink.DB().ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS writertest_positions (
  job VARCHAR(128) COLLATE "C" NOT NULL PRIMARY KEY,
  position VARCHAR(64) NOT NULL
)`); err != nil {
		t.Fatal(err)
	}
}

type pg2pcWriter struct {
	*sqlsink.PG2PC
	job string
}

func (x *pg2pcWriter) write(ctx context.Context, b writertest.Batch) error {
	if err := x.Upsert(ctx, writers.Totals, totalsRows(x.job, b.Rows)); err != nil {
		return err
	}
	return x.Upsert(ctx, positions, [][]any{{x.job, b.To}})
}
