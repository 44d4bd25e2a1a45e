package sqlsink

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

type dsnCase struct {
	name string
	dsn  string
	// For accepted DSNs:
	dialect offsets.Dialect
	display string
	// mysql: what the driver DSN must hold
	user, passwd, addr, db string
	timeout, readTimeout   time.Duration
	// sqlite: the file part of the data source
	file string
	// For rejected DSNs:
	bad bool
	// secret must appear neither in Display nor in the error.
	secret string
}

var dsnCases = []dsnCase{
	{
		name: "mysql url", dsn: "mysql://mb:mbpass-secret@127.0.0.1:13306/mbtest",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@127.0.0.1:13306/mbtest",
		user: "mb", passwd: "mbpass-secret", addr: "127.0.0.1:13306", db: "mbtest", timeout: 10 * time.Second,
		secret: "mbpass-secret",
	},
	{
		name: "mysql url without port", dsn: "mysql://mb:hunter22@db.example/mbtest",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@db.example:3306/mbtest",
		user: "mb", passwd: "hunter22", addr: "db.example:3306", db: "mbtest", timeout: 10 * time.Second,
		secret: "hunter22",
	},
	{
		name: "mysql url with empty port", dsn: "mysql://mb:hunter22@db.example:/mbtest",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@db.example:3306/mbtest",
		user: "mb", passwd: "hunter22", addr: "db.example:3306", db: "mbtest", timeout: 10 * time.Second,
		secret: "hunter22",
	},
	{
		name: "mysql url without password", dsn: "mysql://mb@db.example:3307/mbtest",
		dialect: offsets.MySQL, display: "mysql://mb@db.example:3307/mbtest",
		user: "mb", addr: "db.example:3307", db: "mbtest", timeout: 10 * time.Second,
	},
	{
		name: "mysql url without user", dsn: "mysql://db.example:3307/mbtest",
		dialect: offsets.MySQL, display: "mysql://db.example:3307/mbtest",
		addr: "db.example:3307", db: "mbtest", timeout: 10 * time.Second,
	},
	{
		name: "mysql url with params", dsn: "mysql://mb:s3cr%40t-pw@h:1/db?timeout=5s&readTimeout=30s&tls=false",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@h:1/db",
		user: "mb", passwd: "s3cr@t-pw", addr: "h:1", db: "db", timeout: 5 * time.Second, readTimeout: 30 * time.Second,
		secret: "s3cr@t-pw",
	},
	{
		name: "mysql url with escaped password", dsn: "mysql://mb:p%2Fa%3Ass%3Fword@h:1/db",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@h:1/db",
		user: "mb", passwd: "p/a:ss?word", addr: "h:1", db: "db", timeout: 10 * time.Second,
		secret: "p/a:ss?word",
	},
	{
		name: "mysql url ipv6", dsn: "mysql://mb:topsecret@[::1]/db",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@[::1]:3306/db",
		user: "mb", passwd: "topsecret", addr: "[::1]:3306", db: "db", timeout: 10 * time.Second,
		secret: "topsecret",
	},
	{
		name: "go-sql-driver dsn", dsn: "mb:mbpass-secret@tcp(127.0.0.1:13306)/mbtest?timeout=3s",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@127.0.0.1:13306/mbtest",
		user: "mb", passwd: "mbpass-secret", addr: "127.0.0.1:13306", db: "mbtest", timeout: 3 * time.Second,
		secret: "mbpass-secret",
	},
	{
		name: "go-sql-driver dsn, @ in password", dsn: "mb:p@ssw0rd!@tcp(h:1)/db",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@h:1/db",
		user: "mb", passwd: "p@ssw0rd!", addr: "h:1", db: "db", timeout: 10 * time.Second,
		secret: "p@ssw0rd!",
	},
	{
		// Valid for the driver; "://" inside the password must not make it
		// an unknown-scheme URL (whose "scheme" would be "mb:pa").
		name: "go-sql-driver dsn, :// in password", dsn: "mb:pa://ss-secret@tcp(h:3306)/db",
		dialect: offsets.MySQL, display: "mysql://mb:xxxxx@h:3306/db",
		user: "mb", passwd: "pa://ss-secret", addr: "h:3306", db: "db", timeout: 10 * time.Second,
		secret: "ss-secret",
	},
	{
		name: "sqlite relative", dsn: "sqlite://data/mb.db",
		dialect: offsets.SQLite, display: "sqlite://data/mb.db", file: "file:data/mb.db",
	},
	{
		name: "sqlite absolute", dsn: "sqlite:///var/lib/mb/mb.db",
		dialect: offsets.SQLite, display: "sqlite:///var/lib/mb/mb.db", file: "file:/var/lib/mb/mb.db",
	},
	{name: "empty", dsn: "", bad: true},
	{name: "unknown scheme", dsn: "oracle://u:pg-secret-pw@h/db", bad: true, secret: "pg-secret-pw"},
	{name: "unknown scheme, unparsable url", dsn: "redis://u:redis-secret@h:xx/%zz", bad: true, secret: "redis-secret"},
	{name: "jdbc url", dsn: "jdbc:mysql://u:jdbc-secret-pw@h:3306/db", bad: true, secret: "jdbc-secret-pw"},
	{name: "scheme is case sensitive", dsn: "MYSQL://u:p@h/db", bad: true},
	{name: "sqlite without path", dsn: "sqlite://", bad: true},
	{name: "sqlite with params", dsn: "sqlite://mb.db?mode=ro", bad: true},
	{name: "sqlite with pragma", dsn: "sqlite:///tmp/mb.db?_pragma=synchronous(OFF)", bad: true},
	{name: "mysql url missing db", dsn: "mysql://u:missing-db-pw@h:1/", bad: true, secret: "missing-db-pw"},
	{name: "mysql url missing path", dsn: "mysql://u:missing-db-pw@h:1", bad: true, secret: "missing-db-pw"},
	{name: "mysql url missing host", dsn: "mysql://u:no-host-pw@/db", bad: true, secret: "no-host-pw"},
	{name: "mysql url nested db path", dsn: "mysql://u:nested-pw@h/db/x", bad: true, secret: "nested-pw"},
	{name: "mysql url bad escape", dsn: "mysql://u:bad-escape-pw@h/d%zzb", bad: true, secret: "bad-escape-pw"},
	{name: "mysql url unknown tls config", dsn: "mysql://u:tls-pw@h/db?tls=bogus", bad: true, secret: "tls-pw"},
	{name: "mysql url bad timeout", dsn: "mysql://u:timeout-pw@h/db?timeout=soon", bad: true, secret: "timeout-pw"},
	{name: "go-sql-driver dsn without slash", dsn: "u:noslash-pw@tcp(h:1)", bad: true, secret: "noslash-pw"},
	{name: "go-sql-driver dsn without db", dsn: "u:nodb-pw@tcp(h:1)/", bad: true, secret: "nodb-pw"},
	{name: "go-sql-driver dsn unterminated address", dsn: "u:unterm-pw@tcp(h:1/db", bad: true, secret: "unterm-pw"},
}

