package strategies

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// connectTimeout bounds how long start-up waits for the sink to answer.
const connectTimeout = 30 * time.Second

// Result is what a finished run reports.
type Result struct {
	batch.Summary
	Epoch int64
	Sink  string // sink address without password
}

// Run runs the configured job until ctx is cancelled (graceful: the batch
// in flight commits or rolls back first), until it has been idle for
// UntilIdle, or until it fails.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	log := cfg.Logger

	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	w, err := writers.OpenSQL(octx, cfg.Sink)
	cancel()
	if err != nil {
		return Result{}, err
	}
	defer w.Close()
	if err := w.CreateTables(ctx); err != nil {
		return Result{}, err
	}

	client, err := sarama.NewClient(cfg.Brokers, kafkautil.Config("microbatch-"+cfg.Job))
	if err != nil {
		return Result{}, fmt.Errorf("connecting to Kafka %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, cfg.Topic)
	if err != nil {
		return Result{}, err
	}
	defer src.Close()

	claim, err := claimJob(ctx, w, src, cfg)
	if err != nil {
		return Result{}, err
	}
	res := Result{Epoch: claim.Epoch, Sink: w.String()}
	log.Info("job claimed", "job", cfg.Job, "strategy", cfg.Strategy, "topic", cfg.Topic,
		"partitions", len(claim.Positions), "epoch", claim.Epoch, "sink", w.String())

	next := make(map[int32]int64, len(claim.Positions))
	for p, pos := range claim.Positions {
		next[p] = pos.NextOffset
	}
	t := &txnTask{src: src, w: w, job: cfg.Job, log: log}
	d := &batch.Driver{
		Source:      src,
		Task:        t.run,
		Topic:       cfg.Topic,
		Next:        next,
		LastBatch:   claim.LastBatch,
		Epoch:       claim.Epoch,
		Interval:    cfg.Interval,
		MaxRecords:  cfg.MaxBatchRecords,
		Parallelism: cfg.Parallelism,
		UntilIdle:   cfg.UntilIdle,
		OnStart:     cfg.OnBatchStart,
		OnProgress:  cfg.OnProgress,
	}
	res.Summary, err = d.Run(ctx)
	return res, err
}

// claimJob takes a new epoch for the job and makes sure every partition has
// an offset row, resolving start-from for the new ones.
func claimJob(ctx context.Context, w *writers.SQL, src *batch.KafkaSource, cfg Config) (offsets.Claim, error) {
	bounds, err := src.Bounds(ctx)
	if err != nil {
		return offsets.Claim{}, fmt.Errorf("reading offsets of topic %q: %w", cfg.Topic, err)
	}
	// start-from applies to a new job; a partition that appears later is
	// read from its beginning, or what was written to it before this run
	// would be skipped.
	start := func(p int32, newJob bool) (int64, error) {
		b, ok := bounds[p]
		if !ok {
			return 0, fmt.Errorf("no offsets for %s/%d", cfg.Topic, p)
		}
		if cfg.StartFrom == StartLatest && newJob {
			return b.End, nil
		}
		return b.Start, nil
	}
	for attempt := 1; ; attempt++ {
		tx, err := w.DB().BeginTxx(ctx, nil)
		if err != nil {
			return offsets.Claim{}, fmt.Errorf("claiming job %q: %w", cfg.Job, err)
		}
		claim, err := offsets.Init(ctx, tx, w.Dialect(), cfg.Job, cfg.Topic, src.Partitions(), start)
		if err == nil {
			err = tx.Commit()
		}
		if err == nil {
			return claim, nil
		}
		_ = tx.Rollback()
		if !writers.IsRetryable(err) || attempt >= maxAttempts {
			return offsets.Claim{}, err
		}
		if err := sleepBackoff(ctx, attempt); err != nil {
			return offsets.Claim{}, err
		}
	}
}
