package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// FreshPostgresDatabase creates an empty database on the server of dsn (a
// postgres://user:pass@host:port/db?… URL, as MICROBATCH_TEST_POSTGRES; the
// user needs CREATEDB) and returns dsn naming it instead; it is dropped at
// cleanup, sessions still connected to it ended (DROP DATABASE … WITH
// (FORCE)). For tests that need tables of their own shape under the
// standard names, which the shared test database can't give them.
func FreshPostgresDatabase(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parsing the PostgreSQL DSN: %v", err)
	}
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	name := "mbtest_" + hex.EncodeToString(suffix)
	exec := func(ctx context.Context, stmt string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, stmt)
		return err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if err := exec(t.Context(), "CREATE DATABASE "+ident); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
