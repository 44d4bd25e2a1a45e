package redissink

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/writers"
)

// Client defaults. Reads wait long because a fold of a large batch runs as
// one script and answers only when it is done.
const (
	dialTimeout  = 5 * time.Second
	readTimeout  = 30 * time.Second
	writeTimeout = 30 * time.Second
	defaultPort  = "6379"
)

// schemeRE recognises a URL-shaped DSN, to tell an unknown scheme from a
// DSN that is no URL at all.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// ParseDSN accepts
//
//	redis://[[user]:password@]host[:port][/db]     (port 6379, db 0 by default)
//	rediss://…                                     (the same over TLS)
//
// The options it returns disable go-redis's own command retries: whether a
// command may be repeated is the caller's decision (IsRetryable), as with
// the SQL writer. display is the address with the password hidden
// (redact.DSN); errors never contain the password. A rediss:// sink trusts
// the roots set by writers.WithRootCAs, else the system's.
func ParseDSN(dsn string) (opts *redis.Options, display string, err error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || (scheme != "redis" && scheme != "rediss") {
		if ok && schemeRE.MatchString(dsn) {
			return nil, "", fmt.Errorf("%w: unknown scheme %q (want redis:// or rediss://)", writers.ErrBadDSN, scheme)
		}
		return nil, "", fmt.Errorf("%w: want redis://[:password@]host:port/db", writers.ErrBadDSN)
	}
	// url.Parse's own errors quote the whole DSN, password included.
	u, perr := url.Parse(dsn)
	if perr != nil {
		return nil, "", fmt.Errorf("%w: %q is not a URL", writers.ErrBadDSN, redact.DSN(dsn))
	}
	if u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, "", fmt.Errorf("%w: %q: want redis://[:password@]host:port/db (no parameters)", writers.ErrBadDSN, redact.DSN(dsn))
	}
	port, db, err := portAndDB(u, dsn)
	if err != nil {
		return nil, "", err
	}
	opts = &redis.Options{
		Addr:                  net.JoinHostPort(u.Hostname(), port),
		DB:                    db,
		DialTimeout:           dialTimeout,
		ReadTimeout:           readTimeout,
		WriteTimeout:          writeTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
	userinfo := ""
	if u.User != nil {
		opts.Username = u.User.Username()
		opts.Password, _ = u.User.Password()
		userinfo = opts.Username
		if opts.Password != "" {
			userinfo += ":" + opts.Password
		}
		if userinfo != "" {
			userinfo += "@"
		}
	}
	if scheme == "rediss" {
		opts.TLSConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12, RootCAs: writers.RedisRootCAs()}
	}
	return opts, redact.DSN(scheme + "://" + userinfo + opts.Addr + "/" + strconv.Itoa(db)), nil
}

// portAndDB are u's port (the default if none) and database number.
func portAndDB(u *url.URL, dsn string) (port string, db int, err error) {
	port = u.Port()
	if port == "" {
		port = defaultPort
	} else if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", 0, fmt.Errorf("%w: %q: bad port", writers.ErrBadDSN, redact.DSN(dsn))
	}
	if path := strings.TrimPrefix(u.Path, "/"); path != "" {
		n, err := strconv.Atoi(path)
		if err != nil || n < 0 {
			return "", 0, fmt.Errorf("%w: %q: the path must be a database number", writers.ErrBadDSN, redact.DSN(dsn))
		}
		db = n
	}
	return port, db, nil
}
