package redissink

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/writers"
)

type redisDSNCase struct {
	name, dsn       string
	addr, user, pwd string
	db              int
	tls             bool
	display         string
	bad             bool
	secret          string // must appear neither in display nor in the error
}

var redisDSNCases = []redisDSNCase{
	{name: "plain", dsn: "redis://127.0.0.1:16379/0", addr: "127.0.0.1:16379", display: "redis://127.0.0.1:16379/0"},
	{name: "defaults", dsn: "redis://cache.example", addr: "cache.example:6379", display: "redis://cache.example:6379/0"},
	{name: "db", dsn: "redis://cache.example:7000/3", addr: "cache.example:7000", db: 3, display: "redis://cache.example:7000/3"},
	{name: "password only", dsn: "redis://:s3cret-pw@h:6380/1", addr: "h:6380", pwd: "s3cret-pw", db: 1,
		display: "redis://:xxxxx@h:6380/1", secret: "s3cret-pw"},
	{name: "user and password", dsn: "redis://mb:s3cret-pw@h:6380/2", addr: "h:6380", user: "mb", pwd: "s3cret-pw", db: 2,
		display: "redis://mb:xxxxx@h:6380/2", secret: "s3cret-pw"},
	{name: "escaped password", dsn: "redis://:p%40ss%2Fw0rd@h/0", addr: "h:6379", pwd: "p@ss/w0rd",
		display: "redis://:xxxxx@h:6379/0", secret: "p@ss/w0rd"},
	{name: "user only", dsn: "redis://mb@h:6379/0", addr: "h:6379", user: "mb", display: "redis://mb@h:6379/0"},
	{name: "ipv6", dsn: "redis://[::1]:6379/0", addr: "[::1]:6379", display: "redis://[::1]:6379/0"},
	{name: "tls", dsn: "rediss://:s3cret-pw@h:6380/0", addr: "h:6380", pwd: "s3cret-pw", tls: true,
		display: "rediss://:xxxxx@h:6380/0", secret: "s3cret-pw"},

	{name: "empty", dsn: "", bad: true},
	{name: "no scheme", dsn: "127.0.0.1:6379", bad: true},
	{name: "other scheme", dsn: "mysql://u:s3cret-pw@h/db", bad: true, secret: "s3cret-pw"},
	{name: "no host", dsn: "redis://:s3cret-pw@/0", bad: true, secret: "s3cret-pw"},
	{name: "db not a number", dsn: "redis://:s3cret-pw@h:6379/zero", bad: true, secret: "s3cret-pw"},
	{name: "db path too deep", dsn: "redis://:s3cret-pw@h:6379/0/1", bad: true, secret: "s3cret-pw"},
	{name: "bad port", dsn: "redis://:s3cret-pw@h:99999/0", bad: true, secret: "s3cret-pw"},
	{name: "parameters", dsn: "redis://:s3cret-pw@h:6379/0?dial_timeout=1s", bad: true, secret: "s3cret-pw"},
	{name: "unescaped slash in password", dsn: "redis://:s3cret/pw@h:6379/0", bad: true, secret: "s3cret/pw"},
	{name: "unescaped hash in password", dsn: "redis://:s3c#ret-pw@h:6379/0", bad: true, secret: "ret-pw"},
	{name: "control character", dsn: "redis://:s3cret-pw\x7f@h:6379/0", bad: true, secret: "s3cret-pw"},
}

