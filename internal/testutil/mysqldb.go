package testutil

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// FreshMySQLDatabase creates an empty database on the server of dsn (a
// mysql://user:pass@host:port/db URL, as MICROBATCH_TEST_MYSQL) and returns
// dsn naming it instead; it is dropped at cleanup. For tests that need
// tables of their own shape under the standard names (mb_totals as an
// older version made it), which the shared test database can't give them.
func FreshMySQLDatabase(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parsing the MySQL DSN: %v", err)
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	name := "mbtest_" + hex.EncodeToString(suffix)
	exec := func(ctx context.Context, stmt string) error {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, stmt)
		return err
	}
	if err := exec(t.Context(), "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
