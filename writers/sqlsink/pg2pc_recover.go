package sqlsink

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// createTable creates PreparedTable once. Two sessions creating it at
// once may see the other's table (42P07) or type (23505) appear under
// them: it exists then, which is what was wanted.
func (x *PG2PC) createTable(ctx context.Context) error {
	if x.table {
		return nil
	}
	if _, err := x.w.db.ExecContext(ctx, pgPreparedDDL); err != nil {
		if c := pgCode(err); c != "42P07" && c != "23505" {
			return fmt.Errorf("creating %s in %s: %w", PreparedTable, x.w, err)
		}
	}
	x.table = true
	return nil
}

// preparedGIDs lists the gids of the prepared transactions of this
// database (pg_prepared_xacts shows every user's; a user may finish only
// its own, or any as a superuser).
func (x *PG2PC) preparedGIDs(ctx context.Context) ([]string, error) {
	rows, err := x.w.db.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err != nil {
		return nil, fmt.Errorf("listing prepared transactions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var gid string
		if err := rows.Scan(&gid); err != nil {
			return nil, fmt.Errorf("listing prepared transactions: %w", err)
		}
		out = append(out, gid)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing prepared transactions: %w", err)
	}
	return out, nil
}

// prepared says whether pg_prepared_xacts lists gid in this database.
func (x *PG2PC) prepared(ctx context.Context, gid string) (bool, error) {
	var n int
	err := x.w.db.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database() AND gid = ?", gid).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("looking up prepared transaction %s: %w", gid, err)
	}
	return n > 0, nil
}

// ours returns the txn of a listed gid that belongs to this job and
// subtask: mb-<subtask>-<txn>-<job>, exactly as gid makes it.
func (x *PG2PC) ours(gid string) (int64, bool) {
	rest, ok := strings.CutPrefix(gid, "mb-")
	if !ok {
		return 0, false
	}
	sub, rest, ok1 := strings.Cut(rest, "-")
	num, job, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 || job != x.job {
		return 0, false
	}
	s, err1 := strconv.Atoi(sub)
	txn, err2 := strconv.ParseInt(num, 10, 64)
	if err1 != nil || err2 != nil || s != x.subtask || txn < 0 || x.gid(txn) != gid {
		return 0, false
	}
	return txn, true
}

// Recover commits the transactions in keep and rolls back every other
// prepared transaction of this job and subtask: its own (open or prepared
// in this writer) and those pg_prepared_xacts lists in this database. A
// kept transaction that the server no longer has must have been committed
// before (PreparedTable says so), or Recover returns ErrTxnLost.
// Transactions of other jobs and subtasks are left alone. On a retryable
// error, call it again.
func (x *PG2PC) Recover(ctx context.Context, keep []writers.Pending) error {
	if x.closed {
		return errPG2PCClosed
	}
	fail := func(err error) error { return fmt.Errorf("recovering %s: %w", x, err) }
	kept := make(map[int64]bool, len(keep))
	for _, p := range keep {
		if err := x.check(p); err != nil {
			return fail(err)
		}
		kept[p.Txn] = true
	}
	if err := x.createTable(ctx); err != nil {
		return fail(err)
	}
	x.abortOpen(ctx)
	for _, p := range keep {
		if err := x.finish(ctx, p.Txn, true); err != nil {
			return fail(err)
		}
	}
	for i := range x.slots {
		if s := &x.slots[i]; s.state == xaPrepared {
			if err := x.finish(ctx, s.txn, false); err != nil {
				return fail(err)
			}
		}
	}
	gids, err := x.preparedGIDs(ctx)
	if err != nil {
		return fail(err)
	}
	for _, gid := range gids {
		if txn, ok := x.ours(gid); ok && !kept[txn] {
			if err := x.finish(ctx, txn, false); err != nil {
				return fail(err)
			}
		}
	}
	return nil
}

// MaxPreparedTransactions reads the server's max_prepared_transactions: 0
// (PostgreSQL's default) means PREPARE TRANSACTION fails, and PG2PC can't
// work (CheckMaxPrepared).
func (w *Writer) MaxPreparedTransactions(ctx context.Context) (int, error) {
	if w.dialect != offsets.Postgres {
		return 0, fmt.Errorf("writers: %s is not PostgreSQL", w)
	}
	var s string
	if err := w.db.QueryRowContext(ctx, "SHOW max_prepared_transactions").Scan(&s); err != nil {
		return 0, fmt.Errorf("reading max_prepared_transactions of %s: %w", w, err)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("reading max_prepared_transactions of %s: %q is not a number", w, s)
	}
	return n, nil
}

// CheckMaxPrepared refuses a server whose max_prepared_transactions (n)
// leaves PG2PC no room: it holds up to two prepared transactions per sink
// subtask, so a server allowing none (PostgreSQL's default) fails every
// PREPARE TRANSACTION. The error wraps ErrNoPreparedTransactions.
func CheckMaxPrepared(n int, server string) error {
	if n > 0 {
		return nil
	}
	return fmt.Errorf("%w: %s has max_prepared_transactions = %d: set max_prepared_transactions in postgresql.conf to at least 2 per sink subtask of every checkpoint job on it (e.g. 64) and restart the server, or use --sink-mode wal",
		ErrNoPreparedTransactions, server, n)
}