func TestParseSQLDSN(t *testing.T) {
	for _, tc := range dsnCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDSN(tc.dsn)
			if tc.secret != "" {
				if strings.Contains(got.Display, tc.secret) {
					t.Errorf("Display %q contains the password", got.Display)
				}
				if err != nil && strings.Contains(err.Error(), tc.secret) {
					t.Errorf("error %q contains the password", err)
				}
			}
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseDSN(%q) = %+v, want an error", tc.dsn, got)
				}
				if !errors.Is(err, writers.ErrBadDSN) {
					t.Fatalf("ParseDSN(%q) error %v is not ErrBadDSN", tc.dsn, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", tc.dsn, err)
			}
			if got.Dialect != tc.dialect || got.Display != tc.display {
				t.Errorf("Dialect %q Display %q, want %q %q", got.Dialect, got.Display, tc.dialect, tc.display)
			}
			switch tc.dialect {
			case offsets.SQLite:
				if got.DriverName != "sqlite" {
					t.Errorf("DriverName = %q, want sqlite", got.DriverName)
				}
				file, params, ok := strings.Cut(got.DataSource, "?")
				if !ok || file != tc.file {
					t.Errorf("DataSource %q: file part %q, want %q", got.DataSource, file, tc.file)
				}
				for _, p := range []string{"busy_timeout", "journal_mode(WAL)", "synchronous(FULL)", "_txlock=immediate"} {
					if !strings.Contains(params, p) {
						t.Errorf("DataSource %q lacks %s", got.DataSource, p)
					}
				}
			case offsets.MySQL:
				if got.DriverName != "mysql" {
					t.Errorf("DriverName = %q, want mysql", got.DriverName)
				}
				cfg, err := mysql.ParseDSN(got.DataSource)
				if err != nil {
					t.Fatalf("DataSource %q does not parse: %v", got.DataSource, err)
				}
				if cfg.User != tc.user || cfg.Passwd != tc.passwd || cfg.Addr != tc.addr || cfg.DBName != tc.db || cfg.Net != "tcp" {
					t.Errorf("DataSource %q: user %q pass %q net %q addr %q db %q; want %q %q tcp %q %q",
						got.DataSource, cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName, tc.user, tc.passwd, tc.addr, tc.db)
				}
				if !cfg.ParseTime || !cfg.ClientFoundRows || !cfg.InterpolateParams || !strings.HasPrefix(cfg.Collation, "utf8mb4") {
					t.Errorf("DataSource %q: parseTime %v clientFoundRows %v interpolateParams %v collation %q",
						got.DataSource, cfg.ParseTime, cfg.ClientFoundRows, cfg.InterpolateParams, cfg.Collation)
				}
				if cfg.Timeout != tc.timeout || cfg.ReadTimeout != tc.readTimeout {
					t.Errorf("timeout %v readTimeout %v, want %v %v", cfg.Timeout, cfg.ReadTimeout, tc.timeout, tc.readTimeout)
				}
			}
			if tc.passwd != "" && strings.Contains(got.Display, tc.passwd) {
				t.Errorf("Display %q contains the password %q", got.Display, tc.passwd)
			}
		})
	}
}

