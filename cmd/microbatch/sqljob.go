package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// sqlFlagHelp is --sql's help, the same for run and verify.
const sqlFlagHelp = "a SQL job instead of the built-in one: INSERT INTO <table> SELECT … FROM <topic> [WHERE …] [GROUP BY …] aggregates (without GROUP BY and aggregates, each record is a row: a row job; REPLACE INTO <table> (PRIMARY KEY (<col>)) SELECT … keeps one row per key) (FROM names the topic; sinks: mysql://, sqlite:// (integer sums, MIN/MAX of strings only), or redis:// with --strategy idempotent, upserts only)"

// given reports whether setting name is set anywhere: on the command line,
// in its MICROBATCH_* variable (even set empty) or in the config file.
func (s *settings) given(name string) bool {
	if s.fs.Changed(name) {
		return true
	}
	if f := s.fs.Lookup(name); f != nil && isCommandLineOnly(f) {
		return false
	}
	if s.envSet(name) {
		return true
	}
	_, ok := s.fromFile[name]
	return ok
}

// isRedisDSN reports a Redis sink, as strategies reads it.
func isRedisDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "redis://") || strings.HasPrefix(dsn, "rediss://")
}

// addSQLFlags adds --sql and --sql-file, the SQL job of a command that
// takes one (run, verify, offsets): the same text everywhere.
func addSQLFlags(fs *pflag.FlagSet, help string) {
	fs.String("sql", "", help)
	fs.String("sql-file", "", "the SQL job's statement read from a file (instead of --sql)")
}

// sqlText is the SQL job's statement, from sql or the file sql-file names
// (flag, MICROBATCH_SQL / MICROBATCH_SQL_FILE or the config file): "" when
// neither is set, so that the command runs (or checks) the built-in job.
// Set but holding no statement is a configuration error, never the
// built-in job: `--sql "$(cat missing.sql)"` would otherwise run the demo's
// job into the user's sink. Both set, or a file that can't be read, too.
func (s *settings) sqlText() (string, error) {
	hasFile := s.fs.Lookup("sql-file") != nil
	switch {
	case hasFile && s.given("sql") && s.given("sql-file"):
		return "", badConfig("sql and sql-file: both set (%s; %s): give one", s.where("sql"), s.where("sql-file"))
	case hasFile && s.given("sql-file"):
		path := s.str("sql-file")
		if path == "" {
			return "", badConfig("sql-file: set (%s) but names no file", s.where("sql-file"))
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return "", badConfig("sql-file: %v", err)
		}
		text := strings.TrimSpace(string(data))
		if text == "" {
			return "", badConfig("sql: empty query (sql-file %s holds no statement)", path)
		}
		return text, nil
	case s.given("sql"):
		text := s.str("sql")
		if text == "" {
			return "", badConfig("sql: empty query (%s gives no statement; leave sql out for the built-in job)", s.where("sql"))
		}
		return text, nil
	}
	return "", nil
}

// where names the places setting name is given: the flag, its variable,
// the config file.
func (s *settings) where(name string) string {
	var where []string
	if s.fs.Changed(name) {
		where = append(where, "--"+name)
	}
	if s.envSet(name) {
		where = append(where, envName(name))
	}
	if _, ok := s.fromFile[name]; ok {
		where = append(where, "config file "+s.file)
	}
	return strings.Join(where, ", ")
}

// envSet reports that setting name's variable is set, even empty.
func (s *settings) envSet(name string) bool {
	_, ok := os.LookupEnv(envName(name))
	return ok
}

