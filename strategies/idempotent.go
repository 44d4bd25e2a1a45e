package strategies

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers/redissink"
)

// idempotentStrategy is strategy idempotent, on Redis: offsets are
// claimed and stored in Redis, and a session first finishes the batches
// its partitions' previous owner logged but did not fold (recover).
type idempotentStrategy struct {
	*runEnv
	r *redissink.Sink
	j *redissink.Job // r bound to the job
}

// connect opens the Redis sink, waiting up to the connect timeout for it
// to answer.
func (s *idempotentStrategy) connect(ctx context.Context) error {
	return connect(ctx, s.cfg.ConnectTimeout, func(actx context.Context) (err error) {
		if s.r, err = redissink.Open(actx, s.cfg.Sink); err != nil {
			return err
		}
		if s.j, err = s.r.Job(s.cfg.Job); err != nil {
			s.r.Close()
		}
		return err
	})
}

// open is connect: Redis has no tables to create.
func (s *idempotentStrategy) open(ctx context.Context) error { return s.connect(ctx) }

// claimTable records a SQL job's query for the job, or checks it
// (claimRedisQuery).
func (s *idempotentStrategy) claimTable(ctx context.Context) error {
	return claimRedisQuery(ctx, s.cfg, s.j)
}
func (s *idempotentStrategy) close() error     { return s.r.Close() }
func (s *idempotentStrategy) sinkName() string { return s.r.String() }

func (s *idempotentStrategy) stored(ctx context.Context) (map[int32]int64, error) {
	return s.j.Offsets(ctx, s.cfg.Topic)
}

// start claims the partitions (startIdempotent), finishes their logged
// batches, and plans from their offsets.
//
// A session can start while Redis is down (a rebalance during an outage):
// the whole start is retried under the run's retry policy, as the SQL
// strategies' claim is. Each step may be repeated: a repeated claim takes
// a newer epoch, and finishing a logged batch again overwrites the same
// keys.
func (s *idempotentStrategy) start(ctx context.Context, sess session, d *batch.Driver) (int64, error) {
	var (
		st  *idempotent
		all map[int32]int64
	)
	_, err := withRetry(ctx, s.cfg.retry, fmt.Sprintf("claiming partitions of job %q", s.cfg.Job), func() (err error) {
		if st, err = startIdempotent(ctx, s.j, s.src, s.cfg, sess, s.crash); err != nil {
			return err
		}
		if err = st.recover(ctx, s.cfg.Topic, sess.Partitions); err != nil {
			return err
		}
		all, err = s.j.Offsets(ctx, s.cfg.Topic)
		return err
	})
	if err != nil {
		return 0, err
	}
	d.Next = make(map[int32]int64, len(sess.Partitions))
	for _, p := range sess.Partitions {
		d.Next[p] = all[p]
	}
	d.Epoch = st.epoch
	d.BatchIDs = func(ctx context.Context) (id int64, err error) {
		// A repeat after a lost reply only skips an id.
		_, err = withRetry(ctx, s.cfg.retry, "allocating a batch id", func() error {
			id, err = s.j.NextBatchID(ctx)
			return err
		})
		return id, err
	}
	d.Prepare, d.Task, d.Commit = st.prepare, st.task, st.commit
	return st.epoch, nil
}

// startIdempotent claims the session's partitions in Redis (a new epoch,
// checked per partition inside every script, fences their previous owner)
// after creating the offsets of partitions that have none: start-from for a
// new job, earliest for later partitions.
func startIdempotent(ctx context.Context, rw *redissink.Job, src *batch.KafkaSource, cfg Config, s session, crash func(string)) (*idempotent, error) {
	stored, err := rw.Offsets(ctx, cfg.Topic)
	if err != nil {
		return nil, err
	}
	start, err := shared.StartRule(ctx, src, cfg.Topic, cfg.StartFrom == StartLatest)
	if err != nil {
		return nil, err
	}
	starts := map[int32]int64{}
	for _, p := range s.All {
		if _, ok := stored[p]; ok {
			continue
		}
		if starts[p], err = start(p, len(stored) == 0); err != nil {
			return nil, err
		}
	}
	if err := rw.InitOffsets(ctx, cfg.Topic, starts); err != nil {
		return nil, err
	}
	epoch, err := rw.ClaimPartitions(ctx, cfg.Topic, s.Partitions, int64(s.Generation))
	if err != nil {
		return nil, err
	}
	return &idempotent{src: src, r: rw, work: workloadOf(cfg), job: cfg.Job, epoch: epoch, log: cfg.Logger, retry: cfg.retry, crash: crash}, nil
}

// idempotent is the `idempotent` strategy on Redis (redissink.Sink): the
// plan of each batch is logged before it is read; each partition task
// writes its results under a key named after its range (a replay
// overwrites); then one atomic, offset-guarded script folds the batch into
// the users' totals and advances the offsets. See package redissink for the
// key layout and the guarantee.
//
// A user's Transform (work) runs the same protocol with rows instead of
// totals: WriteRowsContribution and FoldRows, into the hashes of its
// Upsert's value columns (redissink.RowsKey).
type idempotent struct {
	src   batch.Source
	r     *redissink.Job
	work  workload // nil or totalsWork{}: the built-in job
	job   string
	epoch int64
	log   *slog.Logger
	retry *retryPolicy
	crash func(point string)
}

