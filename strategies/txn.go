package strategies

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// Retry bounds for a partition's transaction.
const (
	maxAttempts    = 8
	backoffInitial = 100 * time.Millisecond
	backoffMax     = 5 * time.Second
)

// txnTask is the `txn` strategy's partition task: decode and aggregate the
// range (the built-in totals or the user's Transform), then in ONE
// transaction upsert the results, insert the dead
// letters and advance the partition's offset row.
type txnTask struct {
	src   batch.Source
	w     *sqlsink.Writer
	work  workload
	job   string
	log   *slog.Logger
	crash func(point string)
}

func (t *txnTask) run(ctx context.Context, b batch.Info, r record.Range) (batch.TaskResult, error) {
	adv := offsets.Advance{Job: t.job, Topic: r.Topic, Partition: r.Partition, From: r.From, To: r.To, Epoch: b.Epoch, BatchID: b.ID}
	var res batch.TaskResult
	attempts, err := withRetry(ctx, t.log, fmt.Sprintf("batch %d %s", b.ID, r), func() error {
		var err error
		if res, err = t.once(ctx, adv, r); err == nil {
			return nil
		}
		return settle(ctx, t.w, err, adv)
	})
	res.Attempts = attempts
	return res, err
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

func (t *txnTask) once(ctx context.Context, adv offsets.Advance, r record.Range) (res batch.TaskResult, err error) {
	pt := t.work.newPart(t.job)
	// The transaction opens only when there is something to write, so
	// that reading (the slow part) holds no database connection.
	var tx *sqlsink.Tx
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

	// Dead letters past deadLetterSpillBytes go into the transaction at
	// once, which opens for them.
	dead := dlBuffer{spill: func(dls []record.DeadLetter) error {
		if err := begin(); err != nil {
			return err
		}
		return tx.DeadLetters(ctx, dls)
	}}
	counts, err := process(ctx, t.src, t.job, r, pt, dead.add)
	res.Records, res.DeadLetters = counts.records, counts.deadLetters
	if err != nil {
		return res, err
	}
	rows, err := pt.rows()
	if err != nil {
		return res, err
	}
	commitStart := time.Now()
	if err = begin(); err != nil {
		return res, err
	}
	if err = tx.Upsert(ctx, t.work.upsert(), rows); err != nil {
		return res, err
	}
	t.crash(CrashMidWrite)
	if err = dead.flush(); err != nil {
		return res, err
	}
	t.crash(CrashAfterWriteBeforeOffsets)
	if err = tx.Advance(ctx, adv); err != nil {
		return res, err
	}
	t.crash(CrashAfterOffsetsBeforeWrite) // in the open transaction: nothing is durable yet
	if err = tx.Commit(); err != nil {
		return res, err
	}
	res.Commit = time.Since(commitStart)
	return res, nil
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