// envName is setting name's MICROBATCH_* variable.
func envName(name string) string {
	return "MICROBATCH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// commandTopic is the topic of a command that reads a job's topic: the
// query's FROM for a SQL job (compileSQL checked that a topic given too
// agrees), else topic. Every command takes its topic from here.
func commandTopic(s *settings, q *sqljob.Query) string {
	if q != nil {
		return q.Topic()
	}
	return s.str("topic")
}

// noTopicError is a SQL job's missing topic: the topic came from the
// query's FROM, not from --topic.
type noTopicError struct{ topic string }

func (e noTopicError) Error() string {
	return fmt.Sprintf("the query's FROM names topic %q, which does not exist (microbatch never creates its input: create the topic, or change the FROM)", e.topic)
}
func (e noTopicError) Unwrap() error { return strategies.ErrNoTopic }

// explainNoTopic says where a SQL job's missing topic came from.
func explainNoTopic(err error, q *sqljob.Query) error {
	if q == nil || !errors.Is(err, strategies.ErrNoTopic) {
		return err
	}
	return noTopicError{q.Topic()}
}

// compileSQL reads the SQL job (sql or sql-file: sqlText) and compiles it
// for the job's strategy and sink: nil when neither is set. A refused
// query, a sink that can't hold its results exactly, and a --topic that
// names another topic than the query's FROM are configuration errors.
// Nothing connects.
func compileSQL(s *settings, strategy strategies.Strategy, dsn string) (*sqljob.Query, error) {
	text, err := s.sqlText()
	if text == "" || err != nil {
		return nil, err
	}
	opts, err := checkSQLSink(strategy, dsn)
	if err != nil {
		return nil, err
	}
	q, err := sqljob.Compile(text, opts)
	if err != nil {
		return nil, configError{err}
	}
	if q.RowJob() && !q.Upserting() && isRedisDSN(dsn) {
		// Redis keeps a table's rows by key, in one hash per column.
		return nil, badConfig("sql: a row job that appends (INSERT INTO … SELECT without GROUP BY) can't write to Redis, which keeps rows by key: write REPLACE INTO %s (PRIMARY KEY (<column>)) SELECT … to keep one row per key, or use a mysql:// or sqlite:// sink", q.Table())
	}
	if s.given("topic") && s.str("topic") != q.Topic() {
		return nil, badConfig("topic: --topic %q and the query's FROM %q disagree (FROM names the topic: leave --topic out, or make them the same)", s.str("topic"), q.Topic())
	}
	return q, nil
}

// checkSQLSink refuses a sink a SQL job can't write to exactly, and says
// what the sink keeps exactly: Redis adds with HINCRBY, exact on integers
// only, and SQLite has no decimal type, so a SUM argument with a fraction
// is dead-lettered there rather than rounded (and SQLite takes no MIN or
// MAX).
func checkSQLSink(strategy strategies.Strategy, dsn string) (sqljob.Options, error) {
	switch {
	case isRedisDSN(dsn):
		if strategy != strategies.StrategyIdempotent {
			return sqljob.Options{}, badConfig("sql: a redis:// sink takes a SQL job with --strategy idempotent only (strategy %s)", strategy)
		}
		return sqljob.Options{IntegerSums: true}, nil
	case strings.HasPrefix(dsn, "kafka://") || strings.HasPrefix(dsn, "file://"):
		return sqljob.Options{}, badConfig("sql: sink %s takes the built-in job only; a SQL job writes to mysql:// (every strategy, checkpoint with XA or --sink-mode wal), postgres:// (every strategy but idempotent, checkpoint with prepared transactions or --sink-mode wal), sqlite:// or redis:// (--strategy idempotent)", redact.DSN(dsn))
	}
	t, err := sqlsink.ParseDSN(dsn)
	if err != nil {
		return sqljob.Options{}, configError{fmt.Errorf("sink: %w", err)}
	}
	return sqljob.Options{SQLite: t.Dialect == offsets.SQLite, Postgres: t.Dialect == offsets.Postgres}, nil
}

// ensureSQLTable creates the query's table in the SQL sink dsn if it is
// missing and checks an existing one, waiting up to timeout for the sink
// to answer. A server that does not answer or refuses is classified as
// every start-up failure is (exit 3, 5); a table that does not fit the
// query is a configuration error (exit 2) with the reason. Run claims the
// table for the job once Kafka answers (sqljob.Query.Claim; run adds
// ownerHint to a refusal).
func ensureSQLTable(ctx context.Context, q *sqljob.Query, dsn string, timeout time.Duration) error {
	_, err := sqlTable(ctx, q, dsn, timeout, true)
	return err
}

// checkSQLTable is ensureSQLTable for the dry run: it creates nothing (no
// table, no SQLite file) and says what it found, refusing an existing
// table the run would refuse, with the run's message and exit code.
func checkSQLTable(ctx context.Context, q *sqljob.Query, dsn string, timeout time.Duration) (string, error) {
	if t, err := sqlsink.ParseDSN(dsn); err == nil && t.File != "" {
		if _, err := os.Stat(t.File); errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("%s: the SQLite file does not exist yet: run creates it with the table", q.Table()), nil
		}
	}
	return sqlTable(ctx, q, dsn, timeout, false)
}

