package sqlsink

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// Source positions on every SQL sink: a chunk commits with its position,
// a replay and a rolled-back chunk change nothing, a newer claim fences the
// older one.
func TestSQLSourcePositions(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		ctx := t.Context()
		job := uniqueJob(t)
		if _, ok, err := w.SourcePosition(ctx, job, "in.csv"); err != nil || ok {
			t.Fatalf("unclaimed source: ok=%v err=%v", ok, err)
		}
		claim, err := w.ClaimSource(ctx, job, "in.csv")
		if err != nil {
			t.Fatal(err)
		}
		if claim.Position != "" || claim.Epoch != 1 {
			t.Fatalf("first claim = %+v, want position \"\" epoch 1", claim)
		}
		chunk := func(a offsets.SourceAdvance, n int64, commit bool) error {
			tx, err := w.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := tx.Upsert(ctx, writers.Totals, [][]any{{job, "k", n, n}}); err != nil {
				t.Fatal(err)
			}
			if err := tx.AdvanceSource(ctx, a); err != nil {
				return err
			}
			if !commit {
				return nil // rolled back by the defer
			}
			return tx.Commit()
		}
		a1 := offsets.SourceAdvance{Job: job, Source: "in.csv", From: "", To: "line:10", Epoch: claim.Epoch}
		if err := chunk(a1, 10, true); err != nil {
			t.Fatal(err)
		}
		if err := chunk(a1, 10, true); !errors.Is(err, offsets.ErrConflict) {
			t.Fatalf("replayed chunk: %v, want ErrConflict", err)
		}
		a2 := offsets.SourceAdvance{Job: job, Source: "in.csv", From: "line:10", To: "line:20", Epoch: claim.Epoch}
		if err := chunk(a2, 10, false); err != nil {
			t.Fatal(err)
		}
		if landed, err := w.SourceLanded(ctx, a2); err != nil || landed {
			t.Fatalf("rolled-back chunk landed=%v err=%v", landed, err)
		}
		// A second instance claims: the first is fenced, the second resumes.
		claim2, err := w.ClaimSource(ctx, job, "in.csv")
		if err != nil {
			t.Fatal(err)
		}
		if claim2.Position != "line:10" || claim2.Epoch != 2 || claim2.Chunks != 1 {
			t.Fatalf("second claim = %+v", claim2)
		}
		if err := chunk(a2, 10, true); !errors.Is(err, offsets.ErrFenced) {
			t.Fatalf("zombie chunk: %v, want ErrFenced", err)
		}
		a2.Epoch = claim2.Epoch
		if err := chunk(a2, 10, true); err != nil {
			t.Fatal(err)
		}
		if landed, err := w.SourceLanded(ctx, a2); err != nil || !landed {
			t.Fatalf("committed chunk landed=%v err=%v", landed, err)
		}
		got := readTotals(t, w, job)
		if got["k"] != (total{20, 20}) {
			t.Fatalf("totals = %v, want exactly the two committed chunks (20)", got)
		}
		if err := chunk(offsets.SourceAdvance{Job: job, Source: "other", To: "x", Epoch: 9}, 1, true); !errors.Is(err, offsets.ErrNoRow) {
			t.Fatalf("unclaimed source: %v, want ErrNoRow", err)
		}
	})
}

// A chunk that doesn't move its source is refused: otherwise it could be
// committed again and again (a watermark that didn't advance).
func TestSourceAdvanceMustMove(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		ctx := t.Context()
		job := uniqueJob(t)
		claim, err := w.ClaimSource(ctx, job, "wm")
		if err != nil {
			t.Fatal(err)
		}
		tx, err := w.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := tx.AdvanceSource(ctx, offsets.SourceAdvance{Job: job, Source: "wm", From: "", To: "", Epoch: claim.Epoch}); err == nil {
			t.Fatal("an advance from \"\" to \"\" was accepted")
		}
	})
}

