package redissink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/offsets"
)

// ErrMissing means a key a Redis fold needs is gone: the batch's logged
// plan, or the contribution of a range that is still to be folded. The fold
// changed nothing. Write the contributions of the logged plan again and fold
// again; if the job's offsets are gone too, the Redis data was lost and the
// job must be restarted from a known position.
var ErrMissing = errors.New("writers: redis key missing for the fold")

// ErrValue means a row of a user-defined job (Job.WriteRowsContribution)
// can't be stored in the Redis hashes: a MergeAdd value that is not an
// integer, a MergeMin or MergeMax value that is not an integer or a
// decimal string, a key or value of a type without a text form, a nil
// (outside a per-column upsert's values), or a row of the wrong width. It is the job's error, not Redis's: retrying gives
// the same rows again.
var ErrValue = errors.New("writers: row not storable in Redis")

// ErrPartialCommit means Redis ran a chunk's transaction, position
// included, but some of the commands the caller queued failed (Redis
// doesn't roll back a command that fails inside EXEC): the source has moved
// on and those commands' effects are missing. Don't retry the chunk; the
// error says which commands failed.
var ErrPartialCommit = errors.New("writers: chunk committed with failed commands")

// scriptError turns the scripts' error replies into the package sentinels;
// other errors pass unchanged.
func scriptError(err error) error {
	var re redis.Error
	if !errors.As(err, &re) {
		return err
	}
	code, msg, _ := strings.Cut(re.Error(), " ")
	switch code {
	case "MBFENCED":
		return fmt.Errorf("%w: %s", offsets.ErrFenced, msg)
	case "MBCONFLICT":
		return fmt.Errorf("%w: %s", offsets.ErrConflict, msg)
	case "MBNOROW":
		return fmt.Errorf("%w: %s", offsets.ErrNoRow, msg)
	case "MBMISSING":
		return fmt.Errorf("%w: %s", ErrMissing, msg)
	}
	return err
}

// IsRetryable reports whether a failed Redis call may be made again. That
// includes a connection lost after the command was sent, whose outcome is
// unknown: every Job method can be repeated safely (see the package doc,
// "Retries"). Server states that pass (LOADING, TRYAGAIN, BUSY, a failover
// in progress) are retryable; fencing, conflicts, missing keys, script
// errors and the caller's own cancellation are not.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed) {
		return false
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		return redis.IsLoadingError(err) || redis.IsTryAgainError(err) || redis.IsClusterDownError(err) ||
			redis.IsMasterDownError(err) || redis.IsReadOnlyError(err) || redis.IsMaxClientsError(err) ||
			redis.HasErrorPrefix(err, "BUSY ")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