// checkSQLClaim is the run's claim of the query's table for job, without
// writing it: the refusal the run would make once Kafka answered (a dry
// run's last check, in the run's order).
func checkSQLClaim(ctx context.Context, q *sqljob.Query, job, dsn string, timeout time.Duration) error {
	if t, err := sqlsink.ParseDSN(dsn); err == nil && t.File != "" {
		if _, err := os.Stat(t.File); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	var w *sqlsink.Writer
	if err := strategies.Connect(ctx, timeout, func(actx context.Context) (err error) {
		w, err = sqlsink.Open(actx, dsn)
		return err
	}); err != nil {
		return err
	}
	defer w.Close()
	err := q.CheckClaim(ctx, w.DB(), job)
	if owned := (*sqljob.OwnerError)(nil); errors.As(err, &owned) {
		return badConfig("%v (%s)", owned, ownerHint(owned, false))
	}
	return err
}

// sqlTable checks the query's table in the SQL sink dsn, creating it if
// missing when create is set; without create, a missing table is a note
// (the run creates it).
func sqlTable(ctx context.Context, q *sqljob.Query, dsn string, timeout time.Duration, create bool) (note string, err error) {
	var w *sqlsink.Writer
	if err := strategies.Connect(ctx, timeout, func(actx context.Context) (err error) {
		w, err = sqlsink.Open(actx, dsn)
		return err
	}); err != nil {
		return "", err
	}
	defer w.Close()
	if create {
		err = q.EnsureTable(ctx, w.DB())
	} else {
		var exists bool
		if exists, err = tableExists(ctx, w, q.Table()); err == nil && !exists {
			return fmt.Sprintf("%s does not exist yet: run creates it", q.Table()), nil
		} else if err == nil {
			err = q.CheckTable(ctx, w.DB())
		}
	}
	if err == nil {
		return fmt.Sprintf("%s exists and fits the query", q.Table()), nil
	}
	if c := strategies.Classify(err); errors.Is(c, strategies.ErrDenied) || errors.Is(c, strategies.ErrUnreachable) || ctx.Err() != nil {
		return "", c
	}
	return "", badConfig("sql: sink %s: %v", w, err)
}

// tableExists reports whether the sink's database has table.
func tableExists(ctx context.Context, w *sqlsink.Writer, table string) (bool, error) {
	query := "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
	switch w.Dialect() {
	case offsets.SQLite:
		query = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE"
	case offsets.Postgres: // the job quotes the name: compared exactly
		query = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?"
	}
	var n int
	if err := w.DB().GetContext(ctx, &n, query, table); err != nil {
		return false, fmt.Errorf("looking for table %s: %w", table, err)
	}
	return n > 0, nil
}

// ownerHint is what to do about a table someone else owns: the ways to
// move on deliberately (docs/sql-jobs.md, "One table, one job"). On Redis
// a job's rows are its own: a new --job starts them over.
func ownerHint(e *sqljob.OwnerError, redis bool) string {
	if redis {
		return fmt.Sprintf("run the query job %q ran, or run this one with a new --job: on Redis a job's rows are its own", e.Job)
	}
	reset := func(job, table string) string {
		return fmt.Sprintf("microbatch offsets reset --job %s --empty-table %s --to earliest, with the job's --brokers, --topic, --sink and --strategy", job, table)
	}
	switch {
	case e.Owner.Table != e.Table:
		return fmt.Sprintf("write table %s with a new --job, or start table %s over with: %s", e.Table, e.Owner.Table, reset(e.Job, e.Owner.Table))
	case e.Owner.Job != e.Job:
		return fmt.Sprintf("run job %q, INSERT INTO another table, or start the table over for job %q with: %s", e.Owner.Job, e.Owner.Job, reset(e.Owner.Job, e.Table))
	}
	return fmt.Sprintf("run the query it holds, INSERT INTO another table with a new --job, or start the table over with: %s", reset(e.Job, e.Table))
}
