package sqljob

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// tableNameRE is a table name a SQL job can write.
var tableNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// OwnersTable is microbatch's record of who writes each SQL job's table:
// one row per table, naming the job and its query's Fingerprint. The
// columns are a public contract (docs/tables.md).
const OwnersTable = "mb_sql_tables"

// Owner is a table's owner record.
type Owner struct {
	Table       string
	Job         string
	Fingerprint string
	Query       string // the query's text when the table was claimed
}

// DB is what the owner record is read and written through: a *sqlx.DB or
// a *sqlx.Tx of the sink's database.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	DriverName() string
}

// OwnersSchema is the CREATE TABLE statement of mb_sql_tables, for
// SQLite or MySQL/MariaDB.
func OwnersSchema(sqlite bool) string {
	if sqlite {
		return `CREATE TABLE IF NOT EXISTS mb_sql_tables (
  tbl TEXT NOT NULL,
  job TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  query_text TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (tbl),
  UNIQUE (job)
)`
	}
	return `CREATE TABLE IF NOT EXISTS mb_sql_tables (
  tbl VARCHAR(64) NOT NULL,
  job VARCHAR(128) NOT NULL,
  fingerprint CHAR(64) NOT NULL,
  query_text TEXT NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tbl),
  UNIQUE (job)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
}

// tableKey is the table's name as the owner record keys it: SQLite's
// table names ignore case, MySQL's (on Linux) don't.
func tableKey(table string, sqlite bool) string {
	if sqlite {
		return strings.ToLower(table)
	}
	return table
}

// Claim records job as the owner of the query's table, or checks that it
// is: run it after EnsureTable and before the first write, with the sink's
// database. A table belongs to one job and one query:
//
//   - a table owned by another job is refused: both would add every record
//     to it, each from its own positions;
//   - a table owned by job with another query (another Fingerprint) is
//     refused: the rows of two queries would merge;
//   - a job that owns another table is refused: its positions are that
//     table's, so the new one would miss what the job already read.
//
// Each refusal is an *OwnerError (ErrTableOwned). A table without an owner
// record (new, or from before microbatch kept them) is claimed by the first
// job that runs on it. Two jobs claiming at once can't both win: the row is
// inserted under the table's primary key (and the job's unique key) and
// read back. The same job with the same query (a restart, or the statement
// reformatted) passes.
func (q *Query) Claim(ctx context.Context, db DB, job string) error {
	if err := q.checkDialect(db.DriverName()); err != nil {
		return err
	}
	d := q.dialect()
	sqlite := d == dSQLite
	if err := createTable(ctx, db, ownersSchema(d), d); err != nil {
		return fmt.Errorf("creating %s: %w", OwnersTable, err)
	}
	tbl := tableKey(q.table, sqlite)
	own, found, err := readOwner(ctx, db, "tbl", tbl)
	if err != nil || found {
		return q.checkOwner(own, job, err)
	}
	if other, found, err := readOwner(ctx, db, "job", job); err != nil || found {
		return q.checkOwner(other, job, err)
	}
	// A conflict on the table or the job leaves the row that is there (not
	// INSERT IGNORE: it would also turn a too-long job name into a
	// warning and a truncated row).
	ins, onConflict := "INSERT INTO", " ON DUPLICATE KEY UPDATE tbl = tbl"
	switch d {
	case dSQLite:
		ins, onConflict = "INSERT OR IGNORE INTO", ""
	case dPostgres:
		onConflict = " ON CONFLICT DO NOTHING" // either unique key, as MySQL's
	}
	if _, err := db.ExecContext(ctx, ins+` mb_sql_tables (tbl, job, fingerprint, query_text, created_at) VALUES (?, ?, ?, ?, ?)`+onConflict,
		tbl, job, q.Fingerprint(), q.sql, time.Now().UTC().Format("2006-01-02 15:04:05.000000")); err != nil {
		return fmt.Errorf("claiming table %s for job %q: %w", q.table, job, err)
	}
	// Read back: another job may have claimed the table, or this job
	// another table, between the read and the insert.
	if own, found, err = readOwner(ctx, db, "tbl", tbl); err != nil || found {
		return q.checkOwner(own, job, err)
	}
	own, found, err = readOwner(ctx, db, "job", job)
	if err == nil && !found {
		err = fmt.Errorf("claiming table %s for job %q: the owner record is missing after its insert", q.table, job)
	}
	return q.checkOwner(own, job, err)
}

// CheckClaim is Claim without writing anything: the refusal Claim would
// make, for a dry run. A sink without mb_sql_tables has no owners yet.
func (q *Query) CheckClaim(ctx context.Context, db DB, job string) error {
	d := dialectOf(db.DriverName())
	sqlite := d == dSQLite
	exists := `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'mb_sql_tables'`
	switch d {
	case dSQLite:
		exists = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'mb_sql_tables'`
	case dPostgres:
		exists = `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'mb_sql_tables'`
	}
	var n int
	if err := db.QueryRowContext(ctx, exists).Scan(&n); err != nil {
		return fmt.Errorf("reading %s: %w", OwnersTable, err)
	}
	if n == 0 {
		return nil
	}
	own, found, err := readOwner(ctx, db, "tbl", tableKey(q.table, sqlite))
	if err != nil || found {
		return q.checkOwner(own, job, err)
	}
	if other, found, err := readOwner(ctx, db, "job", job); err != nil || found {
		return q.checkOwner(other, job, err)
	}
	return nil
}

