package writers

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/internal/redact"
)

// WithPassword returns dsn with its password set to password, for a
// password kept out of the DSN (a file, a secret store). It accepts the
// URL forms mysql://, redis:// and rediss:// and a go-sql-driver DSN;
// a DSN that already holds a password is an error, so two sources never
// disagree silently. Errors never quote the password.
func WithPassword(dsn, password string) (string, error) {
	scheme, _, isURL := strings.Cut(dsn, "://")
	switch {
	case isURL && (scheme == "mysql" || scheme == "redis" || scheme == "rediss"):
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("%w: %q is not a URL", ErrBadDSN, redact.DSN(dsn))
		}
		user := ""
		if u.User != nil {
			if _, set := u.User.Password(); set {
				return "", fmt.Errorf("%w: %s has a password already; give it in the DSN or in the password file, not both", ErrBadDSN, redact.DSN(dsn))
			}
			user = u.User.Username()
		}
		u.User = url.UserPassword(user, password)
		return u.String(), nil
	case isURL && schemeRE.MatchString(dsn):
		return "", fmt.Errorf("%w: a %s:// sink takes no password", ErrBadDSN, scheme)
	default:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return "", fmt.Errorf("%w: not a go-sql-driver DSN ([user[:password]@]tcp(host:port)/db)", ErrBadDSN)
		}
		if cfg.Passwd != "" {
			return "", fmt.Errorf("%w: the DSN has a password already; give it in the DSN or in the password file, not both", ErrBadDSN)
		}
		cfg.Passwd = password
		return cfg.FormatDSN(), nil
	}
}

// MySQLTLSName is the go-sql-driver TLS configuration WithRootCAs
// registers; a DSN selects it with tls=microbatch.
const MySQLTLSName = "microbatch"

var redisTLS struct {
	sync.Mutex
	roots *x509.CertPool
}

// WithRootCAs makes the sink named by dsn trust the certificates in roots
// instead of the system's, and returns the DSN to open:
//
//   - MySQL (mysql:// or go-sql-driver): registers the TLS configuration
//     "microbatch" with the driver and sets tls=microbatch; a DSN with
//     tls=skip-verify or tls=false is refused as contradictory.
//   - rediss://: roots apply to every rediss:// sink this process opens.
//
// Other sinks (redis:// without TLS, sqlite://) are an error.
func WithRootCAs(dsn string, roots *x509.CertPool) (string, error) {
	scheme, _, isURL := strings.Cut(dsn, "://")
	switch {
	case isURL && scheme == "rediss":
		redisTLS.Lock()
		redisTLS.roots = roots
		redisTLS.Unlock()
		return dsn, nil
	case isURL && scheme == "redis":
		return "", fmt.Errorf("%w: a CA file needs a TLS sink: use rediss:// instead of redis://", ErrBadDSN)
	case isURL && scheme != "mysql":
		return "", fmt.Errorf("%w: a %s:// sink takes no CA file", ErrBadDSN, scheme)
	}
	var cfg *mysql.Config
	var err error
	if isURL {
		cfg, err = ParseMySQLURL(dsn)
	} else if cfg, err = mysql.ParseDSN(dsn); err != nil {
		err = fmt.Errorf("%w: not a go-sql-driver DSN ([user[:password]@]tcp(host:port)/db)", ErrBadDSN)
	}
	if err != nil {
		return "", err
	}
	if cfg.TLS != nil && (cfg.TLS.InsecureSkipVerify || cfg.TLS.RootCAs != nil) {
		return "", fmt.Errorf("%w: a CA file and tls=skip-verify contradict each other", ErrBadDSN)
	}
	host, _, _ := strings.Cut(cfg.Addr, ":")
	if strings.HasPrefix(cfg.Addr, "[") {
		host = strings.Trim(strings.SplitN(cfg.Addr, "]", 2)[0], "[")
	}
	if err := mysql.RegisterTLSConfig(MySQLTLSName, &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12}); err != nil {
		return "", fmt.Errorf("sink TLS: %w", err)
	}
	cfg.TLS, cfg.TLSConfig = nil, MySQLTLSName
	return cfg.FormatDSN(), nil
}

// RedisRootCAs returns the roots WithRootCAs set for rediss:// sinks (nil:
// the system's). The Redis sink (writers/redissink) dials with them.
func RedisRootCAs() *x509.CertPool {
	redisTLS.Lock()
	defer redisTLS.Unlock()
	return redisTLS.roots
}
