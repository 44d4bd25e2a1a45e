package sqlsink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/writers"
)

// The PG2PC cases run against the real PostgreSQL server (skipped without
// MICROBATCH_TEST_POSTGRES), each in a database of its own, and roll back
// whatever they leave prepared (a database with prepared transactions in
// it can't be dropped).

// pgJob is a job name no other test or run uses: gids are unique across
// the server, not per database.
func pgJob(t *testing.T, base string) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base + "-" + hex.EncodeToString(b)
}

// openPG2PC opens subtask of job on w, rolling back what it left prepared
// when the test ends.
func openPG2PC(t *testing.T, w *Writer, job string, subtask int) *PG2PC {
	t.Helper()
	x, err := NewPG2PC(w, job, subtask)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		x.Close()
		y, err := NewPG2PC(w, job, subtask)
		if err == nil {
			err = y.Recover(context.Background(), nil)
		}
		if err != nil {
			t.Errorf("rolling back what %s left prepared: %v", job, err)
		}
	})
	return x
}

// pgPrepare begins txn, adds n to key k of job and prepares it.
func pgPrepare(t *testing.T, x *PG2PC, txn int64, k string, n int64) writers.Pending {
	t.Helper()
	twoPhaseOK(t, "Begin", x.Begin(t.Context(), txn))
	twoPhaseOK(t, "Upsert", x.Upsert(t.Context(), writers.Totals, [][]any{{x.job, k, n, n}}))
	p, err := x.PreCommit(t.Context())
	twoPhaseOK(t, "PreCommit", err)
	return p
}

func pgTotal(t *testing.T, w *Writer, job, k string) int64 {
	t.Helper()
	var n int64
	err := w.db.QueryRowContext(t.Context(), "SELECT COALESCE(SUM(events), 0) FROM mb_totals WHERE job = ? AND k = ?", job, []byte(k)).Scan(&n)
	twoPhaseOK(t, "reading mb_totals", err)
	return n
}

func pgListed(t *testing.T, x *PG2PC, gid string) bool {
	t.Helper()
	held, err := x.prepared(t.Context(), gid)
	twoPhaseOK(t, "reading pg_prepared_xacts", err)
	return held
}

// A commit whose reply was lost: the transaction was committed (here by
// another session, as the server would finish it), and the retry finds the
// gid gone. It is settled exactly: committed if mb_prepared_txns says so,
// else ErrTxnLost; never committed twice.
func TestPG2PCLostCommitReplySettled(t *testing.T) {
	w := openPG(t, pgDSN(t))
	x := openPG2PC(t, w, pgJob(t, "pg2pc-lost"), 0)

	p := pgPrepare(t, x, 1, "a", 5)
	if !pgListed(t, x, p.ID) {
		t.Fatalf("pg_prepared_xacts does not list %s after PreCommit", p.ID)
	}
	if got := pgTotal(t, w, x.job, "a"); got != 0 {
		t.Fatalf("a prepared transaction is visible: total %d", got)
	}
	if _, err := w.db.ExecContext(t.Context(), "COMMIT PREPARED "+quoteGID(p.ID)); err != nil {
		t.Fatal(err)
	}
	twoPhaseOK(t, "Commit of a transaction committed before (lost reply)", x.Commit(t.Context(), p))
	twoPhaseOK(t, "Commit again", x.Commit(t.Context(), p))
	if got := pgTotal(t, w, x.job, "a"); got != 5 {
		t.Errorf("total %d after the settled commit, want 5", got)
	}

	// Rolled back behind the writer's back: Commit says lost, Abort is fine.
	q := pgPrepare(t, x, 2, "a", 7)
	if _, err := w.db.ExecContext(t.Context(), "ROLLBACK PREPARED "+quoteGID(q.ID)); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(t.Context(), q); !errors.Is(err, writers.ErrTxnLost) {
		t.Errorf("Commit of a rolled-back transaction: %v, want ErrTxnLost", err)
	}
	twoPhaseOK(t, "Abort of a rolled-back transaction", x.Abort(t.Context(), q))
	if got := pgTotal(t, w, x.job, "a"); got != 5 {
		t.Errorf("total %d, want 5", got)
	}
}

