package strategies

import (
	"context"
	"fmt"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// txnStrategy is strategy txn: each partition commits its own
// transaction (txnTask), its offset row claimed in mb_offsets.
type txnStrategy struct{ sqlStrategy }

func (t *txnStrategy) start(ctx context.Context, s session, d *batch.Driver) (int64, error) {
	epoch, err := t.sqlStrategy.start(ctx, s, d)
	if err != nil {
		return 0, err
	}
	d.Task = (&txnTask{src: t.src, w: t.w, work: workloadOf(t.cfg), job: t.cfg.Job, retry: t.cfg.retry, crash: t.crash}).run
	return epoch, nil
}

// txnTask is the `txn` strategy's partition task: decode and aggregate the
// range (the built-in totals or the user's Transform), then in ONE
// transaction upsert the results, insert the dead
// letters and advance the partition's offset row.
type txnTask struct {
	src   batch.Source
	w     *sqlsink.Writer
	work  workload
	job   string
	retry *retryPolicy
	crash func(point string)
}

func (t *txnTask) run(ctx context.Context, b batch.Info, r record.Range) (batch.TaskResult, error) {
	adv := offsets.Advance{Job: t.job, Topic: r.Topic, Partition: r.Partition, From: r.From, To: r.To, Epoch: b.Epoch, BatchID: b.ID}
	var res batch.TaskResult
	attempts, err := withReadRetry(ctx, t.retry, fmt.Sprintf("batch %d %s", b.ID, r), func() error {
		var err error
		if res, err = t.once(ctx, adv, r); err == nil {
			return nil
		}
		return settle(ctx, t.w, err, adv)
	})
	res.Attempts = attempts
	return res, err
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
	res.Records, res.DeadLetters, res.DeadLetterReason = counts.records, counts.deadLetters, counts.reason
	if err != nil {
		return res, err
	}
	rows, err := rowsToWrite(pt)
	if err != nil {
		return res, err
	}
	commitStart := time.Now()
	if err = begin(); err != nil {
		return res, err
	}
	if err = rows.write(0, rows.len(), func(rows [][]any) error { return tx.Upsert(ctx, t.work.upsert(), rows) }); err != nil {
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
