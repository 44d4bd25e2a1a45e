package redact

import (
	"strings"
	"testing"
	"unicode"
)

func TestDSN(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mysql://mb:S3CRETPW@db:3306/app", "mysql://mb:xxxxx@db:3306/app"},
		{"mysql://mb:S3CRETPW@db:3306/app?tls=true&timeout=zz", "mysql://mb:xxxxx@db:3306/app?tls=true&timeout=zz"},
		{"redis://:S3CRETPW@cache:6379/0", "redis://:xxxxx@cache:6379/0"},
		{"rediss://app:S3CRETPW@cache:6380/1", "rediss://app:xxxxx@cache:6380/1"},
		{"kafka://u:S3CRETPW@k1:9092,k2:9092/out", "kafka://u:xxxxx@k1:9092,k2:9092/out"},
		// Passwords url.Parse would not see as passwords.
		{"mysql://mb:pa/ss@db/app", "mysql://mb:xxxxx@db/app"},
		{"mysql://mb:p@ss:w?rd@db/app", "mysql://mb:xxxxx@db/app"},
		{"mysql://mb:s3cr%zz@db/app", "mysql://mb:xxxxx@db/app"},
		// go-sql-driver DSNs.
		{"mb:S3CRETPW@tcp(db:3306)/app?parseTime=true", "mb:xxxxx@tcp(db:3306)/app?parseTime=true"},
		{"mb:p@ss@unix(/run/mysqld.sock)/app", "mb:xxxxx@unix(/run/mysqld.sock)/app"},
		{":S3CRETPW@/app", ":xxxxx@/app"},
		// No password: unchanged, the user kept.
		{"mysql://mb@db:3306/app", "mysql://mb@db:3306/app"},
		{"redis://cache:6379/0", "redis://cache:6379/0"},
		{"mb@tcp(db:3306)/app", "mb@tcp(db:3306)/app"},
		{"sqlite:///var/lib/mb.db", "sqlite:///var/lib/mb.db"},
		{"file://out", "file://out"},
		{"", ""},
		// Already hidden: the same again.
		{"mysql://mb:xxxxx@db:3306/app", "mysql://mb:xxxxx@db:3306/app"},
	} {
		if got := DSN(tc.in); got != tc.want {
			t.Errorf("DSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`microbatch: strategy idempotent does not go with sink mysql://mb:S3CRETPW@127.0.0.1:3306/db (idempotent is the Redis strategy)`,
			`microbatch: strategy idempotent does not go with sink mysql://mb:xxxxx@127.0.0.1:3306/db (idempotent is the Redis strategy)`},
		{`bad sink DSN: "redis://:S3CRETPW@h:1/x": the path must be a database number`,
			`bad sink DSN: "redis://:xxxxx@h:1/x": the path must be a database number`},
		{`connecting to Kafka u:S3CRETPW@127.0.0.1:9092: dial tcp: too many colons`,
			`connecting to Kafka u:S3CRETPW@127.0.0.1:9092: dial tcp: too many colons`}, // no DSN shape (a kafka:// sink refuses a user before this)
		{`sink mb:S3CRETPW@tcp(db:3306)/app: refused`, `sink mb:xxxxx@tcp(db:3306)/app: refused`},
		{`sink=mb:S3CRETPW@tcp(db:3306)/app level=ERROR`, `sink=mb:xxxxx@tcp(db:3306)/app level=ERROR`},
		// JSON, and a password holding an escaped quote.
		{`{"level":"ERROR","sink":"mysql://mb:S3CRETPW@h:1/db","user":"a@b"}`, `{"level":"ERROR","sink":"mysql://mb:xxxxx@h:1/db","user":"a@b"}`},
		{`{"err":"sink \"mysql://mb:S3C\"RETPW@h:1/db\" refused"}`, `{"err":"sink \"mysql://mb:xxxxx@h:1/db\" refused"}`},
		// Several in one line.
		{`a redis://:S3CRETPW@r:1/0 and mysql://u:S3CRETPW@m/db`, `a redis://:xxxxx@r:1/0 and mysql://u:xxxxx@m/db`},
		// Syntax hints and other text stay as they are.
		{`want redis://[:password@]host:port/db`, `want redis://[:password@]host:port/db`},
		{`want mysql://[user[:password]@]host[:port]/db`, `want mysql://[user[:password]@]host[:port]/db`},
		{`not a go-sql-driver DSN ([user[:password]@]tcp(host:port)/db)`, `not a go-sql-driver DSN ([user[:password]@]tcp(host:port)/db)`},
		{`Error 1045 (28000): Access denied for user 'mb'@'127.0.0.1' (using password: YES)`, `Error 1045 (28000): Access denied for user 'mb'@'127.0.0.1' (using password: YES)`},
		{`time=2026-12-01T14:32:14.123+01:00 level=INFO msg="job started" sink=mysql://mb:xxxxx@db:3306/app`,
			`time=2026-12-01T14:32:14.123+01:00 level=INFO msg="job started" sink=mysql://mb:xxxxx@db:3306/app`},
		{`dial tcp [::1]:3306: connect: connection refused`, `dial tcp [::1]:3306: connect: connection refused`},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// FuzzDSN: whatever the user, password and rest, DSN hides exactly the
// password of scheme://user:password@rest and of user:password@rest (a
// go-sql-driver DSN), and Text does the same for such a DSN inside a line.
func FuzzDSN(f *testing.F) {
	f.Add("mb", "S3CRETPW", "db:3306/app?tls=true")
	f.Add("", "p@ss/w:rd", "cache:6379/0")
	f.Add("app", "x", "tcp(db:3306)/app")
	f.Fuzz(func(t *testing.T, user, password, rest string) {
		if strings.ContainsAny(user, ":@") || strings.Contains(rest, "@") || password == "" {
			t.Skip()
		}
		for _, prefix := range []string{"mysql://", "redis://", ""} {
			in := prefix + user + ":" + password + "@" + rest
			want := prefix + user + ":" + Mask + "@" + rest
			if got := DSN(in); got != want {
				t.Fatalf("DSN(%q) = %q, want %q", in, got, want)
			}
		}
		// In text a DSN is one run of non-space, non-quote characters; a URL
		// user starting with '[' is a syntax hint.
		all := user + password + rest
		if prefix := "mysql://"; !strings.ContainsFunc(all, unicode.IsSpace) && !strings.ContainsAny(all, `"\`) && !strings.HasPrefix(user, "[") {
			in := prefix + user + ":" + password + "@" + rest
			want := prefix + user + ":" + Mask + "@" + rest
			if got := Text("sink " + in + " refused"); got != "sink "+want+" refused" {
				t.Fatalf("Text(%q) = %q, want the DSN as %q", "sink "+in+" refused", got, want)
			}
		}
	})
}
