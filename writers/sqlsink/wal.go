package sqlsink

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// WALTable remembers, per job and sink subtask, the last checkpoint whose
// buffered writes a WAL writer applied.
const WALTable = "mb_wal_commits"

// WAL is the write-ahead sink of checkpoint mode, for a sink that has
// ordinary transactions but no two-phase commit. Nothing reaches the
// database before the checkpoint completes: writes are buffered in memory,
// PreCommit hands them over as the Pending's Data to be stored IN the
// checkpoint, and Commit applies them in one transaction together with the
// checkpoint id in mb_wal_commits — a Commit that finds its id (or a newer
// one) already there was applied before and does nothing (a rewrite,
// counted by Rewrites). Recover re-applies the kept checkpoint's writes
// under the same check.
//
// Where it is weaker than two-phase commit:
//   - The pending writes live only in the checkpoint. Lose the state dir
//     (or use the memory backend) and a completed checkpoint's output is
//     gone, while a 2PC sink keeps its prepared transaction on the server.
//   - It is exactly-once only because the rewrite check commits in the
//     same transaction as the writes. A sink without transactions (files,
//     HTTP, most key-value stores) can only record the id after the writes,
//     and a crash in between replays them: at-least-once.
//   - Output is held back a whole checkpoint and then written in one burst
//     per subtask; every record is also serialised into the checkpoint, so
//     checkpoints grow with interval × rate and take longer to save.
//   - The database sees the writes only after the checkpoint completes, so
//     database-side failures (constraints, a full disk) surface after the
//     source position has already moved past the records; Commit must then
//     be retried until it succeeds, with no way to reprocess differently.
//
// Of the TwoPhase calls, Begin starts a new buffer, PreCommit empties it
// into the Pending, Commit and Recover write, Abort drops.
type WAL struct {
	w       *Writer
	job     string
	subtask int

	txn      int64
	open     bool
	buf      walData
	rewrites atomic.Int64
}

var _ writers.TwoPhase = (*WAL)(nil)

type walUpsert struct {
	Upsert writers.Upsert `json:"upsert"`
	Rows   walRows        `json:"rows"`
}

// walRows are rows as the checkpoint keeps them: JSON arrays of plain JSON
// values, except where plain JSON would not bring a value back byte for
// byte. encoding/json writes a string that is not valid UTF-8 with U+FFFD
// in place of each bad byte (two distinct keys, "page-\xff" and
// "page-\xfe", would come back as one and their rows would merge) and a
// []byte as base64 text that comes back a string. Such values are written
// as a one-field object holding their bytes in base64:
//
//	{"str": "cGFnZS3/"}   a string that is not valid UTF-8
//	{"bytes": "AAH/"}     a []byte
//	{"delete": true}      writers.Delete: the row deletes its key
//
// A value is never a JSON object otherwise (a string that reads
// {"delete": true} is a JSON string), so no value can be taken for a
// tag. Rows never held objects before, so checkpoints written by older
// versions (plain values only) read as they always did.
type walRows [][]any

// walTagged is the object form of a value in walRows.
type walTagged struct {
	Str    *[]byte `json:"str,omitempty"`
	Bytes  *[]byte `json:"bytes,omitempty"`
	Delete bool    `json:"delete,omitempty"`
}

func (r walRows) MarshalJSON() ([]byte, error) {
	tagged := func(v any) (walTagged, bool) {
		if v == writers.Delete {
			return walTagged{Delete: true}, true
		}
		switch x := v.(type) {
		case string:
			if !utf8.ValidString(x) {
				b := []byte(x)
				return walTagged{Str: &b}, true
			}
		case []byte:
			if x == nil {
				return walTagged{}, false // nil bytes are NULL, as before
			}
			return walTagged{Bytes: &x}, true
		}
		return walTagged{}, false
	}
	// Copy on the first tagged value: the caller's rows stay as they are.
	out, copied := [][]any(r), false
	for i, row := range r {
		rowCopied := false
		for j, v := range row {
			t, ok := tagged(v)
			if !ok {
				continue
			}
			if !copied {
				out, copied = slices.Clone(out), true
			}
			if !rowCopied {
				out[i], rowCopied = slices.Clone(row), true
			}
			out[i][j] = t
		}
	}
	return json.Marshal(out)
}

