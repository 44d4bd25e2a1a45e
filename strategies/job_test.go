package strategies

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/microbatch/microbatch/batch"
)

// TestIsRetryable: a read that gave up on the stop request is never tried
// again, not even when the attempt's outcome looked unknown (settle could
// not read the offsets back); what is retryable stays so.
func TestIsRetryable(t *testing.T) {
	stopped := fmt.Errorf("reading events/0 [0,10): %w", batch.ErrStopped)
	for _, c := range []struct {
		err  error
		want bool
	}{
		{stopped, false},
		{unknownOutcome{stopped}, false},
		{unknownOutcome{io.ErrUnexpectedEOF}, true},
		{&batch.ReadError{Err: io.EOF}, true},
		{errors.New("boom"), false},
	} {
		if got := isRetryable(c.err); got != c.want {
			t.Errorf("isRetryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
