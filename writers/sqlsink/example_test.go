package sqlsink_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// A batch job that is not a stream: a chunk's rows (into the user's own
// table) and the position it was read up to are committed in one
// transaction, so a re-run after a crash neither loses nor double-counts a
// chunk.
func ExampleTx_AdvanceSource() {
	dir, _ := os.MkdirTemp("", "microbatch-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	w, err := sqlsink.Open(ctx, "sqlite://"+filepath.Join(dir, "example.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	_ = w.CreateTables(ctx) // mb_source_positions and the built-in tables
	_, _ = w.DB().ExecContext(ctx, `CREATE TABLE sales (region TEXT PRIMARY KEY, orders INTEGER, revenue INTEGER)`)
	sales := writers.Upsert{Table: "sales", Keys: []string{"region"}, Values: []string{"orders", "revenue"}, Merge: writers.MergeAdd}

	// Claim the source: the position to resume from ("" the first time)
	// and an epoch that fences any older instance of the job.
	claim, err := w.ClaimSource(ctx, "nightly", "orders.csv")
	if err != nil {
		fmt.Println(err)
		return
	}

	// One chunk: lines 1-3 of the file summed per region, committed with
	// the position "line:3" in the same transaction.
	chunk := offsets.SourceAdvance{Job: "nightly", Source: "orders.csv", From: claim.Position, To: "line:3", Epoch: claim.Epoch}
	commit := func() error {
		tx, err := w.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := tx.Upsert(ctx, sales, [][]any{{"emea", 2, 30}, {"apac", 1, 5}}); err != nil {
			return err
		}
		if err := tx.AdvanceSource(ctx, chunk); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println("first commit:", commit())
	// Replaying the same chunk is refused: the position already moved.
	fmt.Println("replay refused:", errors.Is(commit(), offsets.ErrConflict))

	pos, _, _ := w.SourcePosition(ctx, "nightly", "orders.csv")
	var orders, revenue int64
	_ = w.DB().QueryRowContext(ctx, `SELECT SUM(orders), SUM(revenue) FROM sales`).Scan(&orders, &revenue)
	fmt.Println("position:", pos.Position, "orders:", orders, "revenue:", revenue)
	// Output:
	// first commit: <nil>
	// replay refused: true
	// position: line:3 orders: 3 revenue: 35
}
