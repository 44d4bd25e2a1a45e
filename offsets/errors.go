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
	ErrConflict = errors.New("offsets: stored offset is not where the batch started")

	// ErrNoRow means the job has no offset row for the partition; rows are
	// created by Init before the first batch. Roll back and stop.
	ErrNoRow = errors.New("offsets: no offset row for the partition")
)
