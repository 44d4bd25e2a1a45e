package writers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// A batch job that is not a stream: rows and the position they were read up
// to are committed in one transaction, so a re-run after a crash neither
// loses nor double-counts a chunk.
func ExampleSQLTx() {
	dir, _ := os.MkdirTemp("", "microbatch-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	w, err := writers.OpenSQL(ctx, "sqlite://"+filepath.Join(dir, "example.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	if err := w.CreateTables(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// Claim the job: an epoch, and a position row for "partition" 0 of the
	// source "orders.csv", starting at line 0.
	tx, _ := w.DB().BeginTxx(ctx, nil)
	claim, err := offsets.Init(ctx, tx, w.Dialect(), "nightly", "orders.csv", []int32{0},
		func(int32, bool) (int64, error) { return 0, nil })
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = tx.Commit()

	// One chunk: lines [0, 3) summed per key, then committed with the
	// position in the same transaction.
	chunk := offsets.Advance{Job: "nightly", Topic: "orders.csv", Partition: 0, From: 0, To: 3, Epoch: claim.Epoch, BatchID: 1}
	commit := func() error {
		t, err := w.Begin(ctx)
		if err != nil {
			return err
		}
		defer t.Rollback()
		if err := t.Upsert(ctx, writers.Totals, [][]any{{"nightly", "alice", 2, 30}, {"nightly", "bob", 1, 5}}); err != nil {
			return err
		}
		if err := t.Advance(ctx, chunk); err != nil {
			return err
		}
		return t.Commit()
	}
	fmt.Println("first commit:", commit())
	// Replaying the same chunk is refused: the position already moved.
	fmt.Println("replay refused:", errors.Is(commit(), offsets.ErrConflict))

	var events, amount int64
	_ = w.DB().QueryRowContext(ctx, `SELECT SUM(events), SUM(amount) FROM mb_totals WHERE job = 'nightly'`).Scan(&events, &amount)
	fmt.Println("events:", events, "amount:", amount)
	// Output:
	// first commit: <nil>
	// replay refused: true
	// events: 3 amount: 35
}
