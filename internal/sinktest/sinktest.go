package sinktest

import (
	"context"
	"testing"
	"time"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// OpenSQL opens the SQL sink dsn with its tables created; closed at
// cleanup.
func OpenSQL(t testing.TB, dsn string) *sqlsink.Writer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// StoredOffsets returns the job's next offsets for topic from mb_offsets.
func StoredOffsets(t testing.TB, q offsets.Queryer, job, topic string) map[int32]int64 {
	t.Helper()
	pos, err := offsets.Load(t.Context(), q, job, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int32]int64, len(pos))
	for p, v := range pos {
		out[p] = v.NextOffset
	}
	return out
}
