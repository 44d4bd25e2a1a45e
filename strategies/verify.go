package strategies

import (
	"context"
	"fmt"

	"github.com/microbatch/microbatch/writers"
)

// SinkTotals is what the sink holds for a job.
type SinkTotals struct {
	Events      int64
	Amount      int64
	Keys        int64
	DeadLetters int64
}

// ReadSinkTotals sums mb_totals and counts mb_dead_letters for job. It
// only reads: a sink no job has written to is an error, not zeros.
func ReadSinkTotals(ctx context.Context, w *writers.SQL, job string) (SinkTotals, error) {
	var t SinkTotals
	err := w.DB().QueryRowContext(ctx,
		`SELECT COALESCE(SUM(events), 0), COALESCE(SUM(amount), 0), COUNT(*) FROM mb_totals WHERE job = ?`, job).
		Scan(&t.Events, &t.Amount, &t.Keys)
	if err != nil {
		return t, fmt.Errorf("reading totals of job %q from %s: %w", job, w, err)
	}
	err = w.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM mb_dead_letters WHERE job = ?`, job).Scan(&t.DeadLetters)
	if err != nil {
		return t, fmt.Errorf("reading dead letters of job %q from %s: %w", job, w, err)
	}
	return t, nil
}
