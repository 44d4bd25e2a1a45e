package strategies

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// singleStrategy is strategy single: partitions compute in parallel, one
// transaction commits the batch (single), offset rows claimed in
// mb_offsets.
type singleStrategy struct{ sqlStrategy }

func (t *singleStrategy) start(ctx context.Context, s session, d *batch.Driver) (int64, error) {
	epoch, err := t.sqlStrategy.start(ctx, s, d)
	if err != nil {
		return 0, err
	}
	sg := newSingle(t.src, t.w, workloadOf(t.cfg), t.cfg.Job, t.cfg.retry, t.crash)
	d.Task, d.Commit = sg.compute, sg.commit
	return epoch, nil
}

// single is the `single` strategy ("repartition to one"): partition tasks
// decode and aggregate in parallel, then their results are merged and ONE
// transaction writes every partition's totals, dead letters and offset
// rows. The batch is all-or-nothing across partitions, at the cost of one
// writer per batch. Each task spools its dead letters (dlSpool: a bounded
// part in memory, the rest in a temp file) and the commit streams them into
// the transaction. Spilling them into the transaction as txn does would
// mean opening it before the tasks run and feeding it from all of them
// through one connection, holding locks and a connection for the whole
// read; and a failed commit attempt, which is retried from the computed
// results without reading the batch again, would lose them.
type single struct {
	src   batch.Source
	w     *sqlsink.Writer
	work  workload
	job   string
	retry *retryPolicy
	crash func(point string)

	mu      sync.Mutex
	results map[int32]partial // of the batch being computed, by partition
}

// partial is one partition's computed share of a batch.
type partial struct {
	results part
	dead    *dlSpool
}

func newSingle(src batch.Source, w *sqlsink.Writer, work workload, job string, retry *retryPolicy, crash func(string)) *single {
	return &single{src: src, w: w, work: work, job: job, retry: retry, crash: crash, results: map[int32]partial{}}
}

// compute is the partition task: read and aggregate, write nothing.
func (s *single) compute(ctx context.Context, b batch.Info, r record.Range) (batch.TaskResult, error) {
	var res batch.TaskResult
	p := partial{dead: newDLSpool()}
	attempts, err := withReadRetry(ctx, s.retry, fmt.Sprintf("batch %d %s", b.ID, r), func() error {
		p.results = s.work.newPart(s.job)
		if err := p.dead.reset(); err != nil {
			return err
		}
		c, err := process(ctx, s.src, s.job, r, p.results, p.dead.add)
		res.Records, res.DeadLetters, res.DeadLetterReason = c.records, c.deadLetters, c.reason
		return err
	})
	res.Attempts = attempts
	if err != nil {
		p.dead.close()
		return res, err
	}
	s.mu.Lock()
	s.results[r.Partition].dead.close() // of a batch that failed
	s.results[r.Partition] = p
	s.mu.Unlock()
	return res, nil
}

// commit merges the partitions' results into one result set and writes it,
// with all offsets, in one transaction.
func (s *single) commit(ctx context.Context, b batch.Info, ranges []record.Range) (batch.CommitResult, error) {
	s.mu.Lock()
	results := s.results
	s.results = map[int32]partial{}
	s.mu.Unlock()
	defer func() {
		for _, p := range results {
			p.dead.close()
		}
	}()

	merged := s.work.newPart(s.job)
	dead := make([]*dlSpool, len(ranges))
	advs := make([]offsets.Advance, len(ranges))
	for i, r := range ranges {
		p, ok := results[r.Partition]
		if !ok {
			return batch.CommitResult{}, fmt.Errorf("committing batch %d: no result for %s", b.ID, r)
		}
		merged.merge(p.results)
		dead[i] = p.dead
		advs[i] = offsets.Advance{Job: s.job, Topic: r.Topic, Partition: r.Partition, From: r.From, To: r.To, Epoch: b.Epoch, BatchID: b.ID}
	}
	rows, err := rowsToWrite(merged)
	if err != nil {
		return batch.CommitResult{}, err
	}
	start := time.Now()
	attempts, err := withRetry(ctx, s.retry, fmt.Sprintf("batch %d commit", b.ID), func() error {
		if err := s.once(ctx, rows, dead, advs); err != nil {
			return settle(ctx, s.w, err, advs...)
		}
		return nil
	})
	return batch.CommitResult{Duration: time.Since(start), Attempts: attempts}, err
}

func (s *single) once(ctx context.Context, rows partRows, dead []*dlSpool, advs []offsets.Advance) error {
	tx, err := s.w.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback() // no-op after Commit
	upsert := func(rows [][]any) error { return tx.Upsert(ctx, s.work.upsert(), rows) }
	half := rows.len() / 2
	if err := rows.write(0, half, upsert); err != nil {
		return err
	}
	s.crash(CrashMidWrite)
	if err := rows.write(half, rows.len(), upsert); err != nil {
		return err
	}
	for _, d := range dead {
		if err := d.each(func(dls []record.DeadLetter) error { return tx.DeadLetters(ctx, dls) }); err != nil {
			return err
		}
	}
	s.crash(CrashAfterWriteBeforeOffsets)
	for _, a := range advs {
		if err := tx.Advance(ctx, a); err != nil {
			return err
		}
	}
	s.crash(CrashAfterOffsetsBeforeWrite) // in the open transaction: nothing is durable yet
	return tx.Commit()
}
