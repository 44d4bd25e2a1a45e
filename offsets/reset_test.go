package offsets

import (
	"database/sql"
	"errors"
	"reflect"
	"testing"
)

func TestReset(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		ctx := t.Context()
		job := uniqueJob(t)
		var claim Claim
		if err := withTx(t, db, func(tx *sql.Tx) (err error) {
			claim, err = Init(ctx, tx, db.d, job, "in", []int32{0, 1}, fixedStart(map[int32]int64{0: 0, 1: 0}))
			return err
		}); err != nil {
			t.Fatalf("Init: %v", err)
		}
		// Another topic of the job carries the job's highest epoch: the
		// reset must go above it.
		if _, err := db.db.ExecContext(ctx, `INSERT INTO mb_offsets (job, topic, part, next_offset, epoch, batch_id, updated_at) VALUES (?, 'other', 0, 0, 40, 0, '2026-01-01')`, job); err != nil {
			t.Fatal(err)
		}
		for p := range int32(2) {
			if err := withTx(t, db, func(tx *sql.Tx) error {
				return Apply(ctx, tx, Advance{Job: job, Topic: "in", Partition: p, From: 0, To: 100, Epoch: claim.Epoch, BatchID: 7})
			}); err != nil {
				t.Fatalf("Apply: %v", err)
			}
		}

		var epoch int64
		var changes []Change
		if err := withTx(t, db, func(tx *sql.Tx) (err error) {
			epoch, changes, err = Reset(ctx, tx, db.d, job, "in", map[int32]int64{2: 30, 0: 5})
			return err
		}); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if epoch != 41 {
			t.Fatalf("Reset epoch = %d, want 41 (1 + the job's highest)", epoch)
		}
		wantChanges := []Change{{Partition: 0, Old: 100, HadRow: true, New: 5}, {Partition: 2, New: 30}}
		if !reflect.DeepEqual(changes, wantChanges) {
			t.Fatalf("changes = %+v, want %+v", changes, wantChanges)
		}
		got, err := Load(ctx, db.db, job, "in")
		if err != nil {
			t.Fatal(err)
		}
		want := map[int32]Position{
			0: {Partition: 0, NextOffset: 5, Epoch: 41, BatchID: 7}, // batch id kept
			1: {Partition: 1, NextOffset: 100, Epoch: claim.Epoch, BatchID: 7},
			2: {Partition: 2, NextOffset: 30, Epoch: 41, BatchID: 0},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("rows = %+v, want %+v", got, want)
		}

		// A zombie of the old run is fenced on the reset partition, even
		// from where the reset put it; the untouched one is still its own.
		err = withTx(t, db, func(tx *sql.Tx) error {
			return Apply(ctx, tx, Advance{Job: job, Topic: "in", Partition: 0, From: 5, To: 10, Epoch: claim.Epoch, BatchID: 8})
		})
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("zombie Apply after reset = %v, want ErrFenced", err)
		}
		// The next run claims above the reset and starts at its offsets.
		var next Claim
		if err := withTx(t, db, func(tx *sql.Tx) (err error) {
			next, err = ClaimPartitions(ctx, tx, db.d, job, "in", []int32{0, 1, 2}, []int32{0, 1, 2}, 1, fixedStart(nil))
			return err
		}); err != nil {
			t.Fatalf("ClaimPartitions after reset: %v", err)
		}
		if next.Epoch <= epoch || next.Positions[0].NextOffset != 5 || next.Positions[2].NextOffset != 30 || next.LastBatch != 7 {
			t.Fatalf("claim after reset = %+v, want epoch > %d, offsets 5 and 30, last batch 7", next, epoch)
		}
		if err := withTx(t, db, func(tx *sql.Tx) error {
			return Apply(ctx, tx, Advance{Job: job, Topic: "in", Partition: 0, From: 5, To: 10, Epoch: next.Epoch, BatchID: 8})
		}); err != nil {
			t.Fatalf("Apply after reset: %v", err)
		}
	})
}

func TestResetRollsBackWithTheTransaction(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		ctx := t.Context()
		job := uniqueJob(t)
		if err := withTx(t, db, func(tx *sql.Tx) error {
			_, err := Init(ctx, tx, db.d, job, "in", []int32{0}, fixedStart(map[int32]int64{0: 9}))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		before, _ := Load(ctx, db.db, job, "in")
		errStop := errors.New("stop")
		err := withTx(t, db, func(tx *sql.Tx) error {
			if _, _, err := Reset(ctx, tx, db.d, job, "in", map[int32]int64{0: 1, 1: 2}); err != nil {
				return err
			}
			return errStop
		})
		if !errors.Is(err, errStop) {
			t.Fatal(err)
		}
		if after, _ := Load(ctx, db.db, job, "in"); !reflect.DeepEqual(after, before) {
			t.Fatalf("rows after a rolled-back reset = %+v, want %+v", after, before)
		}
		if _, _, err := Reset(ctx, db.db, db.d, job, "in", map[int32]int64{0: -1}); err == nil {
			t.Fatal("Reset to -1 succeeded")
		}
	})
}