// CheckOwner refuses (ErrTableOwned) an owner record that is not job's
// with this query: Claim's check, for a sink that keeps the record itself
// (Redis, per job).
func (q *Query) CheckOwner(own Owner, job string) error { return q.checkOwner(own, job, nil) }

// checkOwner refuses a record that is not this job's with this query.
func (q *Query) checkOwner(own Owner, job string, err error) error {
	if err != nil {
		return err
	}
	if own.Job == job && own.Table == tableKey(q.table, q.opts.SQLite) && q.sameQuery(own) {
		return nil
	}
	e := &OwnerError{Table: q.table, Job: job, Query: q.sql, Owner: own}
	if own.Table == tableKey(q.table, q.opts.SQLite) {
		e.Owner.Table = q.table
		if own.Job == job {
			e.Differs = q.differs(own.Query)
		}
	}
	return e
}

// sameQuery reports whether the record is of this query: the same
// fingerprint, or a recorded text that compiles to this query's (the
// fingerprint hashes the parser's printing of expressions, which another
// version of microbatch may print differently).
func (q *Query) sameQuery(own Owner) bool {
	fp := q.Fingerprint()
	if own.Fingerprint == fp {
		return true
	}
	old, err := Compile(own.Query, q.opts)
	return err == nil && old.Fingerprint() == fp
}

// differs says what in the query changed since stored was compiled:
// "was …; now …" with the parts of each that the other lacks, or "" if
// stored no longer compiles.
func (q *Query) differs(stored string) string {
	old, err := Compile(stored, q.opts)
	if err != nil {
		return ""
	}
	was, now := strings.Split(old.canonical(), "\n"), strings.Split(q.canonical(), "\n")
	in := func(s string, set []string) bool {
		for _, x := range set {
			if x == s {
				return true
			}
		}
		return false
	}
	var gone, added []string
	for _, l := range was {
		if l != "" && !in(l, now) {
			gone = append(gone, l)
		}
	}
	for _, l := range now {
		if l != "" && !in(l, was) {
			added = append(added, l)
		}
	}
	if len(gone)+len(added) == 0 {
		return ""
	}
	return "was " + strings.Join(gone, ", ") + "; now " + strings.Join(added, ", ")
}

// readOwner reads the owner record whose column col ("tbl" or "job") is
// v; found is false when there is none.
func readOwner(ctx context.Context, db DB, col, v string) (own Owner, found bool, err error) {
	err = db.QueryRowContext(ctx, `SELECT tbl, job, fingerprint, query_text FROM mb_sql_tables WHERE `+col+` = ?`, v).
		Scan(&own.Table, &own.Job, &own.Fingerprint, &own.Query)
	if errors.Is(err, sql.ErrNoRows) {
		return Owner{}, false, nil
	}
	if err != nil {
		return Owner{}, false, fmt.Errorf("reading %s: %w", OwnersTable, err)
	}
	return own, true, nil
}

// TableOwner reads table's owner record; found is false when the table
// has none (or the sink has no mb_sql_tables yet).
func TableOwner(ctx context.Context, db DB, table string) (own Owner, found bool, err error) {
	d := dialectOf(db.DriverName())
	if err := createTable(ctx, db, ownersSchema(d), d); err != nil {
		return Owner{}, false, fmt.Errorf("creating %s: %w", OwnersTable, err)
	}
	return readOwner(ctx, db, "tbl", tableKey(table, d == dSQLite))
}

// DisownTable deletes every row of table and its owner record, in the
// caller's transaction tx: with the owner's positions and dead letters
// reset in the same transaction, the next run starts the table over. It
// refuses (ErrTableOwned) a table owned by another job than job.
// Call TableOwner before beginning tx: it creates mb_sql_tables if
// missing, and MySQL commits a transaction at any CREATE TABLE (and at
// TRUNCATE, which is why the rows are deleted instead).
func DisownTable(ctx context.Context, tx DB, table, job string) (int64, error) {
	if !tableNameRE.MatchString(table) {
		return 0, fmt.Errorf("table %q: not a table name a SQL job writes (letters, digits and _, up to 64)", table)
	}
	d := dialectOf(tx.DriverName())
	own, found, err := readOwner(ctx, tx, "tbl", tableKey(table, d == dSQLite))
	if err != nil {
		return 0, err
	}
	if found && own.Job != job {
		own.Table = table
		return 0, &OwnerError{Table: table, Job: job, Owner: own}
	}
	res, err := tx.ExecContext(ctx, "DELETE FROM "+quoteIn(d, table))
	if err != nil {
		return 0, fmt.Errorf("emptying table %s: %w", table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("emptying table %s: %w", table, err)
	}
	if found {
		if _, err := tx.ExecContext(ctx, `DELETE FROM mb_sql_tables WHERE tbl = ?`, own.Table); err != nil {
			return 0, fmt.Errorf("deleting the owner record of %s: %w", table, err)
		}
	}
	return n, nil
}