func TestParseRedisDSN(t *testing.T) {
	for _, c := range redisDSNCases {
		t.Run(c.name, func(t *testing.T) {
			opts, display, err := ParseDSN(c.dsn)
			if c.secret != "" {
				if strings.Contains(display, c.secret) {
					t.Errorf("display %q shows the password", display)
				}
				if err != nil && strings.Contains(err.Error(), c.secret) {
					t.Errorf("error %q shows the password", err)
				}
			}
			if c.bad {
				if !errors.Is(err, writers.ErrBadDSN) {
					t.Fatalf("ParseDSN(%q) = %v, want writers.ErrBadDSN", c.dsn, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", c.dsn, err)
			}
			if opts.Addr != c.addr || opts.Username != c.user || opts.Password != c.pwd || opts.DB != c.db || (opts.TLSConfig != nil) != c.tls {
				t.Errorf("options = addr %q user %q password %q db %d tls %v, want %q %q %q %d %v",
					opts.Addr, opts.Username, opts.Password, opts.DB, opts.TLSConfig != nil, c.addr, c.user, c.pwd, c.db, c.tls)
			}
			if display != c.display {
				t.Errorf("display = %q, want %q", display, c.display)
			}
			if opts.MaxRetries != -1 {
				t.Errorf("MaxRetries = %d: go-redis would repeat commands behind the caller's back", opts.MaxRetries)
			}
		})
	}
}

func FuzzParseRedisDSN(f *testing.F) {
	for _, c := range redisDSNCases {
		f.Add(c.dsn)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		opts, display, err := ParseDSN(dsn)
		if err != nil {
			if !errors.Is(err, writers.ErrBadDSN) {
				t.Fatalf("error %v does not wrap writers.ErrBadDSN", err)
			}
			return
		}
		if len(opts.Password) >= 4 && strings.Contains(display, opts.Password) {
			t.Fatalf("display %q shows password %q", display, opts.Password)
		}
	})
}

func TestOpenRedisErrorsHidePassword(t *testing.T) {
	dsn := redisTestDSN(t)
	opts, _, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// No such user on the test server: AUTH fails, and the error must not
	// repeat the password.
	const secret = "not-the-pw-4711"
	_, err = Open(t.Context(), fmt.Sprintf("redis://mb-no-such-user:%s@%s/%d", secret, opts.Addr, opts.DB))
	if err == nil {
		t.Skip("the test server accepted a made-up password")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error %q shows the password", err)
	}
	if !strings.Contains(err.Error(), "mb-no-such-user:xxxxx@") {
		t.Errorf("error %q does not name the sink", err)
	}
}

// TestWithPasswordRedis: a password writers.WithPassword puts into a
// redis:// or rediss:// DSN reaches the client intact and is hidden in the
// display.
func TestWithPasswordRedis(t *testing.T) {
	const pw = "p@ss/w:rd"
	for _, dsn := range []string{"redis://127.0.0.1:6379/0", "rediss://default@cache:6380/1"} {
		got, err := writers.WithPassword(dsn, pw)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		opts, display, err := ParseDSN(got)
		if err != nil || opts.Password != pw || strings.Contains(display, pw) {
			t.Errorf("%s → %s: password %q, display %s, err %v", dsn, got, opts.Password, display, err)
		}
	}
}

// FuzzWithPasswordRedis: a password put into a Redis DSN never shows in
// the display or an error, and reaches the client intact.
func FuzzWithPasswordRedis(f *testing.F) {
	for _, dsn := range []string{"redis://h:1/0", "rediss://u@h/2"} {
		f.Add(dsn, "Secret-Pw-123")
	}
	f.Fuzz(func(t *testing.T, dsn, pw string) {
		if len(pw) < 8 || strings.Contains(dsn, pw) || !strings.HasPrefix(dsn, "redis") {
			return // the DSN's own text may be shown
		}
		got, err := writers.WithPassword(dsn, pw)
		if err != nil {
			return // writers' FuzzWithPassword checks its errors
		}
		opts, display, err := ParseDSN(got)
		if err == nil && (opts.Password != pw || strings.Contains(display, pw)) {
			t.Fatalf("%q: password %q, display %q", got, opts.Password, display)
		}
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Fatalf("error shows the password: %v", err)
		}
	})
}

// TestRedisRootCAs: a rediss:// sink dials with the roots of
// writers.WithRootCAs.
func TestRedisRootCAs(t *testing.T) {
	roots := x509.NewCertPool()
	if _, err := writers.WithRootCAs("rediss://cache:6380/0", roots); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = writers.WithRootCAs("rediss://x/0", nil) })
	opts, _, err := ParseDSN("rediss://cache:6380/0")
	if err != nil || opts.TLSConfig == nil || opts.TLSConfig.RootCAs != roots {
		t.Fatalf("rediss:// does not use the roots (%v)", err)
	}
}