// Recover after a crash: it commits the kept transactions (one from the
// dead writer, one committed already), rolls back this job and subtask's
// others, and leaves another job's and another subtask's alone, though
// their gids start alike.
func TestPG2PCRecover(t *testing.T) {
	w := openPG(t, pgDSN(t))
	job := pgJob(t, "pg2pc-rec")
	dead := openPG2PC(t, w, job, 0)
	done := pgPrepare(t, dead, 1, "k", 1)
	twoPhaseOK(t, "Commit", dead.Commit(t.Context(), done))
	keep := pgPrepare(t, dead, 2, "k", 10)
	drop := pgPrepare(t, dead, 3, "d", 100) // another key: keep holds k's row lock
	dead.Close()                            // the process dies: its transactions stay prepared

	other := openPG2PC(t, w, job+"-1", 0) // gid mb-0-<txn>-<job>-1
	otherP := pgPrepare(t, other, 4, "o", 1)
	sub1 := openPG2PC(t, w, job, 1)
	sub1P := pgPrepare(t, sub1, 4, "s", 1)

	x := openPG2PC(t, w, job, 0)
	twoPhaseOK(t, "Recover", x.Recover(t.Context(), []writers.Pending{done, keep}))
	if k, d := pgTotal(t, w, x.job, "k"), pgTotal(t, w, x.job, "d"); k != 11 || d != 0 {
		t.Errorf("totals k %d, d %d after Recover, want 11 (1 committed before, 10 kept) and 0 (rolled back)", k, d)
	}
	if pgListed(t, x, keep.ID) || pgListed(t, x, drop.ID) {
		t.Errorf("Recover left this subtask's transactions prepared")
	}
	if !pgListed(t, x, otherP.ID) || !pgListed(t, x, sub1P.ID) {
		t.Fatalf("Recover finished another job's or another subtask's transaction")
	}
	twoPhaseOK(t, "Commit of the other job's", other.Commit(t.Context(), otherP))
	twoPhaseOK(t, "Commit of the other subtask's", sub1.Commit(t.Context(), sub1P))
	if err := x.Commit(t.Context(), drop); !errors.Is(err, writers.ErrTxnLost) {
		t.Errorf("Commit of the rolled-back transaction: %v, want ErrTxnLost", err)
	}

	// The connection is free after PREPARE: the writer goes on.
	p := pgPrepare(t, x, 5, "k", 1000)
	twoPhaseOK(t, "Commit", x.Commit(t.Context(), p))
	if got := pgTotal(t, w, x.job, "k"); got != 1011 {
		t.Errorf("total %d, want 1011", got)
	}
}

// A server that allows no prepared transactions is refused with the
// setting to change; the test server allows some.
func TestPG2PCMaxPreparedTransactions(t *testing.T) {
	err := CheckMaxPrepared(0, "postgres://mb@db:5432/x")
	if !errors.Is(err, ErrNoPreparedTransactions) || !strings.Contains(err.Error(), "max_prepared_transactions") {
		t.Errorf("CheckMaxPrepared(0) = %v, want ErrNoPreparedTransactions naming max_prepared_transactions", err)
	}
	if err := CheckMaxPrepared(64, "x"); err != nil {
		t.Errorf("CheckMaxPrepared(64) = %v", err)
	}
	w := openPG(t, pgDSN(t))
	n, err := w.MaxPreparedTransactions(t.Context())
	twoPhaseOK(t, "MaxPreparedTransactions", err)
	if n <= 0 {
		t.Errorf("the test server's max_prepared_transactions is %d, want > 0", n)
	}
}

// The gids carry the job: a job whose name holds a quote can't be one.
func TestNewPG2PCRefuses(t *testing.T) {
	w := openPG(t, pgDSN(t))
	for _, job := range []string{"", "it's", strings.Repeat("j", pgMaxJobBytes+1)} {
		if _, err := NewPG2PC(w, job, 0); err == nil {
			t.Errorf("NewPG2PC(%q) = nil error", job)
		}
	}
	if _, err := NewPG2PC(openMySQLOrNil(t), "j", 0); err == nil {
		t.Errorf("NewPG2PC of a non-PostgreSQL sink = nil error")
	}
}

// openMySQLOrNil is a SQLite sink (any sink that is not PostgreSQL).
func openMySQLOrNil(t *testing.T) *Writer {
	t.Helper()
	return openSink(t, "sqlite://"+t.TempDir()+"/s.db")
}
