package sqlsink

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/microbatch/microbatch/internal/pgbind"
	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// IsPostgresDSN reports whether dsn names a PostgreSQL sink (postgres://
// or postgresql://).
func IsPostgresDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// postgresTarget parses a postgres:// or postgresql:// URL as pgx does
// (libpq's parameters: sslmode, sslrootcert, connect_timeout, …; pgx also
// fills what the URL leaves out from the PG* environment variables, as
// libpq does). The connection itself is made by openPostgres.
func postgresTarget(dsn string) (Target, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx masks the password in its message; redact.Text makes sure.
		return Target{}, fmt.Errorf("%w: %s", writers.ErrBadDSN, redact.Text(err.Error()))
	}
	if cfg.Database == "" {
		return Target{}, fmt.Errorf("%w: no database name (postgres://user:pass@host:port/db)", writers.ErrBadDSN)
	}
	scheme, _, _ := strings.Cut(dsn, "://")
	host := cfg.Host
	if !strings.HasPrefix(host, "/") {
		host += ":" + strconv.Itoa(int(cfg.Port))
	}
	return Target{
		Dialect:    offsets.Postgres,
		DriverName: "pgx",
		DataSource: dsn,
		Display:    redact.DSN(scheme + "://" + userAt(cfg.User, cfg.Password) + host + "/" + cfg.Database),
	}, nil
}

// openPostgres opens a pool through pgx's database/sql driver, its
// statements' ? placeholders rewritten as $n (pgbind), so that the
// statements the dialects share are written once.
func openPostgres(t Target) (*sqlx.DB, error) {
	cfg, err := pgx.ParseConfig(t.DataSource)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", writers.ErrBadDSN, redact.Text(err.Error()))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	db := sql.OpenDB(pgbind.Connector(stdlib.GetConnector(*cfg)))
	return sqlx.NewDb(db, "pgx"), nil
}

// postgresTotalsDDL is totalsDDL for PostgreSQL. k is BYTEA: a key is
// whatever bytes the record had, and TEXT can hold neither a NUL byte nor
// bytes that are not UTF-8 (the built-in job dead-letters those, a
// Transform's keys may be anything); BYTEA compares byte by byte, so two
// keys are one row only when they are the same bytes. The writer sends
// k's strings as bytes (byteaColumns): a string sent as text would be
// read as bytea's escape syntax, where "\x41" is "A".
const postgresTotalsDDL = `CREATE TABLE IF NOT EXISTS %s (
  job VARCHAR(128) COLLATE "C" NOT NULL,
  k BYTEA NOT NULL,
  events BIGINT NOT NULL,
  amount NUMERIC(38,0) NOT NULL,
  PRIMARY KEY (job, k)
)`

const postgresDeadLettersDDL = `CREATE TABLE IF NOT EXISTS mb_dead_letters (
  job VARCHAR(128) COLLATE "C" NOT NULL,
  topic VARCHAR(249) COLLATE "C" NOT NULL,
  part INTEGER NOT NULL,
  off BIGINT NOT NULL,
  reason VARCHAR(1024) NOT NULL,
  payload BYTEA,
  at TIMESTAMP(6) NOT NULL,
  PRIMARY KEY (job, topic, part, off)
)`

// byteaColumns are the BYTEA columns of the built-in tables whose values
// come as Go strings, by table (other tables' are read from the catalog:
// Writer.byteaOf).
var byteaColumns = map[string][]string{writers.TotalsTable: {"k"}}
