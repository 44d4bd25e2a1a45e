// Package writers holds the sink writers a Go program can embed without the
// batch driver:
//
//   - SQL (MySQL/MariaDB and SQLite): a transaction (SQLTx) that writes
//     rows of any table (an Upsert: the user's table, keys, values, and
//     whether to add or replace), dead letters and progress together —
//     a Kafka partition's offset (Advance) or any other source's position
//     (AdvanceSource, CommitSource: a file offset, a page token, a
//     watermark; source.go). CheckUpsert checks a table before writing.
//   - Redis: the idempotent strategy's protocol (redis.go: deterministic
//     per-range contributions and an atomic, offset-guarded fold), and
//     CommitSource for a plain job's commands with its source position.
//   - The two-phase writers of checkpoint mode (twophase.go: the
//     Begin / PreCommit / Commit / Abort / Recover contract): KafkaTxn
//     (Kafka transactions that another process can finish; WriteOffsets
//     adds the input offsets for consume-transform-produce), XA
//     (MySQL/MariaDB XA), FileTxn (temp file + rename) and WAL
//     (write-ahead, committed by a later checkpoint).
//
// Every writer passes the conformance suite in writers/writertest.
// Writers never import the driver (batch) or the strategies; they take
// plain values and a context, and leave retry policy to the caller
// (IsRetryable says which errors allow it) except where a method says it
// retries.
package writers

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/microbatch/microbatch/internal/reason"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
)

// Tables written by the built-in job besides mb_offsets.
const (
	TotalsTable      = "mb_totals"
	DeadLettersTable = "mb_dead_letters"
)

// MaxReasonBytes bounds mb_dead_letters.reason; longer reasons are cut at
// a character boundary, and bytes that are not UTF-8 are escaped (\xff).
const MaxReasonBytes = 1024

// MaxPayloadBytes bounds the payload stored with a dead letter. A larger
// record keeps its first MaxPayloadBytes and says so in its reason; the
// whole record stays addressable in Kafka by (topic, part, off). Without a
// bound one huge bad record could exceed max_allowed_packet and fail its
// batch on every retry, stopping the pipeline.
const MaxPayloadBytes = 4 << 20

// SQL writes to one MySQL/MariaDB or SQLite database. It is safe for
// concurrent use; each transaction (SQLTx) belongs to one goroutine.
type SQL struct {
	db      *sqlx.DB
	dialect offsets.Dialect
	display string

	mu    sync.Mutex
	stmts map[string]upsertParts // by upsert shape
}

// OpenSQL connects to the sink named by dsn (see ParseSQLDSN) and checks it
// answers. It does not create tables; call CreateTables.
func OpenSQL(ctx context.Context, dsn string) (*SQL, error) {
	t, err := ParseSQLDSN(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sqlx.Open(t.DriverName, t.DataSource)
	if err != nil {
		return nil, fmt.Errorf("opening sink %s: %w", t.Display, err)
	}
	if t.Dialect == offsets.SQLite {
		// One writer at a time is all SQLite allows; sharing one connection
		// turns lock contention into queueing instead of SQLITE_BUSY.
		db.SetMaxOpenConns(1)
	} else {
		db.SetMaxOpenConns(32)
		db.SetMaxIdleConns(32)
		db.SetConnMaxLifetime(30 * time.Minute)
	}
	if err := ping(ctx, db, t.Dialect); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to sink %s: %w", t.Display, err)
	}
	w := NewSQL(db, t.Dialect)
	w.display = t.Display
	return w, nil
}

// sqliteOpenWait bounds how long opening a SQLite sink retries a database
// another process holds locked while it opens it.
const sqliteOpenWait = 30 * time.Second