// user is the Transform's workload, or nil for the built-in job.
func (s *idempotent) user() workload {
	if _, builtin := s.work.(totalsWork); builtin {
		return nil
	}
	return s.work
}

// prepare logs the plan: a replay after a crash re-runs exactly these
// ranges, whatever arrived since.
func (s *idempotent) prepare(ctx context.Context, b batch.Info, ranges []record.Range) error {
	_, err := withRetry(ctx, s.retry, fmt.Sprintf("batch %d plan", b.ID), func() error {
		return s.r.LogPlan(ctx, s.epoch, b.ID, ranges)
	})
	return err
}

// task computes one range and writes its contribution (idempotently).
func (s *idempotent) task(ctx context.Context, b batch.Info, r record.Range) (batch.TaskResult, error) {
	var res batch.TaskResult
	start := time.Now()
	attempts, err := withReadRetry(ctx, s.retry, fmt.Sprintf("batch %d %s", b.ID, r), func() error {
		var err error
		res, err = s.contribute(ctx, r)
		return err
	})
	res.Attempts, res.Commit = attempts, time.Since(start)
	if err == nil {
		s.crash(CrashMidWrite) // this contribution written; others of the batch maybe not
	}
	return res, err
}

// contribute reads range r and writes its contribution. Dead letters past
// deadLetterSpillBytes are staged in Redis while the range is read; the
// fold moves them with the totals.
func (s *idempotent) contribute(ctx context.Context, r record.Range) (batch.TaskResult, error) {
	contrib, err := s.r.NewContribution(s.epoch, r)
	if err != nil {
		return batch.TaskResult{}, err
	}
	dead := dlBuffer{spill: func(dls []record.DeadLetter) error { return contrib.DeadLetters(ctx, dls) }}
	if u := s.user(); u != nil {
		return s.contributeRows(ctx, r, u, contrib, &dead)
	}
	pt := &totalsPart{job: s.job, agg: event.NewAggregator()}
	agg := pt.agg
	c, err := process(ctx, s.src, s.job, r, pt, dead.add)
	res := batch.TaskResult{Records: c.records, DeadLetters: c.deadLetters, DeadLetterReason: c.reason}
	if err != nil {
		return res, err
	}
	totals := make([]redissink.Total, agg.Len())
	for i, t := range agg.Totals() {
		totals[i] = redissink.Total{Key: t.Key, Events: t.Events, Amount: t.Amount}
	}
	return res, contrib.Totals(ctx, totals, dead.dls)
}

// contributeRows is contribute for a user's Transform.
func (s *idempotent) contributeRows(ctx context.Context, r record.Range, work workload, contrib *redissink.Contribution, dead *dlBuffer) (batch.TaskResult, error) {
	p := work.newPart(s.job)
	c, err := process(ctx, s.src, s.job, r, p, dead.add)
	res := batch.TaskResult{Records: c.records, DeadLetters: c.deadLetters, DeadLetterReason: c.reason}
	if err != nil {
		return res, err
	}
	rows, err := p.rows() // ErrConfig if the rows function misbehaves
	if err != nil {
		return res, err
	}
	err = contrib.Rows(ctx, work.upsert(), rows, dead.dls)
	if errors.Is(err, redissink.ErrValue) {
		err = fmt.Errorf("%w: transform: %w", ErrConfig, err)
	}
	return res, err
}

// commit folds the batch: totals, dead letters and offsets move at once,
// only for ranges still at their start.
func (s *idempotent) commit(ctx context.Context, b batch.Info, ranges []record.Range) (batch.CommitResult, error) {
	s.crash(CrashAfterWriteBeforeOffsets)
	start := time.Now()
	attempts, err := withRetry(ctx, s.retry, fmt.Sprintf("batch %d fold", b.ID), func() error {
		var err error
		if u := s.user(); u != nil {
			_, err = s.r.FoldRows(ctx, s.epoch, b.ID, ranges, u.upsert())
		} else {
			_, err = s.r.Fold(ctx, s.epoch, b.ID, ranges)
		}
		return err
	})
	return batch.CommitResult{Duration: time.Since(start), Attempts: attempts}, err
}

// recover finishes the ranges of the session's partitions that were
// planned but not folded — by this job's last run, or by the member that
// held them before a rebalance: they are read again (the same records: the
// plan fixed them), re-contributed and folded under the batch id they were
// planned with.
func (s *idempotent) recover(ctx context.Context, topic string, parts []int32) error {
	pending, err := s.r.PendingRanges(ctx, topic, parts)
	if err != nil || len(pending) == 0 {
		return err
	}
	byBatch := map[int64][]record.Range{}
	for _, p := range pending {
		byBatch[p.BatchID] = append(byBatch[p.BatchID], p.Range)
	}
	for id, ranges := range byBatch {
		s.log.Info("finishing a logged batch interrupted by a crash or a rebalance", "batch", id, "ranges", len(ranges))
		b := batch.Info{ID: id, Epoch: s.epoch}
		// The partitions' contributions are independent, as in a live
		// batch: write them in parallel (one after another made restarts 3×
		// slower).
		g, gctx := errgroup.WithContext(ctx)
		for _, r := range ranges {
			g.Go(func() error {
				_, err := s.task(gctx, b, r)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return fmt.Errorf("replaying batch %d: %w", id, err)
		}
		if _, err := s.commit(ctx, b, ranges); err != nil {
			return fmt.Errorf("replaying batch %d: %w", id, err)
		}
	}
	return nil
}