// Instances claiming a new source at the same moment each get a claim
// (distinct epochs, the newest fencing the others), not a deadlock error.
func TestClaimSourceConcurrently(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		for round := range 5 {
			job := fmt.Sprintf("%s-%d", uniqueJob(t), round)
			const n = 4
			epochs := make(chan int64, n)
			errs := make(chan error, n)
			for range n {
				go func() {
					c, err := w.ClaimSource(t.Context(), job, "in")
					errs <- err
					epochs <- c.Epoch
				}()
			}
			seen := map[int64]bool{}
			for range n {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: concurrent claim: %v", round, err)
				}
				seen[<-epochs] = true
			}
			if len(seen) != n || !seen[n] {
				t.Fatalf("round %d: epochs %v, want 1..%d each once", round, seen, n)
			}
		}
	})
}

func TestSQLCommitSource(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		ctx := t.Context()
		job := uniqueJob(t)
		claim, err := w.ClaimSource(ctx, job, "f")
		if err != nil {
			t.Fatal(err)
		}
		a := offsets.SourceAdvance{Job: job, Source: "f", From: "", To: "1", Epoch: claim.Epoch}
		write := func(tx *Tx) error { return tx.Upsert(ctx, writers.Totals, [][]any{{job, "k", 1, 5}}) }
		if err := w.CommitSource(ctx, a, write); err != nil {
			t.Fatal(err)
		}
		if err := w.CommitSource(ctx, a, write); !errors.Is(err, offsets.ErrConflict) {
			t.Fatalf("replay: %v, want ErrConflict", err)
		}
		if err := w.CommitSource(ctx, offsets.SourceAdvance{Job: job, Source: "f", From: "1", To: "2", Epoch: claim.Epoch},
			func(*Tx) error { return errors.New("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("failing write: %v", err)
		}
		if got := readTotals(t, w, job); got["k"] != (total{1, 5}) {
			t.Fatalf("totals %v, want the one commit", got)
		}
		if p, _, _ := w.SourcePosition(ctx, job, "f"); p.Position != "1" || p.Chunks != 1 {
			t.Fatalf("position %+v, want 1 after one chunk", p)
		}
	})
}

// A COMMIT whose reply is lost landed, and SourceLanded says so — the
// settling CommitSource relies on before it would write the chunk again;
// a chunk whose connection was cut before COMMIT did not land, and
// CommitSource's retry then commits it once.
func TestSQLSourceCommitReplyLost(t *testing.T) {
	target, err := ParseDSN(mysqlDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(target.DataSource)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testutil.StartCutProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	direct := openMySQL(t)
	w := openSink(t, cfg.FormatDSN())
	ctx := t.Context()
	job := uniqueJob(t)
	claim, err := w.ClaimSource(ctx, job, "f")
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(a offsets.SourceAdvance, cut func()) error {
		tx, err := w.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := tx.Upsert(ctx, writers.Totals, [][]any{{job, "k", 1, 1}}); err != nil {
			return err
		}
		if err := tx.AdvanceSource(ctx, a); err != nil {
			return err
		}
		cut()
		return tx.Commit()
	}

	a1 := offsets.SourceAdvance{Job: job, Source: "f", From: "", To: "1", Epoch: claim.Epoch}
	err = chunk(a1, func() { proxy.DropReplies(true) })
	proxy.DropReplies(false)
	if err == nil || !writers.IsRetryable(err) {
		t.Fatalf("COMMIT with its reply lost: %v, want a retryable error", err)
	}
	if landed, err := direct.SourceLanded(ctx, a1); err != nil || !landed {
		t.Fatalf("SourceLanded after a lost COMMIT reply = %v, %v; want true", landed, err)
	}

	a2 := offsets.SourceAdvance{Job: job, Source: "f", From: "1", To: "2", Epoch: claim.Epoch}
	err = chunk(a2, proxy.CutAll)
	if err == nil || !writers.IsRetryable(err) {
		t.Fatalf("COMMIT on a cut connection: %v, want a retryable error", err)
	}
	if landed, err := direct.SourceLanded(ctx, a2); err != nil || landed {
		t.Fatalf("SourceLanded after a cut before COMMIT = %v, %v; want false", landed, err)
	}
	if err := w.CommitSource(ctx, a2, func(tx *Tx) error {
		return tx.Upsert(ctx, writers.Totals, [][]any{{job, "k", 1, 1}})
	}); err != nil {
		t.Fatal(err)
	}
	if got := readTotals(t, direct, job); got["k"] != (total{2, 2}) {
		t.Fatalf("totals %v, want the two chunks once each", got)
	}
}
