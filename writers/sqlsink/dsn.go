package sqlsink

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// Target is a parsed SQL sink address.
type Target struct {
	Dialect offsets.Dialect
	// DriverName and DataSource are what sql.Open takes.
	DriverName string
	DataSource string
	// Display is the address with any password hidden (redact.DSN), for
	// logs and errors.
	Display string
	// File is the database file of a SQLite sink.
	File string
}

// ParseDSN accepts
//
//	mysql://user:pass@host:port/db[?param=value…]   (params as go-sql-driver's)
//	user:pass@tcp(host:port)/db[?…]                  (a go-sql-driver DSN)
//	postgres://user:pass@host:port/db[?param=value…] (or postgresql://; params as libpq's)
//	sqlite://path/to/file.db                         (relative or absolute)
//	sqlite:///abs/path/file.db
//
// MySQL connections always get parseTime, utf8mb4, clientFoundRows and
// interpolateParams (one round trip a statement), and run in strict SQL
// mode (StrictSQLMode) whatever the server's global sql_mode, unless the
// DSN sets sql_mode itself.
func ParseDSN(dsn string) (Target, error) {
	switch {
	case dsn == "":
		return Target{}, fmt.Errorf("%w: empty", writers.ErrBadDSN)
	case strings.HasPrefix(dsn, "sqlite://"):
		path := strings.TrimPrefix(dsn, "sqlite://")
		if path == "" {
			return Target{}, fmt.Errorf("%w: %q has no file path", writers.ErrBadDSN, dsn)
		}
		if i := strings.IndexByte(path, '?'); i >= 0 {
			return Target{}, fmt.Errorf("%w: %q: sqlite DSNs take no parameters", writers.ErrBadDSN, dsn)
		}
		// FULL sync: a committed batch survives power loss, not only a crash.
		// The path is escaped: in a SQLite URI "#" and "%" would silently
		// name another file.
		src := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
		return Target{Dialect: offsets.SQLite, DriverName: "sqlite", DataSource: src, Display: dsn, File: path}, nil
	case IsPostgresDSN(dsn):
		return postgresTarget(dsn)
	case strings.HasPrefix(dsn, "mysql://"):
		cfg, err := writers.ParseMySQLURL(dsn)
		if err != nil {
			return Target{}, err
		}
		return mysqlTarget(cfg), nil
	case writers.HasScheme(dsn):
		// Name only the scheme: the rest may hold a password.
		scheme, _, _ := strings.Cut(dsn, "://")
		return Target{}, fmt.Errorf("%w: unknown scheme %q (want mysql://, postgres:// or sqlite://)", writers.ErrBadDSN, scheme)
	default:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return Target{}, fmt.Errorf("%w: not a go-sql-driver DSN ([user[:password]@]tcp(host:port)/db)", writers.ErrBadDSN)
		}
		if cfg.DBName == "" {
			return Target{}, fmt.Errorf("%w: no database name ([user[:password]@]tcp(host:port)/db)", writers.ErrBadDSN)
		}
		return mysqlTarget(cfg), nil
	}
}

// StrictSQLMode is the sql_mode of every MySQL/MariaDB session a sink
// opens (the driver sets it on connect, so the XA writer's connections,
// taken from the same pool, have it too). A server whose global sql_mode
// is not strict truncates a too-long string, rounds a fraction into an
// INT, zero-fills an invalid date and clips an out-of-range number with
// only a warning; in this mode each is an error, so a value is stored
// exactly or the write fails. ONLY_FULL_GROUP_BY is left out: it refuses
// queries, it does not change what is stored. The mode is fixed rather
// than added to the server's, so the server's other flags (ANSI_QUOTES,
// PIPES_AS_CONCAT, …) can't change what our statements mean.
//
// A DSN that sets sql_mode itself (?sql_mode=…) is taken at its word and
// replaces this: whoever sets it answers for what a non-strict mode
// stores.
const StrictSQLMode = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"

func mysqlTarget(cfg *mysql.Config) Target {
	if _, ok := cfg.Params["sql_mode"]; !ok {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		// The driver sends "SET sql_mode = <value>": the quotes are ours.
		cfg.Params["sql_mode"] = "'" + StrictSQLMode + "'"
	}
	cfg.ParseTime = true
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = true
	cfg.Collation = "utf8mb4_general_ci"
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return Target{
		Dialect:    offsets.MySQL,
		DriverName: "mysql",
		DataSource: cfg.FormatDSN(),
		Display:    redact.DSN("mysql://" + userAt(cfg.User, cfg.Passwd) + cfg.Addr + "/" + cfg.DBName),
	}
}

func userAt(user, pass string) string {
	switch {
	case user == "":
		return ""
	case pass == "":
		return user + "@"
	default:
		return user + ":" + pass + "@"
	}
}
