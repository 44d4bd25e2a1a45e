package sqlsink

import (
	"testing"

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
