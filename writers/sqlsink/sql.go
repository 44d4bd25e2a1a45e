package sqlsink

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/microbatch/microbatch/internal/values"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// Writer writes to one MySQL/MariaDB, PostgreSQL or SQLite database. It is safe for
// concurrent use; each transaction (Tx) belongs to one goroutine.
type Writer struct {
	db      *sqlx.DB
	dialect offsets.Dialect
	display string

	mu    sync.Mutex
	stmts map[string]upsertParts // by upsert shape
	bytea map[string][]string    // PostgreSQL: a table's BYTEA columns (byteaOf)
}

// Open connects to the sink named by dsn (see ParseDSN) and checks it
// answers. It does not create tables; call CreateTables.
func Open(ctx context.Context, dsn string) (*Writer, error) {
	t, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	var db *sqlx.DB
	if t.Dialect == offsets.Postgres {
		db, err = openPostgres(t)
	} else {
		db, err = sqlx.Open(t.DriverName, t.DataSource)
	}
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
	w := New(db, t.Dialect)
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
		if err == nil || d != offsets.SQLite || !writers.IsRetryable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// New wraps a database the caller opened. For MySQL the DSN should set
// clientFoundRows=true (offset advances count matched rows).
func New(db *sqlx.DB, d offsets.Dialect) *Writer {
	return &Writer{db: db, dialect: d, display: string(d), stmts: make(map[string]upsertParts)}
}

// DB returns the underlying pool, e.g. for reading results.
func (w *Writer) DB() *sqlx.DB { return w.db }

// Dialect returns the database flavour.
func (w *Writer) Dialect() offsets.Dialect { return w.dialect }

// String is the sink address without its password.
func (w *Writer) String() string { return w.display }

// Close closes the pool. Safe to call twice.
func (w *Writer) Close() error { return w.db.Close() }

// CreateTables creates mb_totals, mb_dead_letters, mb_offsets and
// mb_source_positions if missing. Tables of a user's own Upsert are the
// user's to create.
//
// An mb_totals made by an older version, whose amount column could
// overflow (BIGINT in MySQL, INTEGER in SQLite), is migrated to the exact
// column (see totalsDDL); several processes may start on it at once.
func (w *Writer) CreateTables(ctx context.Context) error {
	for _, ddl := range []string{totalsDDL(w.dialect, writers.TotalsTable), deadLettersDDL(w.dialect), offsets.Schema(w.dialect), offsets.SourceSchema(w.dialect)} {
		if _, err := w.db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("creating tables in %s: %w", w.display, err)
		}
	}
	if err := w.migrateTotals(ctx); err != nil {
		return fmt.Errorf("migrating %s.amount in %s to exact sums: %w", writers.TotalsTable, w.display, err)
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
	if d == offsets.Postgres {
		return fmt.Sprintf(postgresTotalsDDL, table)
	}
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
	if d == offsets.Postgres {
		return postgresDeadLettersDDL
	}
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

// maxParams keeps a statement under both MySQL's 65535 and SQLite's 32766
// placeholder limits.
const maxParams = 30000

// upsertSQL builds the statement for n rows. Only its parts are cached
// (per upsert shape); caching whole statements per row count would keep
// one large string for every batch size ever seen.
func (w *Writer) upsertSQL(u writers.Upsert, n int) string {
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

func (w *Writer) upsertParts(u writers.Upsert) upsertParts {
	key := fmt.Sprintf("%s|%s|%s|%d", u.Table, strings.Join(u.Keys, ","), strings.Join(u.Values, ","), u.Merge)
	if u.Merges != nil {
		key += fmt.Sprintf("|%v", u.Merges)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.stmts[key]; ok {
		return p
	}
	cols := append(append([]string{}, u.Keys...), u.Values...)
	if u.Merge == writers.MergeAppend { // a plain INSERT: every row its own
		p := upsertParts{
			head:  fmt.Sprintf("INSERT INTO %s (%s) VALUES ", w.quoteIdent(u.Table), w.quoteIdents(cols)),
			tuple: "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")",
		}
		w.stmts[key] = p
		return p
	}
	sets := make([]string, len(u.Values))
	for i, col := range u.Values {
		// v is the stored value, incoming the row's; PostgreSQL wants the
		// stored one qualified (a bare name is ambiguous beside EXCLUDED).
		col = w.quoteIdent(col)
		v, incoming := col, "excluded."+col
		switch w.dialect {
		case offsets.MySQL:
			incoming = "VALUES(" + col + ")"
		case offsets.Postgres:
			v = w.quoteIdent(u.Table) + "." + col
		}
		if u.Merges != nil {
			sets[i] = col + " = " + w.perColumnSet(u.Merges[i], v, incoming)
			continue
		}
		switch {
		case u.Merge == writers.MergeAdd && w.dialect == offsets.SQLite:
			// SQLite's + turns an int64 overflow into an inexact REAL:
			// mb_add sums integers exactly and yields NULL for what it
			// leaves to + (REAL, NULL, non-integer text).
			sets[i] = col + " = COALESCE(" + sqliteAddFunc + "(" + v + ", " + incoming + "), " + v + " + " + incoming + ")"
		case u.Merge == writers.MergeAdd:
			sets[i] = col + " = " + v + " + " + incoming
		default:
			sets[i] = col + " = " + incoming
		}
	}
	p := upsertParts{
		head:  fmt.Sprintf("INSERT INTO %s (%s) VALUES ", w.quoteIdent(u.Table), w.quoteIdents(cols)),
		tuple: "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")",
		tail:  fmt.Sprintf(" ON CONFLICT (%s) DO UPDATE SET %s", w.quoteIdents(u.Keys), strings.Join(sets, ", ")),
	}
	if w.dialect == offsets.MySQL {
		p.tail = " ON DUPLICATE KEY UPDATE " + strings.Join(sets, ", ")
	}
	w.stmts[key] = p
	return p
}

// perColumnSet is the new value of stored column v (quoted) given the
// incoming one, for a per-column upsert, where NULL means "no value". Each
// SET uses only its own column, so the order of the SET clauses does not
// matter, and rows with the same key in one statement are applied in
// turn, each merging into what the one before left (MySQL's VALUES(v) and
// SQLite's excluded.v are the current row's).
func (w *Writer) perColumnSet(m writers.Merge, v, incoming string) string {
	switch m {
	case writers.MergeAdd:
		if w.dialect == offsets.SQLite {
			// mb_add is NULL for a NULL operand; c + NULL too.
			return "COALESCE(" + sqliteAddFunc + "(" + v + ", " + incoming + "), " + v + " + " + incoming + ", " + v + ", " + incoming + ")"
		}
		return "COALESCE(" + v + " + " + incoming + ", " + v + ", " + incoming + ")"
	case writers.MergeMin, writers.MergeMax, writers.MergeMinBytes, writers.MergeMaxBytes:
		// MergeMin and MergeMax: SQLite is refused before (checkPerColumn).
		// MySQL compares in the column's type, DECIMAL or BIGINT: exactly.
		// MergeMinBytes and MergeMaxBytes: MySQL compares VARBINARY (and
		// its VALUES()) byte by byte, SQLite TEXT in its BINARY collation
		// (memcmp) unless the table declares another.
		op := "<"
		if m == writers.MergeMax || m == writers.MergeMaxBytes {
			op = ">"
		}
		return "CASE WHEN " + incoming + " IS NULL THEN " + v + " WHEN " + v + " IS NULL OR " + incoming + " " + op + " " + v + " THEN " + incoming + " ELSE " + v + " END"
	}
	return incoming
}

// checkPerColumn refuses what a per-column upsert (u.Merges set) can't do
// in this database: MergeMin and MergeMax in SQLite, which has no exact
// decimal type to compare in (a SQL job refuses sqlite:// sinks anyway).
func (w *Writer) checkPerColumn(u writers.Upsert) error {
	if u.Merges == nil || w.dialect != offsets.SQLite {
		return nil
	}
	for i, m := range u.Merges {
		if m == writers.MergeMin || m == writers.MergeMax {
			return fmt.Errorf("%w: upsert into %s: column %s merges by %s, which SQLite can't compare exactly (no decimal type); use MySQL/MariaDB",
				writers.ErrBadMerge, u.Table, u.Values[i], m)
		}
	}
	return nil
}

// checkMergeable checks the values of a per-column upsert's row whose
// columns are merged (not replaced): Go integers, decimal strings, or nil.
// Anything else would reach the database as something it converts
// inexactly (a float) or not at all. SQLite takes no fractions: it would
// add them in doubles.
func (w *Writer) checkMergeable(u writers.Upsert, row []any) error {
	nk := len(u.Keys)
	for i, m := range u.Merges {
		v := row[nk+i]
		if m.Bytes() && !m.Takes(v) {
			return fmt.Errorf("%w: upsert into %s: %s (%s) = %v (%T); want a string or nil",
				writers.ErrBadValue, u.Table, u.Values[i], m, v, v)
		}
		if !m.Takes(v) {
			return fmt.Errorf("%w: upsert into %s: %s (%s) = %v (%T); want a Go integer, a decimal string or nil",
				writers.ErrBadValue, u.Table, u.Values[i], m, v, v)
		}
		if s, ok := v.(string); ok && w.dialect == offsets.SQLite && values.HasFraction(s) {
			return fmt.Errorf("%w: upsert into %s: %s = %q has a fraction, which SQLite can't add exactly; use MySQL/MariaDB",
				writers.ErrBadMerge, u.Table, u.Values[i], s)
		}
	}
	return nil
}

// Tx is one open transaction. Nothing it writes is visible until Commit;
// on any error the caller must Rollback (safe after Commit too).
type Tx struct {
	w    *Writer
	tx   *sqlx.Tx
	conn *sqlx.Conn // PostgreSQL: the connection tx runs on, for COPY (postgres_copy.go); released by Commit and Rollback
}

// Begin opens a transaction. In PostgreSQL it holds a connection of the
// pool of its own until Commit or Rollback, which an append reaches with
// COPY.
func (w *Writer) Begin(ctx context.Context) (*Tx, error) {
	if w.dialect == offsets.Postgres {
		conn, err := w.db.Connx(ctx)
		if err != nil {
			return nil, fmt.Errorf("beginning transaction on %s: %w", w.display, err)
		}
		tx, err := conn.BeginTxx(ctx, nil)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("beginning transaction on %s: %w", w.display, err)
		}
		return &Tx{w: w, tx: tx, conn: conn}, nil
	}
	tx, err := w.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning transaction on %s: %w", w.display, err)
	}
	return &Tx{w: w, tx: tx}, nil
}

