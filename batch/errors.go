package batch

import (
	"errors"
	"fmt"

	"github.com/microbatch/microbatch/record"
)

var (
	// ErrDataLoss means a partition's stored offset is below the first
	// offset still in the log: records were deleted (retention, topic
	// recreated) before the job read them. Stop; resetting the job's
	// offsets is a human decision.
	// ErrNoTopic means the topic to read does not exist. A job never
	// creates its input: create the topic, or fix the name.
	ErrNoTopic = errors.New("no such topic")

	ErrDataLoss = errors.New("batch: stored offset is before the log start (data was deleted before it was processed)")

	// ErrOffsetAhead means a stored offset is past the partition's end: the
	// topic was recreated or the job points at another cluster. Stop.
	ErrOffsetAhead = errors.New("batch: stored offset is past the end of the partition")
)

// ErrBatchTooLarge means a record batch of the input is larger than the
// most one fetch asks for (256 MiB): the partition can't be read past it.
// Retrying meets it again; the producer's batch size or the topic's
// max.message.bytes must come down.
var ErrBatchTooLarge = errors.New("batch: record batch too large to fetch")

// ErrSourceClosed means a Read began after its source was closed.
var ErrSourceClosed = errors.New("batch: partition consumer closed")

// ErrStopped means a Read gave up waiting for records because the run was
// asked to stop (see WithStop). Nothing of its range is committed: the
// task rolls back, and the next run reads the range again. It is not a
// failure of the run, and retrying it would only wait again: don't.
var ErrStopped = errors.New("batch: stop requested while waiting for records")

// ReadError is a failure to fetch Range from the broker (after the
// source's own retries on a new connection). Nothing of the range has
// been committed; reading it again is safe, so callers may retry it a
// bounded number of times.
type ReadError struct {
	Range record.Range
	Err   error
}

func (e *ReadError) Error() string { return fmt.Sprintf("reading %s: %v", e.Range, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is a read failure that a new attempt at
// the same range may not meet: fetch errors and a closed source. Data loss and offsets past the end are not retryable.
func IsRetryable(err error) bool {
	var re *ReadError
	return errors.As(err, &re) || errors.Is(err, ErrSourceClosed)
}
