package offsets

import "errors"

var (
	// ErrFenced means the offset row carries a newer epoch than the commit:
	// another instance has claimed the job since this one started. Stop
	// writing this partition; do not retry.
	ErrFenced = errors.New("offsets: fenced by a newer epoch")

	// ErrConflict means the offset row is not where the batch started from:
	// someone else committed this range (or moved the offsets by hand).
	// Roll back and stop; a retry would apply the batch twice.
	ErrConflict = errors.New("offsets: stored position is not where the batch started")

	// ErrNoRow means the job has no offset row for the partition (rows
	// are created by Init before the first batch) or no row for the source
	// (ClaimSource creates it). Roll back and stop.
	ErrNoRow = errors.New("offsets: no stored position to advance")
)
