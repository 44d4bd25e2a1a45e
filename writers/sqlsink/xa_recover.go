package sqlsink

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/microbatch/microbatch/writers"
)

// createTable creates XATable once.
func (x *XA) createTable(ctx context.Context) error {
	if x.table {
		return nil
	}
	if _, err := x.w.db.ExecContext(ctx, xaDDL); err != nil {
		return fmt.Errorf("creating %s in %s: %w", XATable, x.w, err)
	}
	x.table = true
	return nil
}

// migrateTable gives an XATable made by an older version, which took the
// server's default collation, the binary one of xaDDL. Its columns were
// binary or integers already, so nothing compared differently: the table's
// default is what a column added later gets. The ALTER needs the table to
// itself, and a prepared branch that wrote its row holds it until that
// branch is finished — one of another subtask or job possibly only by its
// own recovery, after this one. So it runs at the end of Recover, when
// this writer's branches are finished, waits at most xaMigrateLockWait,
// and leaves a busy table to a later Recover rather than stop this one
// (which would keep the other branch's recovery from ever running).
func (x *XA) migrateTable(ctx context.Context) error {
	var collation string
	err := x.w.db.QueryRowContext(ctx, `SELECT TABLE_COLLATION FROM information_schema.TABLES
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, XATable).Scan(&collation)
	if err != nil {
		return fmt.Errorf("reading the collation of %s: %w", XATable, err)
	}
	if collation == xaCollation {
		return nil
	}
	// On a connection of its own, so that the bound stays with the ALTER.
	conn, err := x.w.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", xaMigrateLockWait)); err != nil {
		return err
	}
	defer func() { // the pool keeps the connection: give it back as it was
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION lock_wait_timeout = DEFAULT")
	}()
	_, err = conn.ExecContext(ctx, "ALTER TABLE "+XATable+" CONVERT TO CHARACTER SET utf8mb4 COLLATE "+xaCollation)
	if mysqlErrNo(err) == mysqlLockWaitTimeout { // also a metadata lock's
		return nil // another branch holds the table: a later Recover
	}
	if err != nil {
		return fmt.Errorf("giving %s the collation %s (once, with the ALTER privilege): %w", XATable, xaCollation, err)
	}
	return nil
}

// xaMigrateLockWait bounds, in seconds, how long migrateTable waits for
// the table.
const xaMigrateLockWait = 2

// xaRecovered is one row of XA RECOVER.
type xaRecovered struct {
	formatID int64
	xaXID
}

// recovered lists the server's prepared transactions (of every session and
// every user of the server; MySQL 8 needs XA_RECOVER_ADMIN for it).
func (x *XA) recovered(ctx context.Context) ([]xaRecovered, error) {
	rows, err := x.w.db.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, fmt.Errorf("listing prepared XA transactions: %w", err)
	}
	defer rows.Close()
	var out []xaRecovered
	for rows.Next() {
		var format, glen, blen int64
		var data []byte
		if err := rows.Scan(&format, &glen, &blen, &data); err != nil {
			return nil, fmt.Errorf("listing prepared XA transactions: %w", err)
		}
		if glen < 0 || blen < 0 || glen+blen != int64(len(data)) {
			continue // not an xid this package could have made
		}
		out = append(out, xaRecovered{formatID: format, xaXID: xaXID{gtrid: string(data[:glen]), bqual: string(data[glen:])}})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing prepared XA transactions: %w", err)
	}
	return out, nil
}

// prepared says whether XA RECOVER lists id.
func (x *XA) prepared(ctx context.Context, id xaXID) (bool, error) {
	list, err := x.recovered(ctx)
	if err != nil {
		return false, err
	}
	for _, r := range list {
		if r.formatID == xaFormatID && r.xaXID == id {
			return true, nil
		}
	}
	return false, nil
}

// ours returns the txn of a listed transaction that belongs to this job
// and subtask.
func (x *XA) ours(r xaRecovered) (int64, bool) {
	if r.formatID != xaFormatID || r.bqual != x.job {
		return 0, false
	}
	rest, ok := strings.CutPrefix(r.gtrid, "mb-")
	if !ok {
		return 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return 0, false
	}
	txn, err1 := strconv.ParseInt(rest[:i], 10, 64)
	sub, err2 := strconv.Atoi(rest[i+1:])
	if err1 != nil || err2 != nil || sub != x.subtask || txn < 0 || x.xid(txn) != r.xaXID {
		return 0, false
	}
	return txn, true
}

// Recover commits the transactions in keep and rolls back every other
// prepared transaction of this job and subtask: its own (open or prepared
// in this writer) and those XA RECOVER lists. A kept transaction that the
// server no longer has must have been committed before (XATable says so),
// or Recover returns ErrTxnLost. Transactions of other jobs and subtasks
// are left alone. On a retryable error, call it again.
func (x *XA) Recover(ctx context.Context, keep []writers.Pending) error {
	if x.closed {
		return errXAClosed
	}
	fail := func(err error) error { return fmt.Errorf("recovering %s: %w", x, err) }
	kept := make(map[int64]bool, len(keep))
	for _, p := range keep {
		if _, err := x.pendingSlot(p); err != nil {
			return fail(err)
		}
		kept[p.Txn] = true
	}
	if err := x.createTable(ctx); err != nil {
		return fail(err)
	}
	x.abortOpen(ctx)
	for _, p := range keep {
		s, _ := x.pendingSlot(p)
		if err := x.finish(ctx, s, p.Txn, true); err != nil {
			return fail(err)
		}
	}
	for i := range x.slots {
		if s := &x.slots[i]; s.state == xaPrepared {
			if err := x.finish(ctx, s, s.txn, false); err != nil {
				return fail(err)
			}
		}
	}
	list, err := x.recovered(ctx)
	if err != nil {
		return fail(err)
	}
	for _, r := range list {
		if txn, ok := x.ours(r); ok && !kept[txn] {
			if err := x.finish(ctx, nil, txn, false); err != nil {
				return fail(err)
			}
		}
	}
	if err := x.migrateTable(ctx); err != nil {
		return fail(err)
	}
	return nil
}
