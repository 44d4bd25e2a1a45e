package offsets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Change is one partition's move by Reset.
type Change struct {
	Partition int32
	// Old is the next offset before the reset; HadRow is false if the
	// partition had no row (Old is then 0).
	Old    int64
	HadRow bool
	New    int64
}

// Reset moves partitions of a stopped job to the offsets in to, in one
// transaction of tx (the caller begins and commits it): each partition's
// row gets next_offset = to[partition] and epoch = 1 + the highest epoch
// stored for the job, whatever the topic; its batch_id stays. Rows missing
// are created (batch_id 0). It returns the new epoch and the changes,
// sorted by partition.
//
// The raised epoch is what makes a reset safe against an instance of the
// old run that is still alive somewhere (a zombie the caller could not
// see): its next commit on a reset partition carries an older epoch and is
// refused (ErrFenced) instead of moving the row from where the reset put
// it. The next run claims with a higher epoch still and starts from the
// new offsets.
func Reset(ctx context.Context, tx Queryer, d Dialect, job, topic string, to map[int32]int64) (int64, []Change, error) {
	var maxEpoch sql.NullInt64
	if err := lockJob(ctx, tx, d, job, "MAX(epoch)", &maxEpoch); err != nil {
		return 0, nil, fmt.Errorf("resetting offsets of job %q: %w", job, err)
	}
	epoch := maxEpoch.Int64 + 1
	parts := make([]int32, 0, len(to))
	for p, off := range to {
		if p < 0 || off < 0 {
			return 0, nil, fmt.Errorf("resetting offsets of job %q: bad target %d for partition %d", job, off, p)
		}
		parts = append(parts, p)
	}
	slices.Sort(parts)
	lock := ""
	if d == MySQL || d == Postgres {
		lock = " FOR UPDATE"
	}
	now := time.Now().UTC()
	changes := make([]Change, 0, len(parts))
	for _, p := range parts {
		c := Change{Partition: p, New: to[p]}
		err := tx.QueryRowContext(ctx,
			`SELECT next_offset FROM mb_offsets WHERE job = ? AND topic = ? AND part = ?`+lock, job, topic, p).Scan(&c.Old)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO mb_offsets (job, topic, part, next_offset, epoch, batch_id, updated_at) VALUES (?, ?, ?, ?, ?, 0, ?)`,
				job, topic, p, c.New, epoch, now); err != nil {
				return 0, nil, fmt.Errorf("creating offset row %s/%d: %w", topic, p, err)
			}
		case err != nil:
			return 0, nil, fmt.Errorf("reading offset %s/%d: %w", topic, p, err)
		default:
			c.HadRow = true
			if _, err := tx.ExecContext(ctx,
				`UPDATE mb_offsets SET next_offset = ?, epoch = ?, updated_at = ? WHERE job = ? AND topic = ? AND part = ?`,
				c.New, epoch, now, job, topic, p); err != nil {
				return 0, nil, fmt.Errorf("resetting offset %s/%d: %w", topic, p, err)
			}
		}
		changes = append(changes, c)
	}
	return epoch, changes, nil
}
