package writers

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/internal/redact"
)

// schemeRE recognises a URL-shaped DSN (the form every sink but a
// go-sql-driver DSN takes); anything else (even with "://" in a
// password or socket path) is a go-sql-driver DSN.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// HasScheme reports whether dsn is URL-shaped (scheme://…). A DSN that is
// not is a go-sql-driver DSN, even with "://" in a password or socket path.
func HasScheme(dsn string) bool { return schemeRE.MatchString(dsn) }

// ParseMySQLURL parses mysql://[user[:password]@]host[:port]/db[?param=value…]
// (params as go-sql-driver's; the port defaults to 3306) into the
// driver's configuration. Errors never quote the password.
func ParseMySQLURL(dsn string) (*mysql.Config, error) {
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
