package main

import (
	"context"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestSQLJobVerifyWindowsWithLoc: a sink DSN with loc= (go-sql-driver's
// time zone for DATETIME values) doesn't move the windows verify reads.
// The job writes a window's start as UTC text; the driver reads it back
// as that wall clock in loc, which is the same text, not a UTC instant.
func TestSQLJobVerifyWindowsWithLoc(t *testing.T) {
	dsn := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL)) + "?loc=America%2FNew_York"
	ctx := context.Background()
	q, err := sqljob.Compile("INSERT INTO per_minute SELECT `key`, TUMBLE(ts, '1m') AS minute, COUNT(*) AS n FROM events GROUP BY `key`, minute", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatal(err)
	}
	a := q.NewAggregate()
	for _, r := range []string{`{"key":"a","ts":1800000060000}`, `{"key":"a","ts":"2026-12-01T10:00:30Z"}`} {
		if err := a.Add([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Upsert(ctx, q.Upsert(), a.Rows()); err != nil {
		t.Fatal(err)
	}
	c := newComparison(q, a.Rows(), 10)
	if err := (sqlVerify{q: q}).compareMySQL(ctx, w, c); err != nil {
		t.Fatal(err)
	}
	if c.matching != 2 || c.missing+c.extra+c.different != 0 {
		t.Errorf("matching %d, missing %d, extra %d, different %d; want 2 matching: %+v", c.matching, c.missing, c.extra, c.different, c.diffs)
	}
}