// walValue turns a value decoded from walRows (with UseNumber) back into
// what was written: int64 for integers, float64 for other numbers, and the
// tagged forms' string, []byte or writers.Delete.
func walValue(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		return fromJSONNumber(x), nil
	case map[string]any:
		if len(x) == 1 && x["delete"] == true {
			return writers.Delete, nil
		}
		if len(x) == 1 {
			for tag, enc := range x {
				s, ok := enc.(string)
				if !ok {
					break
				}
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return nil, fmt.Errorf("value %q: %w", tag, err)
				}
				switch tag {
				case "str":
					return string(b), nil
				case "bytes":
					return b, nil
				}
			}
		}
		return nil, fmt.Errorf("unknown tagged value %v", x)
	}
	return v, nil
}

type walData struct {
	Upserts     []walUpsert         `json:"upserts,omitempty"`
	DeadLetters []record.DeadLetter `json:"dead_letters,omitempty"`
}

// NewWAL returns subtask's write-ahead writer for job on w.
func NewWAL(w *Writer, job string, subtask int) *WAL {
	return &WAL{w: w, job: job, subtask: subtask}
}

func (l *WAL) String() string { return fmt.Sprintf("wal %s subtask %d", l.w.display, l.subtask) }

// Rewrites counts the commits that found their checkpoint already applied.
func (l *WAL) Rewrites() int64 { return l.rewrites.Load() }

// Upsert buffers rows for the open checkpoint. Values must survive the
// checkpoint's JSON (walRows) exactly: strings (any bytes), []byte,
// integers within int64, finite floats, booleans, nil.
func (l *WAL) Upsert(_ context.Context, u writers.Upsert, rows [][]any) error {
	if !l.open {
		return errors.New("wal sink: no open transaction")
	}
	if err := u.Validate(); err != nil {
		return err
	}
	l.buf.Upserts = append(l.buf.Upserts, walUpsert{Upsert: u, Rows: rows})
	return nil
}

// DeadLetters buffers dead letters for the open checkpoint.
func (l *WAL) DeadLetters(_ context.Context, dls []record.DeadLetter) error {
	if !l.open {
		return errors.New("wal sink: no open transaction")
	}
	// Stored as JSON in the checkpoint: a reason that is not UTF-8 would
	// come back with U+FFFD, so it is made safe here rather than at Commit.
	for _, d := range dls {
		d.Reason = writers.StoredReason(d.Reason)
		l.buf.DeadLetters = append(l.buf.DeadLetters, d)
	}
	return nil
}

