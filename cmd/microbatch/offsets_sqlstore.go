package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// sqlStore is where txn and single keep a job's positions: mb_offsets in
// the SQL sink. With --empty-table, reset also empties the SQL job's table
// in its transaction.
type sqlStore struct {
	*sqlsink.Writer
	job, topic string
	// emptyTable, if set, is a SQL job's table reset empties in its
	// transaction (sqljob.DisownTable); emptied gets its deleted rows.
	emptyTable string
	emptied    *int64
}

func (s *sqlStore) load(ctx context.Context, _ []int32) (map[int32]storedPosition, error) {
	rows, err := offsets.Load(ctx, s.DB(), s.job, s.topic)
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, "doesn't exist") || strings.Contains(msg, "no such table") {
			return nil, nil // no job ever ran against this sink
		}
		return nil, err
	}
	out := make(map[int32]storedPosition, len(rows))
	for p, r := range rows {
		out[p] = storedPosition{next: r.NextOffset, epoch: r.Epoch, batch: r.BatchID, hasEpoch: true, hasBatch: true}
	}
	return out, nil
}

func (s *sqlStore) reset(ctx context.Context, to map[int32]int64) (int64, []offsets.Change, error) {
	if s.emptyTable != "" {
		// Before the transaction: MySQL commits one at CREATE TABLE.
		if err := s.CreateTables(ctx); err != nil {
			return 0, nil, err
		}
		if _, _, err := sqljob.TableOwner(ctx, s.DB(), s.emptyTable); err != nil {
			return 0, nil, err
		}
	}
	tx, err := s.DB().BeginTxx(ctx, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("resetting offsets: %w", err)
	}
	defer tx.Rollback() // no-op after Commit
	if s.emptyTable != "" {
		if err := s.dropResults(ctx, tx); err != nil {
			return 0, nil, err
		}
	}
	epoch, changes, err := offsets.Reset(ctx, tx, s.Dialect(), s.job, s.topic, to)
	if err != nil {
		return 0, nil, err
	}
	if err := tx.Commit(); err != nil {
		return 0, nil, fmt.Errorf("resetting offsets: %w", err)
	}
	return epoch, changes, nil
}

// dropResults empties the SQL job's table, its owner record and the job's
// dead letters on the topic, in tx.
func (s *sqlStore) dropResults(ctx context.Context, tx *sqlx.Tx) error {
	n, err := sqljob.DisownTable(ctx, tx, s.emptyTable, s.job)
	*s.emptied = n
	if err != nil {
		var owned *sqljob.OwnerError
		if errors.As(err, &owned) {
			return badConfig("empty-table: %v (reset job %q with --job %s, or leave the table to it)", err, owned.Owner.Job, owned.Owner.Job)
		}
		return badConfig("empty-table: %v", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM mb_dead_letters WHERE job = ? AND topic = ?`, s.job, s.topic); err != nil {
		return fmt.Errorf("empty-table: deleting the job's dead letters: %w", err)
	}
	return nil
}
