package strategies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// Retry bounds for a partition's transaction.
const (
	maxAttempts    = 8
	backoffInitial = 100 * time.Millisecond
	backoffMax     = 5 * time.Second
)

// deadLetterSpillBytes bounds the dead letters a task holds in memory; past
// it they are inserted into the (already open) batch transaction.
const deadLetterSpillBytes = 8 << 20

// txnTask is the `txn` strategy's partition task: decode and aggregate the
// range, then in ONE transaction add the per-key totals, insert the dead
// letters and advance the partition's offset row.
type txnTask struct {
	src batch.Source
	w   *writers.SQL
	job string
	log *slog.Logger
}

func (t *txnTask) run(ctx context.Context, b batch.Info, r batch.Range) (batch.TaskResult, error) {
	adv := offsets.Advance{Job: t.job, Topic: r.Topic, Partition: r.Partition, From: r.From, To: r.To, Epoch: b.Epoch, BatchID: b.ID}
	for attempt := 1; ; attempt++ {
		res, err := t.once(ctx, adv, r)
		res.Attempts = attempt
		if err == nil {
			return res, nil
		}
		// A commit whose reply was lost may have landed: the offset row
		// tells. Only our own commit can have moved it to adv.To. (A retry
		// after such a commit fails with offsets.ErrConflict and lands here
		// again, so it settles as success too.)
		landed, lerr := offsets.Landed(ctx, t.w.DB(), adv)
		if lerr == nil && landed {
			return res, nil
		}
		// If the row can't be read, whether the commit landed is unknown:
		// that is a reason to try again, never to give up with the error
		// of an attempt that may have succeeded.
		retryable := lerr != nil || writers.IsRetryable(err) || batch.IsRetryable(err)
		if !retryable || attempt >= maxAttempts {
			return res, err
		}
		t.log.Warn("retrying partition transaction", "batch", b.ID, "range", r.String(), "attempt", attempt, "err", err)
		if err := sleepBackoff(ctx, attempt); err != nil {
			return res, err
		}
	}
}

func (t *txnTask) once(ctx context.Context, adv offsets.Advance, r batch.Range) (res batch.TaskResult, err error) {
	agg := event.NewAggregator()
	var dls []writers.DeadLetter
	dlBytes := 0
	// The transaction opens only when there is something to write, so
	// that reading (the slow part) holds no database connection.
	var tx *writers.SQLTx
	begin := func() error {
		if tx != nil {
			return nil
		}
		var berr error
		tx, berr = t.w.Begin(ctx)
		return berr
	}
	defer func() {
		if tx != nil {
			tx.Rollback() // no-op after Commit
		}
	}()

	var ev event.Event
	err = t.src.Read(ctx, r, func(rec *batch.Record) error {
		if derr := event.Decode(rec.Value, &ev); derr != nil {
			dls = append(dls, deadLetter(t.job, r.Topic, rec, derr))
			dlBytes += len(rec.Value)
			res.DeadLetters++
			if dlBytes >= deadLetterSpillBytes {
				if err := begin(); err != nil {
					return err
				}
				if err := tx.DeadLetters(ctx, dls); err != nil {
					return err
				}
				dls, dlBytes = dls[:0], 0
			}
			return nil
		}
		agg.Add(&ev)
		res.Records++
		return nil
	})
	if err != nil {
		return res, err
	}
	commitStart := time.Now()
	if err = begin(); err != nil {
		return res, err
	}
	if err = tx.Upsert(ctx, writers.Totals, totalsRows(t.job, agg.Totals())); err != nil {
		return res, err
	}
	if err = tx.DeadLetters(ctx, dls); err != nil {
		return res, err
	}
	if err = tx.Advance(ctx, adv); err != nil {
		return res, err
	}
	if err = tx.Commit(); err != nil {
		return res, err
	}
	res.Commit = time.Since(commitStart)
	return res, nil
}

// totalsRows sorts by key so that concurrent partition transactions lock
// mb_totals rows in the same order and don't deadlock each other.
func totalsRows(job string, totals []event.Total) [][]any {
	slices.SortFunc(totals, func(a, b event.Total) int { return strings.Compare(a.Key, b.Key) })
	rows := make([][]any, len(totals))
	flat := make([]any, 4*len(totals))
	for i, tt := range totals {
		row := flat[4*i : 4*i+4 : 4*i+4]
		row[0], row[1], row[2], row[3] = job, tt.Key, tt.Events, tt.Amount
		rows[i] = row
	}
	return rows
}

func deadLetter(job, topic string, rec *batch.Record, err error) writers.DeadLetter {
	reason := err.Error()
	var de *event.DecodeError
	if errors.As(err, &de) {
		reason = de.Reason
	}
	return writers.DeadLetter{
		Job: job, Topic: topic, Partition: rec.Partition, Offset: rec.Offset,
		Reason: reason, Payload: bytes.Clone(rec.Value),
	}
}

func sleepBackoff(ctx context.Context, attempt int) error {
	d := backoffInitial << (attempt - 1)
	if d > backoffMax || d <= 0 {
		d = backoffMax
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting to retry: %w", ctx.Err())
	case <-time.After(d):
		return nil
	}
}
