package strategies

import (
	"context"
	"fmt"

	"github.com/microbatch/microbatch/internal/kafkautil"
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
// only reads: a database without the tables is an error; a job with no
// rows reads as zeros.
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

// ReadTotals opens the sink named by dsn (SQL, Redis, or checkpoint mode's
// kafka:// and file:// outputs), reads what it holds for job, and returns
// it with the sink's address (no password).
func ReadTotals(ctx context.Context, dsn, job string) (SinkTotals, string, error) {
	return ReadTotalsSecure(ctx, dsn, job, kafkautil.Security{})
}

// ReadTotalsSecure is ReadTotals reaching a kafka:// output with sec.
func ReadTotalsSecure(ctx context.Context, dsn, job string, sec writers.KafkaSecurity) (SinkTotals, string, error) {
	if isKafkaDSN(dsn) || isFileDSN(dsn) {
		return readOutputTotals(ctx, dsn, job, sec)
	}
	if isRedisDSN(dsn) {
		r, err := writers.OpenRedis(ctx, dsn)
		if err != nil {
			return SinkTotals{}, "", err
		}
		defer r.Close()
		var t SinkTotals
		// A job that never ran has no offsets: say so rather than report
		// zeros as "losses".
		if n, err := r.Client().Exists(ctx, "mb:{"+job+"}:offsets").Result(); err != nil || n == 0 {
			if err == nil {
				err = fmt.Errorf("no job %q in %s", job, r)
			}
			return t, r.String(), err
		}
		if t.Events, t.Amount, t.Keys, err = r.Totals(ctx, job); err != nil {
			return t, r.String(), err
		}
		t.DeadLetters, err = r.DeadLetterCount(ctx, job)
		return t, r.String(), err
	}
	w, err := writers.OpenSQL(ctx, dsn)
	if err != nil {
		return SinkTotals{}, "", err
	}
	defer w.Close()
	t, err := ReadSinkTotals(ctx, w, job)
	return t, w.String(), err
}

// CheckSink parses a sink DSN of any kind without connecting.
func CheckSink(dsn string) error {
	if isKafkaDSN(dsn) || isFileDSN(dsn) {
		_, err := parseCheckpointSink(dsn, SinkMode2PC)
		return err
	}
	if isRedisDSN(dsn) {
		_, _, err := writers.ParseRedisDSN(dsn)
		return err
	}
	_, err := writers.ParseSQLDSN(dsn)
	return err
}