// secretRE finds "user:SECRET@" shapes; SECRET stops at characters that end
// a userinfo in a URL or a go-sql-driver DSN.
var secretRE = regexp.MustCompile(`([A-Za-z0-9_.-]*):([^:@/?#()\s]{6,})@`)

var testSchemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// userinfoRegion is the part of dsn where a userinfo can be: after
// "scheme://" up to the next '/', or, in a go-sql-driver DSN (no valid
// scheme in front of a "://"), before the last '/' (what follows is the
// database name and parameters).
func userinfoRegion(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 && testSchemeRE.MatchString(dsn[:i]) {
		rest := dsn[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	if j := strings.LastIndexByte(dsn, '/'); j >= 0 {
		return dsn[:j]
	}
	return ""
}

// texts Display may hold without it coming from the password.
const displayBoilerplate = "mysql://xxxxx@127.0.0.1:3306/localhost:3306/sqlite://"

// FuzzParseDSN: ParseDSN never panics, a MySQL target's Display never
// shows a password-looking userinfo, and errors never do either.
func FuzzParseDSN(f *testing.F) {
	for _, tc := range dsnCases {
		f.Add(tc.dsn)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		got, err := ParseDSN(dsn)
		if err != nil && !errors.Is(err, writers.ErrBadDSN) {
			t.Fatalf("ParseDSN(%q) error %v is not ErrBadDSN", dsn, err)
		}
		if err == nil && (got.DriverName == "" || got.DataSource == "" || got.Display == "") {
			t.Fatalf("ParseDSN(%q) = %+v with no error", dsn, got)
		}
		for _, m := range secretRE.FindAllStringSubmatch(userinfoRegion(dsn), -1) {
			secret := m[2]
			// Only a secret that occurs once in the input and is no part of
			// what Display always holds can be blamed on the password.
			if strings.Count(dsn, secret) != 1 || strings.Contains(displayBoilerplate, secret) {
				continue
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("ParseDSN(%q): error %q shows secret %q", dsn, err, secret)
			}
			// sqlite:// paths are file names, shown as given.
			if err == nil && got.Dialect == offsets.MySQL && strings.Contains(got.Display, secret) {
				t.Fatalf("ParseDSN(%q): Display %q shows secret %q", dsn, got.Display, secret)
			}
		}
	})
}

// TestParseSQLDSNErrorsHidePasswords: passwords that url.Parse does not see
// as passwords (a "/" in them) must not reach error messages either.
func TestParseSQLDSNErrorsHidePasswords(t *testing.T) {
	for _, dsn := range []string{
		"mysql://app:123/45@db1/db",
		"mysql://app:pa/ss@db1:3306/db/extra",
		"mysql://app:s3cr%zz@db1/db",
		"mysql://app:pw@db1/db?badparam=%zz",
	} {
		_, err := ParseDSN(dsn)
		if err == nil {
			t.Errorf("ParseDSN(%q) accepted it", dsn)
			continue
		}
		for _, secret := range []string{"123/45", "pa/ss", "s3cr", ":pw@"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("ParseDSN(%q) error %q shows %q", dsn, err, secret)
			}
		}
	}
}
