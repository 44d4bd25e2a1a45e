package strategies

import (
	"context"
	"fmt"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// controlStrategy is the two negative controls, at-least-once and
// at-most-once: one type, since they differ only in the order of the
// offset commit and the write (control.run). Results go to the SQL sink;
// positions live in the Kafka consumer group, not in the sink.
type controlStrategy struct {
	sqlStrategy
	atMostOnce bool
}

// stored reads the consumer group's committed offsets.
func (c *controlStrategy) stored(ctx context.Context) (map[int32]int64, error) {
	return offsets.NewKafkaGroup(c.client, c.cfg.Group.ID, c.cfg.Topic).Load(ctx, c.src.Partitions())
}

// start commits as this generation's member (the group fences an older
// one) and starts from the group's offsets (groupStart).
func (c *controlStrategy) start(ctx context.Context, s session, d *batch.Driver) (int64, error) {
	group := offsets.NewKafkaGroup(c.client, c.cfg.Group.ID, c.cfg.Topic).AsMember(s.MemberID, s.Generation)
	var err error
	if d.Next, err = groupStart(ctx, group, c.src, c.cfg, s.Partitions); err != nil {
		return 0, err
	}
	d.Epoch = int64(s.Generation)
	d.Task = (&control{src: c.src, w: c.w, work: workloadOf(c.cfg), group: group, job: c.cfg.Job, retry: c.cfg.retry, crash: c.crash, atMostOnce: c.atMostOnce}).run
	return d.Epoch, nil
}

// groupStart reads where the controls start on the session's partitions:
// the consumer group's committed offsets; start-from for a group that has
// none at all, earliest for a partition that appeared later.
func groupStart(ctx context.Context, g *offsets.KafkaGroup, src *batch.KafkaSource, cfg Config, parts []int32) (map[int32]int64, error) {
	committed, err := g.Load(ctx, src.Partitions())
	if err != nil {
		return nil, err
	}
	start, err := shared.StartRule(ctx, src, cfg.Topic, cfg.StartFrom == StartLatest)
	if err != nil {
		return nil, err
	}
	next := make(map[int32]int64, len(parts))
	for _, p := range parts {
		if off, ok := committed[p]; ok {
			next[p] = off
			continue
		}
		if next[p], err = start(p, len(committed) == 0); err != nil {
			return nil, err
		}
		// Record the start before the first batch, as claimPartitions does for
		// mb_offsets: otherwise a crash before the partition's first commit
		// would resolve "latest" again on restart and skip what arrived.
		if err := g.Commit(ctx, p, next[p]); err != nil {
			return nil, err
		}
	}
	return next, nil
}

// control is the task of the two negative controls. Results go to the SQL
// sink as plain autocommit upserts; offsets go to the Kafka consumer group,
// as a hand-written consumer would keep them. Nothing ties the two:
//
//   - at-least-once writes, then commits the offset: a crash in between
//     replays the batch, and its totals are counted twice;
//   - at-most-once commits the offset, then writes: a crash in between
//     loses the batch's results.
type control struct {
	src        batch.Source
	w          *sqlsink.Writer
	work       workload
	group      *offsets.KafkaGroup
	job        string
	retry      *retryPolicy
	crash      func(point string)
	atMostOnce bool
}

func (c *control) run(ctx context.Context, b batch.Info, r record.Range) (batch.TaskResult, error) {
	what := fmt.Sprintf("batch %d %s", b.ID, r)
	var res batch.TaskResult
	pt := c.work.newPart(c.job)
	// The dead letters are written with the results, after the read (and,
	// at-most-once, after the offset commit): spooled until then.
	dead := newDLSpool()
	defer dead.close()
	attempts, err := withReadRetry(ctx, c.retry, what, func() error {
		pt.reset()
		if err := dead.reset(); err != nil {
			return err
		}
		n, err := process(ctx, c.src, c.job, r, pt, dead.add)
		res.Records, res.DeadLetters, res.DeadLetterReason = n.records, n.deadLetters, n.reason
		return err
	})
	res.Attempts = attempts
	if err != nil {
		return res, err
	}
	rows, err := rowsToWrite(pt)
	if err != nil {
		return res, err
	}
	half := rows.len() / 2
	start := time.Now()
	commitOffset := func() error {
		_, err := withKafkaRetry(ctx, c.retry, what+" offset", func() error { return c.group.Commit(ctx, r.Partition, r.To) })
		return err
	}
	// at-least-once retries a failed write (a write that landed before
	// its error is then counted twice: allowed). at-most-once never
	// retries one, since that could count it twice.
	write := func(f func() error) error {
		if c.atMostOnce {
			return f()
		}
		_, err := withRetry(ctx, c.retry, what+" write", f)
		return err
	}
	upsert := func(rows [][]any) error { return c.w.Upsert(ctx, c.work.upsert(), rows) }
	steps := []func() error{
		func() error { return write(func() error { return rows.write(0, half, upsert) }) },
		func() error { c.crash(CrashMidWrite); return nil },
		func() error { return write(func() error { return rows.write(half, rows.len(), upsert) }) },
		func() error {
			return dead.each(func(dls []record.DeadLetter) error {
				return write(func() error { return c.w.DeadLetters(ctx, dls) })
			})
		},
	}
	if c.atMostOnce {
		steps = append([]func() error{commitOffset, func() error { c.crash(CrashAfterOffsetsBeforeWrite); return nil }}, steps...)
	} else {
		steps = append(steps, func() error { c.crash(CrashAfterWriteBeforeOffsets); return nil }, commitOffset)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return res, err
		}
	}
	res.Commit = time.Since(start)
	return res, nil
}