// ping checks the database answers. A SQLite connection runs its pragmas
// as it opens; switching a new file to WAL takes the whole database, and
// a second process opening it then gets SQLITE_BUSY at once — busy_timeout
// does not cover that switch — so processes of a job started together on
// one SQLite sink retry the open for up to sqliteOpenWait.
func ping(ctx context.Context, db *sqlx.DB, d offsets.Dialect) error {
	deadline := time.Now().Add(sqliteOpenWait)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := db.PingContext(ctx)
		if err == nil || d != offsets.SQLite || !IsRetryable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// NewSQL wraps a database the caller opened. For MySQL the DSN should set
// clientFoundRows=true (offset advances count matched rows).
func NewSQL(db *sqlx.DB, d offsets.Dialect) *SQL {
	return &SQL{db: db, dialect: d, display: string(d), stmts: make(map[string]upsertParts)}
}

// DB returns the underlying pool, e.g. for reading results.
func (w *SQL) DB() *sqlx.DB { return w.db }

// Dialect returns the database flavour.
func (w *SQL) Dialect() offsets.Dialect { return w.dialect }

// String is the sink address without its password.
func (w *SQL) String() string { return w.display }

// Close closes the pool. Safe to call twice.
func (w *SQL) Close() error { return w.db.Close() }

// CreateTables creates mb_totals, mb_dead_letters, mb_offsets and
// mb_source_positions if missing. Tables of a user's own Upsert are the
// user's to create.
//
// An mb_totals made by an older version, whose amount column could
// overflow (BIGINT in MySQL, INTEGER in SQLite), is migrated to the exact
// column (see totalsDDL); several processes may start on it at once.
func (w *SQL) CreateTables(ctx context.Context) error {
	for _, ddl := range []string{totalsDDL(w.dialect, TotalsTable), deadLettersDDL(w.dialect), offsets.Schema(w.dialect), offsets.SourceSchema(w.dialect)} {
		if _, err := w.db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("creating tables in %s: %w", w.display, err)
		}
	}
	if err := w.migrateTotals(ctx); err != nil {
		return fmt.Errorf("migrating %s.amount in %s to exact sums: %w", TotalsTable, w.display, err)
	}
	return nil
}

