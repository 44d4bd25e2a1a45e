package offsets

import (
	"context"
	"testing"
	"time"
)

// TestInitNewJobConcurrentPostgres: two first claims of a job that has no
// rows yet queue on the job's advisory lock, so the second reads what the
// first committed and claims with the next epoch. Without the lock the
// second finds no rows to lock, inserts the same rows and fails with a
// unique violation once the first commits.
func TestInitNewJobConcurrentPostgres(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.d != Postgres {
			t.Skip("the advisory lock is PostgreSQL's (MySQL locks the gap, SQLite the database)")
		}
		job := uniqueJob(t)
		start := fixedStart(map[int32]int64{0: 5, 1: 7})
		txA, err := db.db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer txA.Rollback()
		a, err := Init(t.Context(), txA, db.d, job, "events", []int32{0, 1}, start)
		if err != nil {
			t.Fatal(err)
		}
		claimed := make(chan Claim, 1)
		claimErr := make(chan error, 1)
		go func() {
			tx, err := db.db.BeginTx(context.Background(), nil)
			if err != nil {
				claimErr <- err
				return
			}
			defer tx.Rollback()
			c, err := Init(context.Background(), tx, db.d, job, "events", []int32{0, 1}, start)
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				claimErr <- err
				return
			}
			claimed <- c
		}()
		select {
		case c := <-claimed:
			t.Fatalf("B claimed (%+v) while A's claim was open", c)
		case err := <-claimErr:
			t.Fatalf("B's Init: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if err := txA.Commit(); err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-claimed:
			if b.Epoch != a.Epoch+1 || b.Positions[0].NextOffset != 5 || b.Positions[1].NextOffset != 7 {
				t.Fatalf("B claimed %+v after A's %+v; want the next epoch at A's offsets", b, a)
			}
		case err := <-claimErr:
			t.Fatalf("B's Init after A committed: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("B's Init still waits 30 s after A committed")
		}
	})
}
