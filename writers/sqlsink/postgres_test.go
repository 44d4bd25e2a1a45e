package sqlsink

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

func TestParsePostgresDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, display, secret string }{
		{"postgres://mb:pg-secret@127.0.0.1:15432/mbtest?sslmode=disable", "postgres://mb:xxxxx@127.0.0.1:15432/mbtest", "pg-secret"},
		{"postgresql://mb:pg-secret@db.example/mbtest", "postgresql://mb:xxxxx@db.example:5432/mbtest", "pg-secret"},
		{"postgres://mb@db.example:5433/mbtest?password=pg-secret&sslmode=require", "postgres://mb:xxxxx@db.example:5433/mbtest", "pg-secret"},
		{"postgres://mb@db.example/mbtest", "postgres://mb@db.example:5432/mbtest", ""},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			got, err := ParseDSN(tc.dsn)
			if err != nil {
				t.Fatalf("ParseDSN: %v", err)
			}
			if got.Dialect != offsets.Postgres || got.Display != tc.display {
				t.Errorf("got dialect %q display %q, want postgres %q", got.Dialect, got.Display, tc.display)
			}
			if tc.secret != "" && strings.Contains(got.Display, tc.secret) {
				t.Errorf("display %q shows the password", got.Display)
			}
		})
	}
	for _, dsn := range []string{
		"postgres://mb:pg-secret@db.example:notaport/mbtest",
		"postgres://mb:pg-secret@db.example/mbtest?sslmode=bogus",
		"postgres://mb:pg-secret@db.example/mbtest?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
	} {
		_, err := ParseDSN(dsn)
		if !errors.Is(err, writers.ErrBadDSN) {
			t.Errorf("ParseDSN(%q) = %v, want ErrBadDSN", dsn, err)
		}
		if err != nil && strings.Contains(err.Error(), "pg-secret") {
			t.Errorf("ParseDSN(%q) error shows the password: %v", dsn, err)
		}
	}
}

// pgDSN is a fresh database on the test server, or skips.
func pgDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv(testutil.EnvPostgres)
	if dsn == "" {
		t.Skipf("%s not set", testutil.EnvPostgres)
	}
	return testutil.FreshPostgresDatabase(t, dsn)
}

func openPG(t *testing.T, dsn string) *Writer {
	t.Helper()
	w, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.CreateTables(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateTables(t.Context()); err != nil { // idempotent
		t.Fatal(err)
	}
	return w
}

// Keys are bytes: a NUL, bytes that are not UTF-8, backslashes that bytea's
// text syntax would read as escapes ("\x41" is not "A"), and keys that
// differ only in trailing spaces or case are each their own row, and the
// totals add exactly past int64.
func TestPostgresTotalsByteExact(t *testing.T) {
	w := openPG(t, pgDSN(t))
	ctx := context.Background()
	keys := []string{"A", `\x41`, `\101`, "a\x00b", "page-\xff", "page-\xfe", "a", "a ", "Ä"}
	for round := 0; round < 2; round++ {
		tx, err := w.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var rows [][]any
		for _, k := range keys {
			rows = append(rows, []any{"job1", k, int64(1), int64(9_000_000_000_000_000_000 / 2)})
		}
		if err := tx.Upsert(ctx, writers.Totals, rows); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	r, err := w.DB().QueryContext(ctx, `SELECT k, events, amount FROM mb_totals WHERE job = ?`, "job1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var k []byte
		var events int64
		var amount string
		if err := r.Scan(&k, &events, &amount); err != nil {
			t.Fatal(err)
		}
		if events != 2 {
			t.Errorf("key %q: events %d, want 2", k, events)
		}
		got[string(k)] = amount
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(keys) {
		t.Fatalf("got %d keys %q, want %d", len(got), got, len(keys))
	}
	for _, k := range keys {
		if got[k] != "9000000000000000000" {
			t.Errorf("key %q: amount %q, want 9000000000000000000", k, got[k])
		}
	}
}
