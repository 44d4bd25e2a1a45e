package writers_test

import (
	"crypto/x509"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

func TestWithPassword(t *testing.T) {
	const pw = "p@ss/w:rd"
	for _, tc := range []struct{ dsn, wantErr string }{
		{"mysql://mb@db:3306/mb?tls=true", ""},
		{"mb@tcp(db:3306)/mb", ""},
		{"redis://127.0.0.1:6379/0", ""},
		{"rediss://default@cache:6380/1", ""},
		{"mysql://mb:old@db/mb", "has a password already"},
		{"mb:old@tcp(db:3306)/mb", "has a password already"},
		{"sqlite:///tmp/x.db", "takes no password"},
	} {
		got, err := writers.WithPassword(tc.dsn, pw)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.dsn, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "old") {
				t.Errorf("%s: error shows the old password: %v", tc.dsn, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.dsn, err)
			continue
		}
		// The password arrives intact, and is hidden in the display.
		if strings.HasPrefix(got, "redis") {
			opts, display, err := redissink.ParseDSN(got)
			if err != nil || opts.Password != pw || strings.Contains(display, pw) {
				t.Errorf("%s → %s: password %q, display %s, err %v", tc.dsn, got, opts.Password, display, err)
			}
			continue
		}
		target, err := sqlsink.ParseDSN(got)
		if err != nil {
			t.Errorf("%s → %v", tc.dsn, err)
			continue
		}
		cfg, err := mysql.ParseDSN(target.DataSource)
		if err != nil || cfg.Passwd != pw || strings.Contains(target.Display, pw) {
			t.Errorf("%s: password %q, display %s, err %v", tc.dsn, cfg.Passwd, target.Display, err)
		}
	}
}

// TestSQLDSNTLS checks that ?tls= reaches the driver in both DSN forms.
func TestSQLDSNTLS(t *testing.T) {
	for _, dsn := range []string{"mysql://mb:pw@db:3306/mb?tls=true", "mb:pw@tcp(db:3306)/mb?tls=true",
		"mysql://mb:pw@db/mb?tls=skip-verify", "mysql://mb:pw@db/mb?tls=preferred"} {
		target, err := sqlsink.ParseDSN(dsn)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		cfg, err := mysql.ParseDSN(target.DataSource)
		if err != nil || cfg.TLS == nil {
			t.Errorf("%s: TLS lost (%s, %v)", dsn, target.DataSource, err)
		}
		if strings.Contains(target.Display, "pw") {
			t.Errorf("%s: display %s shows the password", dsn, target.Display)
		}
	}
}

func TestWithRootCAs(t *testing.T) {
	roots := x509.NewCertPool()
	got, err := writers.WithRootCAs("mysql://mb:pw@db:3306/mb", roots)
	if err != nil {
		t.Fatal(err)
	}
	target, err := sqlsink.ParseDSN(got)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(target.DataSource)
	if err != nil || cfg.TLS == nil || cfg.TLS.RootCAs != roots || cfg.TLS.ServerName != "db" {
		t.Fatalf("%s: TLS config not the registered one (%v)", target.DataSource, err)
	}
	if _, err := writers.WithRootCAs("mysql://mb:pw@db/mb?tls=skip-verify", roots); err == nil {
		t.Error("a CA file with tls=skip-verify was accepted")
	}
	if _, err := writers.WithRootCAs("redis://cache:6379/0", roots); err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Errorf("redis:// with a CA file: %v", err)
	}
	if _, err := writers.WithRootCAs("rediss://cache:6380/0", roots); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = writers.WithRootCAs("rediss://x/0", nil) })
	opts, _, err := redissink.ParseDSN("rediss://cache:6380/0")
	if err != nil || opts.TLSConfig == nil || opts.TLSConfig.RootCAs != roots {
		t.Fatalf("rediss:// does not use the roots (%v)", err)
	}
}

// writers.FuzzWithPassword: a password put into a DSN reaches the driver intact
// and never shows in the display or an error.
func FuzzWithPassword(f *testing.F) {
	for _, dsn := range []string{"mysql://mb@db:3306/mb", "mb@tcp(db:3306)/mb?tls=true", "redis://h:1/0", "rediss://u@h/2"} {
		f.Add(dsn, "Secret-Pw-123")
	}
	f.Fuzz(func(t *testing.T, dsn, pw string) {
		if len(pw) < 8 || strings.Contains(dsn, pw) {
			return // the DSN's own text may be shown
		}
		got, err := writers.WithPassword(dsn, pw)
		if err != nil {
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("error shows the password: %v", err)
			}
			return
		}
		if strings.HasPrefix(got, "redis") {
			opts, display, err := redissink.ParseDSN(got)
			if err == nil && (opts.Password != pw || strings.Contains(display, pw)) {
				t.Fatalf("%q: password %q, display %q", got, opts.Password, display)
			}
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Fatalf("error shows the password: %v", err)
			}
			return
		}
		target, err := sqlsink.ParseDSN(got)
		if err != nil {
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("error shows the password: %v", err)
			}
			return
		}
		if strings.Contains(target.Display, pw) {
			t.Fatalf("display %q shows the password", target.Display)
		}
	})
}
