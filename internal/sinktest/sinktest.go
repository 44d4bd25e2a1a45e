// Package sinktest holds test helpers that need the writers (and so can't
// live in internal/testutil, which the writers' own tests import).
package sinktest

import (
	"context"
	"testing"
	"time"

	"github.com/microbatch/microbatch/writers"
)

// OpenSQL opens the SQL sink dsn with its tables created; closed at
// cleanup.
func OpenSQL(t testing.TB, dsn string) *writers.SQL {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := writers.OpenSQL(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}
