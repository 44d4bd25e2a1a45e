package strategies

import (
	"context"
	"fmt"
	"math/big"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers/kafkasink"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// SinkTotals is what the sink holds for a job. Amount is exact, whatever
// its size (a key's total may pass int64).
type SinkTotals struct {
	Events      int64
	Amount      *big.Int // never nil in what ReadTotals and ReadSinkTotals return
	Keys        int64
	DeadLetters int64
}

// AmountIs reports whether the sink's amount is exactly want.
func (t SinkTotals) AmountIs(want int64) bool {
	return t.Amount != nil && t.Amount.IsInt64() && t.Amount.Int64() == want
}

// ReadSinkTotals sums mb_totals and counts mb_dead_letters for job. It
// only reads: a database without the tables is an error; a job with no
// rows reads as zeros. Amounts are summed exactly: by MySQL, whose SUM of
// a DECIMAL (or BIGINT) column is an exact DECIMAL, and here for SQLite,
// whose SUM would go through REAL once a total is decimal text.
func ReadSinkTotals(ctx context.Context, w *sqlsink.Writer, job string) (SinkTotals, error) {
	t := SinkTotals{Amount: new(big.Int)}
	var err error
	if w.Dialect() != offsets.SQLite { // MySQL's and PostgreSQL's SUM of DECIMAL/NUMERIC is exact
		var amount string
		err = w.DB().QueryRowContext(ctx,
			`SELECT COALESCE(SUM(events), 0), COALESCE(SUM(amount), 0), COUNT(*) FROM mb_totals WHERE job = ?`, job).
			Scan(&t.Events, &amount, &t.Keys)
		if err == nil {
			if _, ok := t.Amount.SetString(amount, 10); !ok {
				err = fmt.Errorf("the sum of amount is %q, not an integer", amount)
			}
		}
	} else {
		err = sumSQLiteTotals(ctx, w, job, &t)
	}
	if err != nil {
		return t, fmt.Errorf("reading totals of job %q from %s: %w", job, w, err)
	}
	err = w.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM mb_dead_letters WHERE job = ?`, job).Scan(&t.DeadLetters)
	if err != nil {
		return t, fmt.Errorf("reading dead letters of job %q from %s: %w", job, w, err)
	}
	return t, nil
}

// sumSQLiteTotals adds up a job's rows of mb_totals. amount is an INTEGER,
// or decimal TEXT past int64; a REAL is a total an older version let
// overflow and is reported, not rounded into the sum.
func sumSQLiteTotals(ctx context.Context, w *sqlsink.Writer, job string, t *SinkTotals) error {
	rows, err := w.DB().QueryContext(ctx, `SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		return err
	}
	defer rows.Close()
	var sum exact.Int
	for rows.Next() {
		var k string
		var events int64
		var amount any
		if err := rows.Scan(&k, &events, &amount); err != nil {
			return err
		}
		switch a := amount.(type) {
		case int64:
			sum.Add(a)
		case string:
			n, err := exact.Parse(a)
			if err != nil {
				return fmt.Errorf("key %q: amount: %w", k, err)
			}
			sum.AddInt(n)
		default:
			return fmt.Errorf("key %q: amount is %v (%T), not an exact integer (a total an older version let overflow into a REAL)", k, amount, amount)
		}
		t.Events += events
		t.Keys++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	t.Amount = sum.Big()
	return nil
}

// ReadTotals opens the sink named by dsn (SQL, Redis, or checkpoint mode's
// kafka:// and file:// outputs), reads what it holds for job, and returns
// it with the sink's address (no password).
func ReadTotals(ctx context.Context, dsn, job string) (SinkTotals, string, error) {
	return ReadTotalsSecure(ctx, dsn, job, kafkautil.Security{})
}

// ReadTotalsSecure is ReadTotals reaching a kafka:// output with sec.
func ReadTotalsSecure(ctx context.Context, dsn, job string, sec kafkasink.Security) (SinkTotals, string, error) {
	if shared.IsKafkaDSN(dsn) || shared.IsFileDSN(dsn) {
		return readOutputTotals(ctx, dsn, job, sec)
	}
	if shared.IsRedisDSN(dsn) {
		r, err := redissink.Open(ctx, dsn)
		if err != nil {
			return SinkTotals{}, "", err
		}
		defer r.Close()
		t := SinkTotals{Amount: new(big.Int)}
		// A job that never ran has no offsets: say so rather than report
		// zeros as "losses".
		if n, err := r.Client().Exists(ctx, redissink.OffsetsKey(job)).Result(); err != nil || n == 0 {
			if err == nil {
				err = fmt.Errorf("no job %q in %s", job, r)
			}
			return t, r.String(), err
		}
		j, err := r.Job(job)
		if err != nil {
			return t, r.String(), err
		}
		if t.Events, t.Amount, t.Keys, err = j.Totals(ctx); err != nil {
			return t, r.String(), err
		}
		t.DeadLetters, err = j.DeadLetterCount(ctx)
		return t, r.String(), err
	}
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		return SinkTotals{}, "", err
	}
	defer w.Close()
	t, err := ReadSinkTotals(ctx, w, job)
	return t, w.String(), err
}

// CheckSink parses a sink DSN of any kind (SinkForms) without connecting.
func CheckSink(dsn string) error {
	if err := checkScheme(dsn); err != nil {
		return err
	}
	if shared.IsKafkaDSN(dsn) || shared.IsFileDSN(dsn) {
		_, err := parseCheckpointSink(dsn, SinkMode2PC)
		return err
	}
	if shared.IsRedisDSN(dsn) {
		_, _, err := redissink.ParseDSN(dsn)
		return err
	}
	_, err := sqlsink.ParseDSN(dsn)
	return err
}
