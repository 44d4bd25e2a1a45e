package sqlsink

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// XA is the MySQL/MariaDB sink of checkpoint mode: rows and dead letters
// go into an XA transaction, PreCommit prepares it (XA END + XA PREPARE:
// durable, invisible, holding its row locks) and Commit makes it visible
// (XA COMMIT). The transaction's xid is
//
//	formatID xaFormatID, gtrid "mb-<txn>-<subtask>", bqual <job>
//
// so the server's own list of prepared transactions (XA RECOVER) says
// which ones are this job's and this subtask's.
//
// A MySQL/MariaDB connection holds at most one XA transaction, and after
// XA PREPARE it can start no other until that one is committed or rolled
// back. While txn n waits prepared for its checkpoint, txn n+1 is already
// open, so XA keeps one dedicated connection per slot (txn % xaSlots); the
// caller reuses a slot only after its previous transaction was committed
// or aborted. A prepared transaction outlives its connection: when the
// session ends (the client closes it or dies, or the server kills it) the
// server keeps the transaction "detached", and any connection may then
// commit or roll it back.
//
// Every transaction also records itself in its slot's row of XATable
// (PreCommit). That row is the last transaction committed in the slot, and
// it is needed because of what MariaDB 10.11 does (the tests check it):
//   - A prepared transaction that changed nothing is rolled back when its
//     session ends, so an empty checkpoint interval would be lost in a
//     crash; the row makes no transaction empty.
//   - Finishing a transaction forgets its xid: the server answers XAER_NOTA
//     ("unknown XID") for a committed and a rolled-back one alike. The row
//     tells them apart.
//   - While the session that prepared a transaction is alive, any other
//     session gets XAER_NOTA for it too, though XA RECOVER lists it. So NOTA
//     means "finished" only if XA RECOVER does not list the xid; if it does,
//     that session has not gone yet (ErrXABusy, retryable).
//
// An XA uses up to xaSlots connections of w's pool for as long as it is
// open, plus short ones for Recover and for finishing transactions whose
// own connection broke: size the pool for it (Open allows 32).
//
// Prepared transactions hold their row locks until Commit: a later
// transaction that writes the same key (e.g. the same total) waits for that
// commit (innodb_lock_wait_timeout). Commit txn n before txn n+1 writes
// keys n wrote, or write them from a goroutine that does not also have to
// deliver that commit.
//
// Like every TwoPhase writer, an XA is used by one goroutine.
type XA struct {
	w       *Writer
	job     string
	subtask int

	slots  [xaSlots]xaSlot
	open   *xaSlot // the slot whose transaction is open (XA START done), if any
	table  bool    // XATable exists
	closed bool
}

// XATable holds, per job, subtask and slot, the last XA transaction
// committed in that slot (see XA).
const XATable = "mb_xa_txns"

