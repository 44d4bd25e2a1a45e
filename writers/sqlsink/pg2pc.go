package sqlsink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// PG2PC is the PostgreSQL sink of checkpoint mode: rows and dead letters
// go into a transaction (BEGIN), PreCommit prepares it (PREPARE
// TRANSACTION 'gid': durable, invisible, holding its row locks) and
// Commit makes it visible (COMMIT PREPARED 'gid'). The gid is
//
//	mb-<subtask>-<txn>-<job>
//
// so the server's list of prepared transactions (pg_prepared_xacts, in
// this database) says which ones are this job's and this subtask's, and
// two jobs never finish each other's.
//
// Unlike a MySQL/MariaDB XA transaction, a prepared PostgreSQL
// transaction belongs to no session: PREPARE TRANSACTION detaches it, the
// connection goes back to the pool, and any session of the same user and
// database may commit or roll it back at once (no superuser needed). A
// gid the server does not have answers 42704 ("does not exist"), whether
// it was committed or rolled back; a gid another session is finishing
// right now answers 55000 ("is busy").
//
// Every transaction also records itself in its slot's row of
// PreparedTable (slot txn % 3) at PreCommit. After a commit whose reply
// was lost, the retry finds the gid gone: it is then finished for sure
// (pg_prepared_xacts does not list it), and that row tells whether it was
// committed. Begin refuses a slot whose transaction is unfinished, so at
// most three transactions of a writer are unfinished at once and no two
// of them write the same row.
//
// Prepared transactions hold their row locks until Commit (as XA's do):
// commit txn n before txn n+1 writes keys n wrote.
//
// The server must allow prepared transactions: max_prepared_transactions
// is 0 by default, and PREPARE TRANSACTION then fails. CheckMaxPrepared
// says so at start.
//
// Like every TwoPhase writer, a PG2PC is used by one goroutine.
type PG2PC struct {
	w       *Writer
	job     string
	subtask int

	slots  [pgSlots]pgSlot
	conn   *sql.Conn // the open transaction's connection
	open   *pgSlot   // the slot of the open transaction, if any
	table  bool      // PreparedTable exists
	closed bool
}

// PreparedTable holds, per job, subtask and slot, the last prepared
// transaction committed in that slot (see PG2PC).
const PreparedTable = "mb_prepared_txns"

const pgPreparedDDL = `CREATE TABLE IF NOT EXISTS mb_prepared_txns (
  job VARCHAR(128) COLLATE "C" NOT NULL,
  subtask INTEGER NOT NULL,
  slot INTEGER NOT NULL,
  txn BIGINT NOT NULL,
  PRIMARY KEY (job, subtask, slot)
)`

const pgMarkSQL = `INSERT INTO mb_prepared_txns (job, subtask, slot, txn) VALUES (?, ?, ?, ?)
  ON CONFLICT (job, subtask, slot) DO UPDATE SET txn = excluded.txn`

var _ writers.TwoPhase = (*PG2PC)(nil)

const (
	// pgSlots is how many transactions of one writer may be unfinished at
	// once: one open, one or two prepared.
	pgSlots = 3
	// pgMaxJobBytes bounds the job name: a gid holds at most 199 bytes.
	pgMaxJobBytes = 128
	// pgBusyWait is how long Commit and Abort wait for another session
	// that is finishing the same transaction (a commit of ours whose
	// reply was lost, still running on the server) before saying
	// ErrPreparedBusy.
	pgBusyWait = 2 * time.Second
)

// PostgreSQL SQLSTATEs the PG2PC writer tells apart.
const (
	pgUndefinedObject  = "42704" // COMMIT/ROLLBACK PREPARED: no such gid
	pgNotInPrereqState = "55000" // the gid is busy; prepared transactions disabled
	pgDuplicateObject  = "42710" // PREPARE TRANSACTION: the gid is in use
)

type pgSlot struct {
	state xaState
	txn   int64
}

