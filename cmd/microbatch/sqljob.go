package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// sqlFlagHelp is --sql's help, the same for run and verify.
const sqlFlagHelp = "a SQL job instead of the built-in one: INSERT INTO <table> SELECT … FROM <topic> [WHERE …] GROUP BY … (FROM names the topic; sinks: mysql://, sqlite:// (integer sums, no MIN/MAX), or redis:// with --strategy idempotent)"

// given reports whether setting name is set anywhere: on the command line,
// in its MICROBATCH_* variable (even set empty) or in the config file.
func (s *settings) given(name string) bool {
	if s.fs.Changed(name) {
		return true
	}
	if f := s.fs.Lookup(name); f != nil && isCommandLineOnly(f) {
		return false
	}
	if _, ok := os.LookupEnv("MICROBATCH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); ok {
		return true
	}
	_, ok := s.fromFile[name]
	return ok
}

// isRedisDSN reports a Redis sink, as strategies reads it.
func isRedisDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "redis://") || strings.HasPrefix(dsn, "rediss://")
}

// compileSQL reads --sql and compiles it for the job's strategy and sink:
// nil when --sql is not set. A refused query, a sink that can't hold its
// results exactly, and a --topic that names another topic than the
// query's FROM are configuration errors. Nothing connects.
func compileSQL(s *settings, strategy strategies.Strategy, dsn string) (*sqljob.Query, error) {
	text := s.str("sql")
	if text == "" {
		return nil, nil
	}
	opts, err := checkSQLSink(strategy, dsn)
	if err != nil {
		return nil, err
	}
	q, err := sqljob.Compile(text, opts)
	if err != nil {
		return nil, configError{err}
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
		return sqljob.Options{}, badConfig("sql: sink %s takes the built-in job only; a SQL job writes to mysql:// (every strategy, checkpoint with XA or --sink-mode wal), sqlite:// or redis:// (--strategy idempotent)", redact.DSN(dsn))
	}
	t, err := sqlsink.ParseDSN(dsn)
	if err != nil {
		return sqljob.Options{}, configError{fmt.Errorf("sink: %w", err)}
	}
	return sqljob.Options{SQLite: t.Dialect == offsets.SQLite}, nil
}

// ensureSQLTable creates the query's table in the SQL sink dsn if it is
// missing and checks an existing one, waiting up to timeout for the sink
// to answer. A server that does not answer or refuses is classified as
// every start-up failure is (exit 3, 5); a table that does not fit the
// query is a configuration error (exit 2) with the reason. Run claims the
// table for the job once Kafka answers (sqljob.Query.Claim; run adds
// ownerHint to a refusal).
func ensureSQLTable(ctx context.Context, q *sqljob.Query, dsn string, timeout time.Duration) error {
	var w *sqlsink.Writer
	if err := strategies.Connect(ctx, timeout, func(actx context.Context) (err error) {
		w, err = sqlsink.Open(actx, dsn)
		return err
	}); err != nil {
		return err
	}
	defer w.Close()
	err := q.EnsureTable(ctx, w.DB())
	if err == nil {
		return nil
	}
	if c := strategies.Classify(err); errors.Is(c, strategies.ErrDenied) || errors.Is(c, strategies.ErrUnreachable) || ctx.Err() != nil {
		return c
	}
	return badConfig("sql: sink %s: %v", w, err)
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
