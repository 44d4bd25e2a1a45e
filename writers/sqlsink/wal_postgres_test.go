package sqlsink

import (
	"testing"
	"time"

	"github.com/microbatch/microbatch/writers"
)

// The write-ahead sink on PostgreSQL records checkpoint ids past 2^31
// (BIGINT, not PostgreSQL's 32-bit INTEGER).
func TestWALPostgresLargeCheckpointID(t *testing.T) {
	w := openPG(t, pgDSN(t))
	l := NewWAL(w, "wal-big", 0)
	twoPhaseOK(t, "Recover", l.Recover(t.Context(), nil))
	txn := int64(1) << 40
	twoPhaseOK(t, "Begin", l.Begin(t.Context(), txn))
	twoPhaseOK(t, "Upsert", l.Upsert(t.Context(), writers.Totals, [][]any{{"wal-big", "k", int64(3), int64(3)}}))
	p, err := l.PreCommit(t.Context())
	twoPhaseOK(t, "PreCommit", err)
	twoPhaseOK(t, "Commit", l.Commit(t.Context(), p))
	twoPhaseOK(t, "Commit again", l.Commit(t.Context(), p))
	var got int64
	err = w.db.QueryRowContext(t.Context(), "SELECT events FROM mb_totals WHERE job = 'wal-big'").Scan(&got)
	twoPhaseOK(t, "reading mb_totals", err)
	if got != 3 || l.Rewrites() != 1 {
		t.Errorf("total %d, rewrites %d; want 3 and 1", got, l.Rewrites())
	}
}

// Two commits of one checkpoint at once (a zombie's and its successor's)
// apply it once: the second waits for the first's mark and then finds it.
// The first is played by hand: its rows and mark written, not committed,
// until the writer's Commit waits on its locks.
func TestWALPostgresConcurrentCommitAppliesOnce(t *testing.T) {
	w := openPG(t, pgDSN(t))
	ctx := t.Context()
	l := NewWAL(w, "wal-race", 0)
	twoPhaseOK(t, "Recover", l.Recover(ctx, nil))
	twoPhaseOK(t, "Begin", l.Begin(ctx, 5))
	twoPhaseOK(t, "Upsert", l.Upsert(ctx, writers.Totals, [][]any{{"wal-race", "k", int64(1), int64(1)}}))
	p, err := l.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit", err)

	other, err := w.db.BeginTx(ctx, nil)
	twoPhaseOK(t, "BEGIN", err)
	defer other.Rollback()
	_, err = other.ExecContext(ctx, "INSERT INTO mb_totals (job, k, events, amount) VALUES ('wal-race', ?, 1, 1)", []byte("k"))
	twoPhaseOK(t, "the other commit's rows", err)
	_, err = other.ExecContext(ctx, "INSERT INTO mb_wal_commits (job, subtask, checkpoint_id) VALUES ('wal-race', 0, 5)")
	twoPhaseOK(t, "the other commit's mark", err)

	done := make(chan error, 1)
	go func() { done <- l.Commit(ctx, p) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		err := w.db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		twoPhaseOK(t, "reading pg_stat_activity", err)
		if waiting > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Commit returned (%v) without waiting for the other commit's locks", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Commit never waited for the other commit's locks")
		}
		time.Sleep(10 * time.Millisecond)
	}
	twoPhaseOK(t, "the other commit", other.Commit())
	twoPhaseOK(t, "Commit", <-done)
	var got int64
	err = w.db.QueryRowContext(ctx, "SELECT events FROM mb_totals WHERE job = 'wal-race'").Scan(&got)
	twoPhaseOK(t, "reading mb_totals", err)
	if got != 1 || l.Rewrites() != 1 {
		t.Errorf("total %d, rewrites %d after two commits of one checkpoint; want 1 and 1 (applied once)", got, l.Rewrites())
	}
}