// NewPG2PC returns the two-phase writer of one sink subtask of job. w must
// be a PostgreSQL sink. Nothing is opened until Recover or Begin. Close
// the PG2PC before w.
func NewPG2PC(w *Writer, job string, subtask int) (*PG2PC, error) {
	switch {
	case w == nil:
		return nil, errors.New("writers: PG2PC needs an SQL sink")
	case w.Dialect() != offsets.Postgres:
		return nil, fmt.Errorf("writers: PG2PC needs PostgreSQL; %s is %s", w, w.Dialect())
	case job == "":
		return nil, errors.New("writers: PG2PC needs a job name")
	case len(job) > pgMaxJobBytes:
		return nil, fmt.Errorf("writers: job %q is %d bytes; a prepared transaction's gid, which holds the job name, takes at most %d", job, len(job), pgMaxJobBytes)
	case strings.ContainsAny(job, `'\`):
		return nil, fmt.Errorf("writers: job %q: a gid holds no quote or backslash", job)
	case subtask < 0:
		return nil, fmt.Errorf("writers: PG2PC subtask %d is negative", subtask)
	}
	return &PG2PC{w: w, job: job, subtask: subtask}, nil
}

// String names the sink, job and subtask.
func (x *PG2PC) String() string {
	return fmt.Sprintf("prepared transactions %s job %s subtask %d", x.w, x.job, x.subtask)
}

func (x *PG2PC) gid(txn int64) string { return fmt.Sprintf("mb-%d-%d-%s", x.subtask, txn, x.job) }

func (x *PG2PC) slot(txn int64) *pgSlot { return &x.slots[txn%pgSlots] }

// Begin opens transaction txn on a connection of the pool. Slot txn % 3
// must not hold an unfinished transaction. A connection found broken is
// replaced once: nothing was written on it yet.
func (x *PG2PC) Begin(ctx context.Context, txn int64) error {
	switch {
	case x.closed:
		return errPG2PCClosed
	case txn < 0:
		return fmt.Errorf("beginning transaction %d: negative", txn)
	case x.open != nil:
		return fmt.Errorf("beginning transaction %d: transaction %d is still open", txn, x.open.txn)
	}
	s := x.slot(txn)
	if s.state != xaIdle {
		return fmt.Errorf("beginning transaction %d: its slot still holds %s transaction %d: commit or abort it first", txn, s.state, s.txn)
	}
	if err := x.createTable(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		c, err := x.w.db.Conn(ctx)
		if err == nil {
			if _, err = c.ExecContext(ctx, "BEGIN"); err != nil {
				discardConn(c)
			} else {
				x.conn = c
				break
			}
		}
		if attempt == 0 && ctx.Err() == nil && writers.IsRetryable(err) {
			continue
		}
		return fmt.Errorf("beginning transaction %s on %s: %w", x.gid(txn), x.w, err)
	}
	s.state, s.txn = xaActive, txn
	x.open = s
	return nil
}

// Upsert writes rows (as Writer.Upsert) in the open transaction.
func (x *PG2PC) Upsert(ctx context.Context, u writers.Upsert, rows [][]any) error {
	if err := x.openTxn(); err != nil {
		return err
	}
	return x.w.upsert(ctx, x.conn, u, rows)
}

// DeadLetters inserts dls (as Writer.DeadLetters) in the open transaction.
func (x *PG2PC) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	if err := x.openTxn(); err != nil {
		return err
	}
	return x.w.deadLetters(ctx, x.conn, dls)
}

func (x *PG2PC) openTxn() error {
	if x.closed {
		return errPG2PCClosed
	}
	if x.open == nil {
		return errors.New("writers: no open transaction (call Begin)")
	}
	return nil
}

// PreCommit records the open transaction in PreparedTable and prepares it
// (PREPARE TRANSACTION); its connection goes back to the pool. On failure
// the transaction is gone: its connection is closed (which rolls back an
// open transaction) and one that may have been prepared all the same (the
// reply was lost) is rolled back, or left to Recover if that fails too.
func (x *PG2PC) PreCommit(ctx context.Context) (writers.Pending, error) {
	if err := x.openTxn(); err != nil {
		return writers.Pending{}, err
	}
	s, c := x.open, x.conn
	x.open, x.conn = nil, nil
	gid := x.gid(s.txn)
	_, err := c.ExecContext(ctx, pgMarkSQL, x.job, x.subtask, s.txn%pgSlots, s.txn)
	if err == nil {
		_, err = c.ExecContext(ctx, "PREPARE TRANSACTION "+quoteGID(gid))
	}
	if err != nil {
		discardConn(c)
		s.state = xaIdle
		code := pgCode(err)
		if code != pgDuplicateObject {
			// The session may have died after the PREPARE completed (a lost
			// reply, or an admin shutdown with its SQLSTATE): roll back
			// whatever may be prepared (nothing prepared: a no-op).
			_ = x.finish(ctx, s.txn, false)
		}
		switch code {
		case pgDuplicateObject:
			// Not ours to roll back: the checkpoint may hold it.
			return writers.Pending{}, fmt.Errorf("preparing transaction %s on %s: %w (a transaction with this gid is still prepared: Recover was not called, or another writer uses the same job and subtask)", gid, x.w, err)
		case pgNotInPrereqState:
			return writers.Pending{}, fmt.Errorf("preparing transaction %s on %s: %w (is max_prepared_transactions 0?)", gid, x.w, err)
		}
		// Otherwise the server answered: it rolled the transaction back.
		return writers.Pending{}, fmt.Errorf("preparing transaction %s on %s: %w", gid, x.w, err)
	}
	_ = c.Close() // back to the pool: the prepared transaction is no longer the session's
	s.state = xaPrepared
	return writers.Pending{Sink: "pg2pc", Subtask: x.subtask, Txn: s.txn, ID: gid}, nil
}

// Commit commits the prepared transaction p (COMMIT PREPARED), prepared by
// this writer or, after a restart, by an earlier one. Committing a
// transaction the server no longer has is success if PreparedTable
// records it as committed: it was committed before (a commit whose reply
// was lost). Errors:
//   - retryable (writers.IsRetryable): the connection was lost, maybe
//     during the commit, or another session is finishing p
//     (ErrPreparedBusy); call Commit again.
//   - ErrTxnLost: the transaction was rolled back (it is gone and
//     PreparedTable does not record its commit).
//   - anything else: stop.
func (x *PG2PC) Commit(ctx context.Context, p writers.Pending) error {
	if x.closed {
		return errPG2PCClosed
	}
	if err := x.check(p); err != nil {
		return err
	}
	return x.finish(ctx, p.Txn, true)
}

// Abort rolls back the prepared transaction p (ROLLBACK PREPARED); an
// unknown one is success. For the zero Pending it abandons the open
// transaction. Errors are retryable as Commit's are.
func (x *PG2PC) Abort(ctx context.Context, p writers.Pending) error {
	if x.closed {
		return errPG2PCClosed
	}
	if p.Sink == "" && p.ID == "" {
		x.abortOpen(ctx)
		return nil
	}
	if err := x.check(p); err != nil {
		return err
	}
	return x.finish(ctx, p.Txn, false)
}

func (x *PG2PC) abortOpen(ctx context.Context) {
	if x.open == nil {
		return
	}
	if _, err := x.conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		discardConn(x.conn) // an unprepared transaction dies with its session
	} else {
		_ = x.conn.Close()
	}
	x.open.state = xaIdle
	x.open, x.conn = nil, nil
}

// check makes sure p is one of this writer's transactions.
func (x *PG2PC) check(p writers.Pending) error {
	if p.Sink != "pg2pc" || p.Subtask != x.subtask || p.Txn < 0 || p.ID != x.gid(p.Txn) {
		return fmt.Errorf("writers: %+v is not a transaction of %s", p, x)
	}
	return nil
}

// finish commits or rolls back the prepared transaction txn, on any
// connection of the pool.
func (x *PG2PC) finish(ctx context.Context, txn int64, commit bool) error {
	gid := x.gid(txn)
	verb, doing := "ROLLBACK", "rolling back"
	if commit {
		verb, doing = "COMMIT", "committing"
	}
	fail := func(err error) error { return fmt.Errorf("%s prepared transaction %s on %s: %w", doing, gid, x.w, err) }
	if s := x.slot(txn); s.txn == txn && s.state == xaPrepared {
		s.state = xaIdle // whatever happens, the slot is done with it
	}
	stmt := verb + " PREPARED " + quoteGID(gid)
	deadline := time.Now().Add(pgBusyWait)
	for {
		_, err := x.w.db.ExecContext(ctx, stmt)
		switch pgCode(err) {
		case "":
			if err == nil {
				return nil
			}
			// The connection was lost, maybe after the server finished
			// the command: the retry settles it.
			return fmt.Errorf("%s prepared transaction %s on %s (outcome unknown: call again): %w", doing, gid, x.w, err)
		case pgUndefinedObject:
			return x.settle(ctx, txn, commit, fail)
		case pgNotInPrereqState:
			// Another session is finishing it (ours, whose reply was
			// lost, still at work on the server).
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("%w: %w", ErrPreparedBusy, err))
			}
		default:
			return fail(err)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fail(ctx.Err())
		case <-t.C:
		}
	}
}

// settle decides the outcome of txn, whose gid the server answered it does
// not have: finished, unless pg_prepared_xacts lists it after all (it was
// prepared since, by a writer of the same job and subtask: not ours to
// decide). A commit is done if PreparedTable records txn as its slot's
// last commit, and lost otherwise.
func (x *PG2PC) settle(ctx context.Context, txn int64, commit bool, fail func(error) error) error {
	held, err := x.prepared(ctx, x.gid(txn))
	if err != nil {
		return fail(err)
	}
	if held {
		return fail(errors.New("the server said it does not exist, yet pg_prepared_xacts lists it: another writer of this job and subtask prepared it since"))
	}
	if !commit {
		return nil
	}
	done, err := x.committed(ctx, txn)
	if err != nil {
		return fail(err)
	}
	if !done {
		return fail(fmt.Errorf("%w: the server no longer has it and %s says it was not committed", writers.ErrTxnLost, PreparedTable))
	}
	return nil
}

// committed says whether PreparedTable records txn as its slot's last
// commit.
func (x *PG2PC) committed(ctx context.Context, txn int64) (bool, error) {
	return slotCommitted(ctx, x.w, PreparedTable, x.job, x.subtask, txn%pgSlots, txn)
}

// Close rolls back the open transaction (by closing its connection) and
// keeps prepared ones for Recover. It does not close w. Safe to call
// twice.
func (x *PG2PC) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	if x.conn != nil {
		discardConn(x.conn)
	}
	x.open, x.conn = nil, nil
	for i := range x.slots {
		x.slots[i].state = xaIdle
	}
	return nil
}

// quoteGID quotes a gid as a string literal (NewPG2PC refuses quotes and
// backslashes in the job; doubling a quote is for safety).
func quoteGID(gid string) string { return "'" + strings.ReplaceAll(gid, "'", "''") + "'" }

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
