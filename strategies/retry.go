package strategies

import (
	"context"
	"errors"
	"log/slog"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// unknownOutcome marks a failed attempt whose commit may have landed (its
// offsets couldn't be read back): only another attempt can tell.
type unknownOutcome struct{ err error }

func (u unknownOutcome) Error() string { return u.err.Error() }
func (u unknownOutcome) Unwrap() error { return u.err }

// isRetryable: lost connections, deadlocks, Kafka read errors and unknown
// outcomes may succeed on another attempt; fencing, conflicts and bad
// configuration never do. Nor does a read that gave up on the run's stop
// request (batch.ErrStopped): another attempt would only wait again.
func isRetryable(err error) bool {
	if errors.Is(err, batch.ErrStopped) {
		return false
	}
	var u unknownOutcome
	return errors.As(err, &u) || writers.IsRetryable(err) || redissink.IsRetryable(err) || batch.IsRetryable(err)
}

// withRetry runs attempt until it succeeds, fails for good, or has been
// tried shared.MaxAttempts times, backing off between tries. It returns how many
// attempts it made.
func withRetry(ctx context.Context, log *slog.Logger, what string, attempt func() error) (int, error) {
	for n := 1; ; n++ {
		err := attempt()
		if err == nil {
			return n, nil
		}
		if !isRetryable(err) || n >= shared.MaxAttempts {
			return n, err
		}
		log.Warn("retrying", "what", what, "attempt", n, "err", err)
		if err := shared.SleepBackoff(ctx, n); err != nil {
			return n, err
		}
	}
}

// settle decides what a failed commit attempt means. A commit whose reply
// was lost may have landed: the offset rows tell, since only our own commit
// can have moved them to their ends. (A retry after such a commit fails
// with offsets.ErrConflict and is settled here as success too.) If the rows
// can't be read, the outcome is unknown, which calls for another attempt,
// never for giving up with the error of an attempt that may have succeeded.
func settle(ctx context.Context, w *sqlsink.Writer, err error, advs ...offsets.Advance) error {
	for _, a := range advs {
		landed, lerr := offsets.Landed(ctx, w.DB(), a)
		if lerr != nil {
			return unknownOutcome{err}
		}
		if !landed {
			return err
		}
	}
	return nil
}
