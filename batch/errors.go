package batch

import "errors"

var (
	// ErrDataLoss means a partition's stored offset is below the first
	// offset still in the log: records were deleted (retention, topic
	// recreated) before the job read them. Stop; resetting the job's
	// offsets is a human decision.
	ErrDataLoss = errors.New("batch: stored offset is before the log start (data was deleted before it was processed)")

	// ErrOffsetAhead means a stored offset is past the partition's end: the
	// topic was recreated or the job points at another cluster. Stop.
	ErrOffsetAhead = errors.New("batch: stored offset is past the end of the partition")
)