// Upsert writes rows (each: key values then value values, in column order).
func (t *Tx) Upsert(ctx context.Context, u writers.Upsert, rows [][]any) error {
	if t.conn != nil {
		return t.w.upsert(ctx, copyTx{Tx: t.tx, conn: t.conn}, u, rows)
	}
	return t.w.upsert(ctx, t.tx, u, rows)
}

// Upsert writes rows outside any transaction: each statement (of up to
// maxParams values) commits on its own. For at-least-once style sinks that
// accept a partly written batch.
func (w *Writer) Upsert(ctx context.Context, u writers.Upsert, rows [][]any) error {
	return w.upsert(ctx, w.db, u, rows)
}

// deadLetterChunkBytes bounds one INSERT's payload so it stays far below
// max_allowed_packet (16 MiB by default on MariaDB).
const deadLetterChunkBytes = 4 << 20

// DeadLetters inserts dls. A record already dead-lettered (same job, topic,
// partition, offset) is left as it is, so replays are harmless.
func (t *Tx) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	return t.w.deadLetters(ctx, t.tx, dls)
}

// DeadLetters inserts dls outside any transaction (see Writer.Upsert).
func (w *Writer) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	return w.deadLetters(ctx, w.db, dls)
}

func (w *Writer) deadLetters(ctx context.Context, ex sqlx.ExecerContext, dls []record.DeadLetter) error {
	now := time.Now().UTC()
	for len(dls) > 0 {
		n, size := 0, 0
		for n < len(dls) && (n == 0 || size+min(len(dls[n].Payload), writers.MaxPayloadBytes) <= deadLetterChunkBytes) && n < 1000 {
			size += min(len(dls[n].Payload), writers.MaxPayloadBytes)
			n++
		}
		chunk := dls[:n]
		dls = dls[n:]
		var b strings.Builder
		switch w.dialect {
		case offsets.MySQL:
			b.WriteString("INSERT IGNORE INTO mb_dead_letters (job, topic, part, off, reason, payload, at) VALUES ")
		case offsets.Postgres:
			b.WriteString("INSERT INTO mb_dead_letters (job, topic, part, off, reason, payload, at) VALUES ")
		default:
			b.WriteString("INSERT OR IGNORE INTO mb_dead_letters (job, topic, part, off, reason, payload, at) VALUES ")
		}
		args := make([]any, 0, 7*len(chunk))
		for i, d := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			reason, payload := d.Reason, d.Payload
			if len(payload) > writers.MaxPayloadBytes {
				reason = fmt.Sprintf("%s (payload cut from %d to %d bytes)", reason, len(payload), writers.MaxPayloadBytes)
				payload = payload[:writers.MaxPayloadBytes]
			}
			args = append(args, d.Job, d.Topic, d.Partition, d.Offset, writers.StoredReason(reason), payload, now)
		}
		if w.dialect == offsets.Postgres {
			b.WriteString(" ON CONFLICT DO NOTHING")
		}
		if _, err := ex.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("inserting dead letters: %w", err)
		}
	}
	return nil
}

// Advance moves a partition's offset in this transaction (offsets.Apply).
func (t *Tx) Advance(ctx context.Context, a offsets.Advance) error {
	return offsets.Apply(ctx, t.tx, a)
}

// Commit commits. If it fails, the outcome may be unknown (connection lost
// during COMMIT): settle it with offsets.Landed before retrying.
func (t *Tx) Commit() error {
	defer t.release()
	if err := t.tx.Commit(); err != nil {
		return fmt.Errorf("committing to %s: %w", t.w.display, err)
	}
	return nil
}

// Rollback abandons the transaction; after Commit it does nothing.
// A failed rollback leaves nothing to do: database/sql discards the
// connection and the server rolls the transaction back when it goes.
func (t *Tx) Rollback() {
	_ = t.tx.Rollback()
	t.release()
}

// release gives a PostgreSQL transaction's connection back to the pool,
// once.
func (t *Tx) release() {
	if t.conn != nil {
		_ = t.conn.Close()
		t.conn = nil
	}
}