// totalsDDL creates mb_totals (as table). k is VARBINARY in MySQL because
// every VARCHAR collation there, _bin included, ignores trailing spaces,
// which would merge "a" and "a ".
//
// amount holds a key's exact total, which may pass int64 (9.2 M events at
// the ±10^12 bound of one event pass it): DECIMAL(38,0) in MySQL (10^26
// events at the bound), and in SQLite, which has no wide exact type, a
// column without a declared type. Such a column converts nothing: it keeps
// an INTEGER while the total fits in int64 and the exact decimal TEXT
// that mb_add (sqlite_add.go) makes beyond. A column of type INTEGER would
// turn that text into an inexact REAL.
func totalsDDL(d offsets.Dialect, table string) string {
	if d == offsets.MySQL {
		return `CREATE TABLE IF NOT EXISTS ` + table + ` (
  job VARCHAR(128) NOT NULL,
  k VARBINARY(255) NOT NULL,
  events BIGINT NOT NULL,
  amount DECIMAL(38,0) NOT NULL,
  PRIMARY KEY (job, k)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
  job TEXT NOT NULL,
  k TEXT NOT NULL,
  events INTEGER NOT NULL,
  amount NOT NULL,
  PRIMARY KEY (job, k)
)`
}

func deadLettersDDL(d offsets.Dialect) string {
	if d == offsets.MySQL {
		return `CREATE TABLE IF NOT EXISTS mb_dead_letters (
  job VARCHAR(128) NOT NULL,
  topic VARCHAR(249) NOT NULL,
  part INT NOT NULL,
  off BIGINT NOT NULL,
  reason VARCHAR(1024) NOT NULL,
  payload LONGBLOB,
  at DATETIME(6) NOT NULL,
  PRIMARY KEY (job, topic, part, off)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	return `CREATE TABLE IF NOT EXISTS mb_dead_letters (
  job TEXT NOT NULL,
  topic TEXT NOT NULL,
  part INTEGER NOT NULL,
  off INTEGER NOT NULL,
  reason TEXT NOT NULL,
  payload BLOB,
  at TEXT NOT NULL,
  PRIMARY KEY (job, topic, part, off)
)`
}

// Merge says how an upsert combines a new row with an existing one.
type Merge int

const (
	// MergeAdd adds the new values to the stored ones (counters, sums).
	MergeAdd Merge = iota
	// MergeReplace overwrites the stored values.
	MergeReplace
)

// Upsert describes rows keyed by Keys whose Values are merged into what the
// table holds. Names must be plain identifiers.
type Upsert struct {
	Table  string
	Keys   []string
	Values []string
	Merge  Merge
}

// Totals is the built-in job's upsert: rows (job, k, events, amount).
var Totals = Upsert{Table: TotalsTable, Keys: []string{"job", "k"}, Values: []string{"events", "amount"}, Merge: MergeAdd}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Validate checks the names and that there are key and value columns.
func (u Upsert) Validate() error {
	if len(u.Keys) == 0 || len(u.Values) == 0 {
		return fmt.Errorf("%w: upsert into %q needs key and value columns", ErrBadIdentifier, u.Table)
	}
	for _, n := range append(append([]string{u.Table}, u.Keys...), u.Values...) {
		if !identRE.MatchString(n) {
			return fmt.Errorf("%w: %q", ErrBadIdentifier, n)
		}
	}
	return nil
}

// maxParams keeps a statement under both MySQL's 65535 and SQLite's 32766
// placeholder limits.
const maxParams = 30000

// upsertSQL builds the statement for n rows. Only its parts are cached
// (per upsert shape); caching whole statements per row count would keep
// one large string for every batch size ever seen.
func (w *SQL) upsertSQL(u Upsert, n int) string {
	p := w.upsertParts(u)
	var b strings.Builder
	b.Grow(len(p.head) + n*(len(p.tuple)+2) + len(p.tail))
	b.WriteString(p.head)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.tuple)
	}
	b.WriteString(p.tail)
	return b.String()
}

type upsertParts struct{ head, tuple, tail string }

func (w *SQL) upsertParts(u Upsert) upsertParts {
	key := fmt.Sprintf("%s|%s|%s|%d", u.Table, strings.Join(u.Keys, ","), strings.Join(u.Values, ","), u.Merge)
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.stmts[key]; ok {
		return p
	}
	cols := append(append([]string{}, u.Keys...), u.Values...)
	sets := make([]string, len(u.Values))
	for i, v := range u.Values {
		v = quoteIdent(v)
		incoming := "excluded." + v
		if w.dialect == offsets.MySQL {
			incoming = "VALUES(" + v + ")"
		}
		switch {
		case u.Merge == MergeAdd && w.dialect == offsets.SQLite:
			// SQLite's + turns an int64 overflow into an inexact REAL:
			// mb_add sums integers exactly and yields NULL for what it
			// leaves to + (REAL, NULL, non-integer text).
			sets[i] = v + " = COALESCE(" + sqliteAddFunc + "(" + v + ", " + incoming + "), " + v + " + " + incoming + ")"
		case u.Merge == MergeAdd:
			sets[i] = v + " = " + v + " + " + incoming
		default:
			sets[i] = v + " = " + incoming
		}
	}
	p := upsertParts{
		head:  fmt.Sprintf("INSERT INTO %s (%s) VALUES ", quoteIdent(u.Table), quoteIdents(cols)),
		tuple: "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")",
		tail:  fmt.Sprintf(" ON CONFLICT (%s) DO UPDATE SET %s", quoteIdents(u.Keys), strings.Join(sets, ", ")),
	}
	if w.dialect == offsets.MySQL {
		p.tail = " ON DUPLICATE KEY UPDATE " + strings.Join(sets, ", ")
	}
	w.stmts[key] = p
	return p
}

// SQLTx is one open transaction. Nothing it writes is visible until Commit;
// on any error the caller must Rollback (safe after Commit too).
type SQLTx struct {
	w  *SQL
	tx *sqlx.Tx
}

// Begin opens a transaction.
func (w *SQL) Begin(ctx context.Context) (*SQLTx, error) {
	tx, err := w.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning transaction on %s: %w", w.display, err)
	}
	return &SQLTx{w: w, tx: tx}, nil
}

// Upsert writes rows (each: key values then value values, in column order).
func (t *SQLTx) Upsert(ctx context.Context, u Upsert, rows [][]any) error {
	return t.w.upsert(ctx, t.tx, u, rows)
}

// Upsert writes rows outside any transaction: each statement (of up to
// maxParams values) commits on its own. For at-least-once style sinks that
// accept a partly written batch.
func (w *SQL) Upsert(ctx context.Context, u Upsert, rows [][]any) error {
	return w.upsert(ctx, w.db, u, rows)
}

func (w *SQL) upsert(ctx context.Context, ex sqlx.ExecerContext, u Upsert, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	if err := u.Validate(); err != nil {
		return err
	}
	width := len(u.Keys) + len(u.Values)
	per := maxParams / width
	args := make([]any, 0, min(len(rows), per)*width)
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		args = args[:0]
		for _, r := range chunk {
			if len(r) != width {
				return fmt.Errorf("upserting into %s: row has %d values, want %d", u.Table, len(r), width)
			}
			args = append(args, r...)
		}
		if _, err := ex.ExecContext(ctx, w.upsertSQL(u, len(chunk)), args...); err != nil {
			return fmt.Errorf("upserting into %s: %w", u.Table, err)
		}
	}
	return nil
}

// deadLetterChunkBytes bounds one INSERT's payload so it stays far below
// max_allowed_packet (16 MiB by default on MariaDB).
const deadLetterChunkBytes = 4 << 20

// DeadLetters inserts dls. A record already dead-lettered (same job, topic,
// partition, offset) is left as it is, so replays are harmless.
func (t *SQLTx) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	return t.w.deadLetters(ctx, t.tx, dls)
}

// DeadLetters inserts dls outside any transaction (see SQL.Upsert).
func (w *SQL) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	return w.deadLetters(ctx, w.db, dls)
}

func (w *SQL) deadLetters(ctx context.Context, ex sqlx.ExecerContext, dls []record.DeadLetter) error {
	now := time.Now().UTC()
	for len(dls) > 0 {
		n, size := 0, 0
		for n < len(dls) && (n == 0 || size+min(len(dls[n].Payload), MaxPayloadBytes) <= deadLetterChunkBytes) && n < 1000 {
			size += min(len(dls[n].Payload), MaxPayloadBytes)
			n++
		}
		chunk := dls[:n]
		dls = dls[n:]
		var b strings.Builder
		if w.dialect == offsets.MySQL {
			b.WriteString("INSERT IGNORE INTO mb_dead_letters (job, topic, part, off, reason, payload, at) VALUES ")
		} else {
			b.WriteString("INSERT OR IGNORE INTO mb_dead_letters (job, topic, part, off, reason, payload, at) VALUES ")
		}
		args := make([]any, 0, 7*len(chunk))
		for i, d := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			reason, payload := d.Reason, d.Payload
			if len(payload) > MaxPayloadBytes {
				reason = fmt.Sprintf("%s (payload cut from %d to %d bytes)", reason, len(payload), MaxPayloadBytes)
				payload = payload[:MaxPayloadBytes]
			}
			args = append(args, d.Job, d.Topic, d.Partition, d.Offset, storedReason(reason), payload, now)
		}
		if _, err := ex.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("inserting dead letters: %w", err)
		}
	}
	return nil
}

// storedReason is a dead letter's reason as every sink stores it: valid
// UTF-8 (bytes that are not are escaped, \xff) of at most MaxReasonBytes,
// cut at a character boundary. MySQL/MariaDB's utf8mb4 column refuses
// other bytes (error 1366), which the INSERT IGNORE of deadLetters turns
// into a warning and a '?' per byte; JSON (Redis, the WAL's checkpoint)
// turns them into U+FFFD. Either way the reason would lose what it quotes.
func storedReason(s string) string { return reason.Safe(s, MaxReasonBytes) }

// Advance moves a partition's offset in this transaction (offsets.Apply).
func (t *SQLTx) Advance(ctx context.Context, a offsets.Advance) error {
	return offsets.Apply(ctx, t.tx, a)
}

// Commit commits. If it fails, the outcome may be unknown (connection lost
// during COMMIT): settle it with offsets.Landed before retrying.
func (t *SQLTx) Commit() error {
	if err := t.tx.Commit(); err != nil {
		return fmt.Errorf("committing to %s: %w", t.w.display, err)
	}
	return nil
}

// Rollback abandons the transaction; after Commit it does nothing.
// A failed rollback leaves nothing to do: database/sql discards the
// connection and the server rolls the transaction back when it goes.
func (t *SQLTx) Rollback() { _ = t.tx.Rollback() }
