package writers_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/microbatch/microbatch/writers"
)

func TestWAL(t *testing.T) {
	ctx := context.Background()
	w, err := writers.OpenSQL(ctx, "sqlite://"+filepath.Join(t.TempDir(), "wal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	l := writers.NewWAL(w, "j", 0)
	if err := l.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	totals := func() (events, amount int64) {
		t.Helper()
		if err := w.DB().QueryRow(`SELECT COALESCE(SUM(events),0), COALESCE(SUM(amount),0) FROM mb_totals WHERE job = 'j'`).Scan(&events, &amount); err != nil {
			t.Fatal(err)
		}
		return events, amount
	}
	write := func(txn int64, amount int64) writers.Pending {
		t.Helper()
		if err := l.Begin(ctx, txn); err != nil {
			t.Fatal(err)
		}
		if err := l.Upsert(t.Context(), writers.Totals, [][]any{{"j", "k", int64(1), amount}}); err != nil {
			t.Fatal(err)
		}
		if err := l.DeadLetters(t.Context(), []writers.DeadLetter{{Job: "j", Topic: "t", Offset: txn, Reason: "bad", Payload: []byte{0, 1}}}); err != nil {
			t.Fatal(err)
		}
		p, err := l.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	p1 := write(1, 1<<53+1) // not exact as a float64: JSON must keep it int64
	if e, a := totals(); e != 0 || a != 0 {
		t.Fatalf("before commit: %d/%d visible, want nothing", e, a)
	}
	if err := l.Commit(ctx, p1); err != nil {
		t.Fatal(err)
	}
	if e, a := totals(); e != 1 || a != 1<<53+1 {
		t.Fatalf("after commit: events %d amount %d", e, a)
	}
	// A replay of the same checkpoint (recovery) is detected, not applied.
	if err := l.Recover(ctx, []writers.Pending{p1}); err != nil {
		t.Fatal(err)
	}
	if e, _ := totals(); e != 1 || l.Rewrites() != 1 {
		t.Fatalf("replay: events %d, rewrites %d; want 1 and 1", e, l.Rewrites())
	}
	// An aborted checkpoint writes nothing.
	p2 := write(2, 5)
	if err := l.Abort(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if e, _ := totals(); e != 1 {
		t.Fatalf("after abort: events %d", e)
	}
	p3 := write(3, 7)
	if err := l.Commit(ctx, p3); err != nil {
		t.Fatal(err)
	}
	// A checkpoint older than what the table holds: the job's history is
	// not this table's. Refused, never silently skipped.
	if err := l.Commit(ctx, p2); !errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("commit of an older checkpoint: %v, want ErrTxnLost", err)
	}
	var dead int
	if err := w.DB().QueryRow(`SELECT COUNT(*) FROM mb_dead_letters WHERE job = 'j'`).Scan(&dead); err != nil || dead != 2 {
		t.Fatalf("dead letters %d (%v), want 2", dead, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