// xaDDL: job is VARBINARY because every VARCHAR collation ignores trailing
// spaces. commits counts the slot's committed transactions; increasing it
// makes sure every transaction changes the row. The table's collation is
// binary like every mb_ table's, so that a column added to it later can't
// compare names case-insensitively (the server's default, often
// utf8mb4_general_ci, would); migrateTable gives it to an older table.
const xaDDL = `CREATE TABLE IF NOT EXISTS mb_xa_txns (
  job VARBINARY(64) NOT NULL,
  subtask INT NOT NULL,
  slot INT NOT NULL,
  txn BIGINT NOT NULL,
  commits BIGINT NOT NULL,
  PRIMARY KEY (job, subtask, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// xaCollation is the collation xaDDL gives XATable.
const xaCollation = "utf8mb4_bin"

const xaMarkSQL = `INSERT INTO mb_xa_txns (job, subtask, slot, txn, commits) VALUES (?, ?, ?, ?, 1)
  ON DUPLICATE KEY UPDATE txn = VALUES(txn), commits = commits + 1`

var _ writers.TwoPhase = (*XA)(nil)

const (
	// xaFormatID marks the transactions of this package ("mb") among other
	// XA users of the same server.
	xaFormatID = 0x6d62
	// xaSlots is how many XA transactions one writer can have unfinished at
	// once, one per connection: one open, one or two prepared.
	xaSlots = 3
	// xaMaxIDBytes bounds gtrid and bqual, and so the job name.
	xaMaxIDBytes = 64
	// xaDetachWait is how long Commit and Abort wait for a prepared
	// transaction to be let go by a session that is going away (one of ours
	// that broke, or a dead process's) before saying ErrXABusy, and how
	// long Commit watches a transaction that seems rolled back before
	// saying ErrTxnLost (a commit of it may still be under way).
	xaDetachWait = 2 * time.Second
)

type xaState uint8

const (
	xaIdle     xaState = iota
	xaActive           // XA START done: the open transaction
	xaPrepared         // XA PREPARE done: waiting for Commit or Abort
)

func (s xaState) String() string {
	switch s {
	case xaActive:
		return "open"
	case xaPrepared:
		return "prepared"
	}
	return "idle"
}

// xaSlot is one dedicated connection and the transaction on it.
type xaSlot struct {
	conn  *sql.Conn // nil until needed, and after it broke
	state xaState
	txn   int64
}

// xaXID is a transaction id; the format id is always xaFormatID.
type xaXID struct{ gtrid, bqual string }

// sql renders the xid for XA statements, as hex literals so that no job
// name needs quoting.
func (id xaXID) sql() string {
	return fmt.Sprintf("X'%x',X'%x',%d", id.gtrid, id.bqual, xaFormatID)
}

func (id xaXID) String() string { return fmt.Sprintf("'%s','%s',%d", id.gtrid, id.bqual, xaFormatID) }

// NewXA returns the XA writer of one sink subtask of job. w must be a
// MySQL/MariaDB sink (SQLite has no XA). The job name is the branch
// qualifier of every xid, so at most 64 bytes. Nothing is opened until
// Recover or Begin. Close the XA before w.
func NewXA(w *Writer, job string, subtask int) (*XA, error) {
	switch {
	case w == nil:
		return nil, errors.New("writers: XA needs an SQL sink")
	case w.Dialect() != offsets.MySQL:
		return nil, fmt.Errorf("writers: XA needs MySQL or MariaDB; %s (%s) has no two-phase commit", w, w.Dialect())
	case job == "":
		return nil, errors.New("writers: XA needs a job name")
	case len(job) > xaMaxIDBytes:
		return nil, fmt.Errorf("writers: job %q is %d bytes; an XA branch qualifier, which holds the job name, takes at most %d", job, len(job), xaMaxIDBytes)
	case subtask < 0:
		return nil, fmt.Errorf("writers: XA subtask %d is negative", subtask)
	}
	return &XA{w: w, job: job, subtask: subtask}, nil
}

// String names the sink, job and subtask.
func (x *XA) String() string { return fmt.Sprintf("xa %s job %s subtask %d", x.w, x.job, x.subtask) }

func (x *XA) xid(txn int64) xaXID {
	return xaXID{gtrid: fmt.Sprintf("mb-%d-%d", txn, x.subtask), bqual: x.job}
}

func (x *XA) slot(txn int64) *xaSlot { return &x.slots[txn%xaSlots] }

// Begin opens transaction txn (XA START) on slot txn % 3, which must not
// hold an unfinished transaction. A connection found broken is replaced
// once: nothing was written on it yet.
func (x *XA) Begin(ctx context.Context, txn int64) error {
	if x.closed {
		return errXAClosed
	}
	if txn < 0 {
		return fmt.Errorf("beginning XA transaction %d: negative", txn)
	}
	if x.open != nil {
		return fmt.Errorf("beginning XA transaction %d: transaction %d is still open", txn, x.open.txn)
	}
	s := x.slot(txn)
	if s.state != xaIdle {
		return fmt.Errorf("beginning XA transaction %d: its slot still holds %s transaction %d: commit or abort it first", txn, s.state, s.txn)
	}
	if err := x.createTable(ctx); err != nil {
		return err
	}
	id := x.xid(txn)
	for attempt := 0; ; attempt++ {
		err := x.connect(ctx, s)
		if err == nil {
			_, err = s.conn.ExecContext(ctx, "XA START "+id.sql())
		}
		if err == nil {
			break
		}
		if mysqlErrNo(err) == 0 {
			x.drop(s)
			if attempt == 0 && ctx.Err() == nil {
				continue
			}
		}
		if mysqlErrNo(err) == xaerDUPID {
			return fmt.Errorf("beginning XA transaction %s on %s: %w (a transaction with this id is still prepared: Recover was not called, or another writer uses the same job and subtask)", id, x.w, err)
		}
		return fmt.Errorf("beginning XA transaction %s on %s: %w", id, x.w, err)
	}
	s.state, s.txn = xaActive, txn
	x.open = s
	return nil
}

// connect gives s a connection if it has none.
func (x *XA) connect(ctx context.Context, s *xaSlot) error {
	if s.conn != nil {
		return nil
	}
	c, err := x.w.db.Conn(ctx)
	if err != nil {
		return err
	}
	s.conn = c
	return nil
}

// drop closes s's connection instead of returning it to the pool, where an
// XA transaction left on it would capture other users' statements. The
// server rolls back an open transaction of a closed connection and keeps a
// prepared one (detached).
func (x *XA) drop(s *xaSlot) {
	if s.conn != nil {
		discardConn(s.conn)
		s.conn = nil
	}
}

func discardConn(c *sql.Conn) {
	// A Raw callback returning driver.ErrBadConn makes database/sql close
	// the driver connection rather than pool it.
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}

// Upsert writes rows (as Writer.Upsert) in the open transaction.
func (x *XA) Upsert(ctx context.Context, u writers.Upsert, rows [][]any) error {
	s, err := x.openSlot()
	if err != nil {
		return err
	}
	return x.w.upsert(ctx, s.conn, u, rows)
}

// DeadLetters inserts dls (as Writer.DeadLetters) in the open transaction.
func (x *XA) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	s, err := x.openSlot()
	if err != nil {
		return err
	}
	return x.w.deadLetters(ctx, s.conn, dls)
}

func (x *XA) openSlot() (*xaSlot, error) {
	if x.closed {
		return nil, errXAClosed
	}
	if x.open == nil {
		return nil, errors.New("writers: no open XA transaction (call Begin)")
	}
	return x.open, nil
}

// PreCommit prepares the open transaction (XA END, XA PREPARE). On failure
// the transaction is gone: its connection is closed and a transaction that
// may have been prepared all the same (the reply was lost) is rolled back,
// or left to Recover if that fails too.
func (x *XA) PreCommit(ctx context.Context) (writers.Pending, error) {
	s, err := x.openSlot()
	if err != nil {
		return writers.Pending{}, err
	}
	x.open = nil
	id := x.xid(s.txn)
	_, err = s.conn.ExecContext(ctx, xaMarkSQL, x.job, x.subtask, s.txn%xaSlots, s.txn)
	if err == nil {
		_, err = s.conn.ExecContext(ctx, "XA END "+id.sql())
	}
	if err == nil {
		_, err = s.conn.ExecContext(ctx, "XA PREPARE "+id.sql())
	}
	if err != nil {
		x.drop(s)
		s.state = xaIdle
		_ = x.finish(ctx, nil, s.txn, false)
		return writers.Pending{}, fmt.Errorf("pre-committing XA transaction %s on %s: %w", id, x.w, err)
	}
	s.state = xaPrepared
	return writers.Pending{Sink: "xa", Subtask: x.subtask, Txn: s.txn, ID: id.gtrid}, nil
}

// Commit commits the prepared transaction p (XA COMMIT), on the connection
// that prepared it or, if that one broke or p comes from an earlier run, on
// any other. Committing a transaction the server no longer has (and no
// session holds) is success if XATable records it as committed: it was
// committed before. Errors:
//   - retryable (writers.IsRetryable): the connection was lost, maybe during the
//     commit; call Commit again (it goes through a fresh connection). Also
//     ErrXABusy.
//   - ErrTxnLost: the transaction was rolled back (the server said so, or
//     it is gone and XATable does not record its commit).
//   - anything else: stop.
func (x *XA) Commit(ctx context.Context, p writers.Pending) error {
	if x.closed {
		return errXAClosed
	}
	s, err := x.pendingSlot(p)
	if err != nil {
		return err
	}
	return x.finish(ctx, s, p.Txn, true)
}

// Abort rolls back the prepared transaction p (XA ROLLBACK); an unknown
// one is success. For the zero Pending it abandons the open transaction
// (XA END, XA ROLLBACK, or closing its connection, which rolls it back).
// Errors are retryable as Commit's are.
func (x *XA) Abort(ctx context.Context, p writers.Pending) error {
	if x.closed {
		return errXAClosed
	}
	if p.Sink == "" && p.ID == "" {
		x.abortOpen(ctx)
		return nil
	}
	s, err := x.pendingSlot(p)
	if err != nil {
		return err
	}
	return x.finish(ctx, s, p.Txn, false)
}

func (x *XA) abortOpen(ctx context.Context) {
	s := x.open
	if s == nil {
		return
	}
	x.open = nil
	id := x.xid(s.txn)
	_, err := s.conn.ExecContext(ctx, "XA END "+id.sql())
	if err == nil {
		_, err = s.conn.ExecContext(ctx, "XA ROLLBACK "+id.sql())
	}
	if err != nil {
		// Whatever state it is in (e.g. rolled back by a deadlock, which
		// XA END reports), an unprepared transaction does not survive its
		// connection.
		x.drop(s)
	}
	s.state = xaIdle
}

// pendingSlot checks that p is one of this writer's transactions and
// finds the slot that holds it prepared, if any.
func (x *XA) pendingSlot(p writers.Pending) (*xaSlot, error) {
	if p.Sink != "xa" || p.Subtask != x.subtask || p.Txn < 0 || p.ID != x.xid(p.Txn).gtrid {
		return nil, fmt.Errorf("writers: %+v is not a transaction of %s", p, x)
	}
	if s := x.slot(p.Txn); s.state == xaPrepared && s.txn == p.Txn {
		return s, nil
	}
	return nil, nil
}

// finish commits or rolls back the prepared transaction txn: on its slot
// s's connection if it still holds it, else on any connection, waiting up
// to xaDetachWait for another session that holds it to let go.
func (x *XA) finish(ctx context.Context, s *xaSlot, txn int64, commit bool) error {
	id := x.xid(txn)
	verb, doing := "ROLLBACK", "rolling back"
	if commit {
		verb, doing = "COMMIT", "committing"
	}
	fail := func(err error) error { return fmt.Errorf("%s XA transaction %s on %s: %w", doing, id, x.w, err) }
	stmt := "XA " + verb + " " + id.sql()
	deadline := time.Now().Add(xaDetachWait)
	for {
		var err error
		if s != nil {
			_, err = s.conn.ExecContext(ctx, stmt)
			s.state = xaIdle // whatever happens, the slot is done with it
		} else {
			_, err = x.w.db.ExecContext(ctx, stmt)
		}
		switch n := mysqlErrNo(err); {
		case err == nil:
			return nil
		case isXARollback(n):
			if s != nil {
				x.drop(s) // rather than trust what state the session is left in
			}
			if commit {
				return fail(fmt.Errorf("%w: %w", writers.ErrTxnLost, err))
			}
			return nil
		case n == xaerNOTA:
			// Finished before, or held by a session that is not this one:
			// XA RECOVER and XATable tell which.
		case s != nil:
			// The connection was lost (n == 0), maybe after the server
			// finished the command, or it is in a state we did not expect.
			// Close it: a transaction still prepared is then detached, and
			// the retry goes through another connection.
			x.drop(s)
			if n == 0 {
				return fmt.Errorf("%s XA transaction %s on %s (outcome unknown: call again): %w", doing, id, x.w, err)
			}
			return fail(err)
		default:
			return fail(err)
		}
		s = nil
		held, err := x.prepared(ctx, id)
		if err != nil {
			return fail(err)
		}
		if !held {
			if !commit {
				return nil
			}
			done, err := x.committed(ctx, txn)
			if err != nil {
				return fail(err)
			}
			if done {
				return nil
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("%w: the server no longer has it and %s says it was not committed", writers.ErrTxnLost, XATable))
			}
		} else if time.Now().After(deadline) {
			return fail(ErrXABusy)
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

// committed says whether XATable records txn as its slot's last commit.
func (x *XA) committed(ctx context.Context, txn int64) (bool, error) {
	return slotCommitted(ctx, x.w, XATable, x.job, x.subtask, txn%xaSlots, txn)
}

// slotCommitted says whether table, a two-phase sink's slot markers (XA's
// or PostgreSQL's), records txn as the last commit of the subtask's slot.
// A later transaction there means the outcome can't be told: a slot is
// reused only after its transaction finished, and txn numbers only grow.
func slotCommitted(ctx context.Context, w *Writer, table, job string, subtask int, slot, txn int64) (bool, error) {
	var last int64
	err := w.db.QueryRowContext(ctx, "SELECT txn FROM "+table+" WHERE job = ? AND subtask = ? AND slot = ?",
		job, subtask, slot).Scan(&last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s: %w", table, err)
	case last > txn:
		return false, fmt.Errorf("outcome unknown: %s says transaction %d committed in its slot since", table, last)
	}
	return last == txn, nil
}

// Close closes the writer's connections. The server rolls back an open
// transaction and keeps prepared ones for Recover. It does not close w.
// Safe to call twice.
func (x *XA) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	x.open = nil
	for i := range x.slots {
		x.drop(&x.slots[i])
		x.slots[i].state = xaIdle
	}
	return nil
}
