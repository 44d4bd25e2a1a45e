package writers

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/offsets"
)

// SQLTarget is a parsed SQL sink address.
type SQLTarget struct {
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

// schemeRE recognises a URL-shaped DSN; anything else (even with "://" in a
// password or socket path) is a go-sql-driver DSN.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// ParseSQLDSN accepts
//
//	mysql://user:pass@host:port/db[?param=value…]   (params as go-sql-driver's)
//	user:pass@tcp(host:port)/db[?…]                  (a go-sql-driver DSN)
//	sqlite://path/to/file.db                         (relative or absolute)
//	sqlite:///abs/path/file.db
//
// MySQL connections always get parseTime, utf8mb4, clientFoundRows and
// interpolateParams (one round trip a statement).
func ParseSQLDSN(dsn string) (SQLTarget, error) {
	switch {
	case dsn == "":
		return SQLTarget{}, fmt.Errorf("%w: empty", ErrBadDSN)
	case strings.HasPrefix(dsn, "sqlite://"):
		path := strings.TrimPrefix(dsn, "sqlite://")
		if path == "" {
			return SQLTarget{}, fmt.Errorf("%w: %q has no file path", ErrBadDSN, dsn)
		}
		if i := strings.IndexByte(path, '?'); i >= 0 {
			return SQLTarget{}, fmt.Errorf("%w: %q: sqlite DSNs take no parameters", ErrBadDSN, dsn)
		}
		// FULL sync: a committed batch survives power loss, not only a crash.
		// The path is escaped: in a SQLite URI "#" and "%" would silently
		// name another file.
		src := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
		return SQLTarget{Dialect: offsets.SQLite, DriverName: "sqlite", DataSource: src, Display: dsn, File: path}, nil
	case strings.HasPrefix(dsn, "mysql://"):
		cfg, err := mysqlURL(dsn)
		if err != nil {
			return SQLTarget{}, err
		}
		return mysqlTarget(cfg), nil
	case schemeRE.MatchString(dsn):
		// Name only the scheme: the rest may hold a password.
		scheme, _, _ := strings.Cut(dsn, "://")
		return SQLTarget{}, fmt.Errorf("%w: unknown scheme %q (want mysql:// or sqlite://)", ErrBadDSN, scheme)
	default:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return SQLTarget{}, fmt.Errorf("%w: not a go-sql-driver DSN ([user[:password]@]tcp(host:port)/db)", ErrBadDSN)
		}
		if cfg.DBName == "" {
			return SQLTarget{}, fmt.Errorf("%w: no database name ([user[:password]@]tcp(host:port)/db)", ErrBadDSN)
		}
		return mysqlTarget(cfg), nil
	}
}

func mysqlURL(dsn string) (*mysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a URL", ErrBadDSN, redact.DSN(dsn))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if u.Host == "" || db == "" || strings.Contains(db, "/") {
		return nil, fmt.Errorf("%w: %q: want mysql://[user[:password]@]host[:port]/db", ErrBadDSN, redact.DSN(dsn))
	}
	cfg := mysql.NewConfig()
	cfg.Net = "tcp"
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	cfg.Addr = net.JoinHostPort(u.Hostname(), port)
	cfg.DBName = db
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	if u.RawQuery != "" {
		// Reuse the driver's own parameter parsing.
		parsed, err := mysql.ParseDSN("/?" + u.RawQuery)
		if err != nil {
			return nil, fmt.Errorf("%w: parameters of %q: %v", ErrBadDSN, redact.DSN(dsn), err)
		}
		parsed.User, parsed.Passwd, parsed.Net, parsed.Addr, parsed.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
		cfg = parsed
	}
	return cfg, nil
}

func mysqlTarget(cfg *mysql.Config) SQLTarget {
	cfg.ParseTime = true
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = true
	cfg.Collation = "utf8mb4_general_ci"
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return SQLTarget{
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