// Recover creates mb_wal_commits if missing and applies the kept
// checkpoints' writes (those already applied are skipped).
func (l *WAL) Recover(ctx context.Context, keep []writers.Pending) error {
	if _, err := l.w.db.ExecContext(ctx, walDDL(l.w.dialect)); err != nil {
		return fmt.Errorf("creating %s in %s: %w", WALTable, l.w.display, err)
	}
	for _, p := range keep {
		if err := l.Commit(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func walDDL(d offsets.Dialect) string {
	if d == offsets.MySQL {
		return `CREATE TABLE IF NOT EXISTS mb_wal_commits (
  job VARCHAR(128) NOT NULL,
  subtask INT NOT NULL,
  checkpoint_id BIGINT NOT NULL,
  PRIMARY KEY (job, subtask)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	if d == offsets.Postgres {
		// BIGINT: PostgreSQL's INTEGER is 32 bits, SQLite's 64.
		return `CREATE TABLE IF NOT EXISTS mb_wal_commits (
  job VARCHAR(128) COLLATE "C" NOT NULL,
  subtask INTEGER NOT NULL,
  checkpoint_id BIGINT NOT NULL,
  PRIMARY KEY (job, subtask)
)`
	}
	return `CREATE TABLE IF NOT EXISTS mb_wal_commits (
  job TEXT NOT NULL,
  subtask INTEGER NOT NULL,
  checkpoint_id INTEGER NOT NULL,
  PRIMARY KEY (job, subtask)
)`
}

// Begin starts buffering for checkpoint txn.
func (l *WAL) Begin(_ context.Context, txn int64) error {
	if l.open {
		return fmt.Errorf("wal sink: transaction %d is still open", l.txn)
	}
	l.txn, l.open, l.buf = txn, true, walData{}
	return nil
}

// PreCommit hands the buffered writes over, to be stored in the checkpoint.
func (l *WAL) PreCommit(_ context.Context) (writers.Pending, error) {
	if !l.open {
		return writers.Pending{}, errors.New("wal sink: no open transaction")
	}
	data, err := json.Marshal(l.buf)
	if err != nil {
		return writers.Pending{}, fmt.Errorf("wal sink: encoding checkpoint %d: %w", l.txn, err)
	}
	l.open, l.buf = false, walData{}
	return writers.Pending{Sink: "wal", Subtask: l.subtask, Txn: l.txn, ID: fmt.Sprintf("%s/%d/%d", l.job, l.subtask, l.txn), Data: data}, nil
}

// Commit applies p's writes and records p.Txn in one transaction, unless
// p.Txn (or a later checkpoint) was recorded already. Idempotent; retry it
// while writers.IsRetryable says so.
func (l *WAL) Commit(ctx context.Context, p writers.Pending) error {
	var data walData
	dec := json.NewDecoder(bytes.NewReader(p.Data))
	dec.UseNumber() // int64 values stay exact
	if err := dec.Decode(&data); err != nil {
		return fmt.Errorf("wal sink: checkpoint %d holds unreadable writes: %w", p.Txn, err)
	}
	tx, err := l.w.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("wal sink: beginning transaction on %s: %w", l.w.display, err)
	}
	defer tx.Rollback() // no-op after Commit
	q := "SELECT checkpoint_id FROM mb_wal_commits WHERE job = ? AND subtask = ?"
	switch l.w.dialect {
	case offsets.MySQL:
		q += " FOR UPDATE"
	case offsets.Postgres:
		// Two commits of the same checkpoint at once (a zombie's and its
		// successor's) must not both apply it. FOR UPDATE locks the row,
		// and in READ COMMITTED reads its latest commit after the wait;
		// the row is made first if missing (InnoDB's gap lock does that
		// for MySQL, SQLite takes the whole database).
		if _, err := tx.ExecContext(ctx, "INSERT INTO mb_wal_commits (job, subtask, checkpoint_id) VALUES (?, ?, ?) ON CONFLICT (job, subtask) DO NOTHING",
			l.job, p.Subtask, int64(-1)<<63); err != nil {
			return fmt.Errorf("wal sink: reading %s: %w", WALTable, err)
		}
		q += " FOR UPDATE"
	}
	var done int64
	switch err := tx.QueryRowContext(ctx, q, l.job, p.Subtask).Scan(&done); {
	case errors.Is(err, sql.ErrNoRows):
		done = -1 << 63
	case err != nil:
		return fmt.Errorf("wal sink: reading %s: %w", WALTable, err)
	}
	switch {
	case done == p.Txn:
		l.rewrites.Add(1)
		return nil
	case done > p.Txn:
		// Checkpoints list only writes not yet applied, so a newer mark
		// means this job's checkpoints are not the ones that wrote here.
		return fmt.Errorf("wal sink: %s already holds checkpoint %d of job %q subtask %d, newer than %d: the job's checkpoints were lost or another job writes under this name: %w",
			WALTable, done, l.job, p.Subtask, p.Txn, writers.ErrTxnLost)
	}
	for _, up := range data.Upserts {
		for _, row := range up.Rows {
			for i, v := range row {
				if row[i], err = walValue(v); err != nil {
					return fmt.Errorf("wal sink: checkpoint %d holds unreadable writes: %w", p.Txn, err)
				}
			}
		}
		if err := l.w.upsert(ctx, tx, up.Upsert, up.Rows); err != nil {
			return err
		}
	}
	if err := l.w.deadLetters(ctx, tx, data.DeadLetters); err != nil {
		return err
	}
	mark := "INSERT INTO mb_wal_commits (job, subtask, checkpoint_id) VALUES (?, ?, ?) ON CONFLICT (job, subtask) DO UPDATE SET checkpoint_id = excluded.checkpoint_id"
	if l.w.dialect == offsets.MySQL {
		mark = "INSERT INTO mb_wal_commits (job, subtask, checkpoint_id) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE checkpoint_id = VALUES(checkpoint_id)"
	}
	if _, err := tx.ExecContext(ctx, mark, l.job, p.Subtask, p.Txn); err != nil {
		return fmt.Errorf("wal sink: recording checkpoint %d: %w", p.Txn, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("wal sink: committing checkpoint %d to %s: %w", p.Txn, l.w.display, err)
	}
	return nil
}

func fromJSONNumber(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	if f, err := n.Float64(); err == nil {
		return f
	}
	return string(n)
}

// Abort drops the open buffer (zero p) or does nothing: an aborted
// checkpoint's writes were never applied.
func (l *WAL) Abort(_ context.Context, p writers.Pending) error {
	if p.ID == "" {
		l.open, l.buf = false, walData{}
	}
	return nil
}

// Close drops the open buffer. Safe twice.
func (l *WAL) Close() error {
	l.open, l.buf = false, walData{}
	return nil
}
