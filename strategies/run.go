package strategies

import (
	"context"
	"fmt"
	"log/slog"
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
	Started bool   // the job got past start-up (claimed its offsets)
	Epoch   int64  // the epoch it committed with (exactly-once SQL strategies)
	Sink    string // sink address without password
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
	if cfg.Strategy == StrategyCheckpoint {
		client, src, err := openSource(cfg)
		if err != nil {
			return Result{}, err
		}
		defer client.Close()
		defer src.Close()
		return runCheckpoint(ctx, cfg, src)
	}

	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	var w *writers.SQL
	var rw *writers.Redis
	var err error
	if cfg.Strategy == StrategyIdempotent {
		rw, err = writers.OpenRedis(octx, cfg.Sink)
	} else {
		w, err = writers.OpenSQL(octx, cfg.Sink)
	}
	cancel()
	if err != nil {
		return Result{}, err
	}
	if rw != nil {
		defer rw.Close()
	} else {
		defer w.Close()
		if err := w.CreateTables(ctx); err != nil {
			return Result{}, err
		}
	}

	client, src, err := openSource(cfg)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	defer src.Close()

	crash := func(string) {}
	if cfg.CrashPoint != nil {
		crash = cfg.CrashPoint
	}
	d := &batch.Driver{
		Source:      src,
		Topic:       cfg.Topic,
		Interval:    cfg.Interval,
		MaxRecords:  cfg.MaxBatchRecords,
		Parallelism: cfg.Parallelism,
		UntilIdle:   cfg.UntilIdle,
		OnProgress:  cfg.OnProgress,
		OnStart: func(b batch.Info, ranges []batch.Range) {
			if cfg.OnBatchStart != nil {
				cfg.OnBatchStart(b, ranges)
			}
			crash(CrashAfterPlan)
		},
	}
	res := Result{}
	switch cfg.Strategy {
	case StrategyIdempotent:
		res.Sink = rw.String()
		s, err := startIdempotent(ctx, rw, src, cfg, log, crash)
		if err != nil {
			return Result{}, err
		}
		res.Epoch = s.epoch
		if d.LastBatch, err = s.recover(ctx, cfg.Topic); err != nil {
			return Result{}, err
		}
		if d.Next, err = rw.Offsets(ctx, cfg.Job, cfg.Topic); err != nil {
			return Result{}, err
		}
		d.Epoch = s.epoch
		d.Prepare, d.Task, d.Commit = s.prepare, s.task, s.commit
	case StrategyTxn, StrategySingle:
		res.Sink = w.String()
		claim, err := claimJob(ctx, w, src, cfg)
		if err != nil {
			return Result{}, err
		}
		res.Epoch = claim.Epoch
		d.Next = make(map[int32]int64, len(claim.Positions))
		for p, pos := range claim.Positions {
			d.Next[p] = pos.NextOffset
		}
		d.LastBatch, d.Epoch = claim.LastBatch, claim.Epoch
		if cfg.Strategy == StrategyTxn {
			d.Task = (&txnTask{src: src, w: w, job: cfg.Job, log: log, crash: crash}).run
		} else {
			s := newSingle(src, w, cfg.Job, log, crash)
			d.Task, d.Commit = s.compute, s.commit
		}
	case StrategyAtLeastOnce, StrategyAtMostOnce:
		res.Sink = w.String()
		group := offsets.NewKafkaGroup(client, cfg.Job, cfg.Topic)
		if d.Next, err = groupStart(ctx, group, src, cfg); err != nil {
			return Result{}, err
		}
		c := &control{src: src, w: w, group: group, job: cfg.Job, log: log, crash: crash, atMostOnce: cfg.Strategy == StrategyAtMostOnce}
		d.Task = c.run
	}
	res.Started = true
	log.Info("job started", "job", cfg.Job, "strategy", cfg.Strategy, "guarantee", GuaranteeOf(cfg.Strategy),
		"topic", cfg.Topic, "partitions", len(d.Next), "epoch", res.Epoch, "sink", res.Sink)
	res.Summary, err = d.Run(ctx)
	return res, err
}

// openSource connects to Kafka and opens the job's topic.
func openSource(cfg Config) (sarama.Client, *batch.KafkaSource, error) {
	client, err := sarama.NewClient(cfg.Brokers, kafkautil.Config("microbatch-"+cfg.Job))
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to Kafka %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	src, err := batch.NewKafkaSource(client, cfg.Topic)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, src, nil
}

// claimJob takes a new epoch for the job and makes sure every partition has
// an offset row, resolving start-from for the new ones.
func claimJob(ctx context.Context, w *writers.SQL, src *batch.KafkaSource, cfg Config) (offsets.Claim, error) {
	start, err := startRule(ctx, src, cfg)
	if err != nil {
		return offsets.Claim{}, err
	}
	var claim offsets.Claim
	_, err = withRetry(ctx, cfg.Logger, fmt.Sprintf("claiming job %q", cfg.Job), func() error {
		tx, err := w.DB().BeginTxx(ctx, nil)
		if err != nil {
			return fmt.Errorf("claiming job %q: %w", cfg.Job, err)
		}
		defer tx.Rollback() // no-op after Commit
		if claim, err = offsets.Init(ctx, tx, w.Dialect(), cfg.Job, cfg.Topic, src.Partitions(), start); err != nil {
			return err
		}
		return tx.Commit()
	})
	return claim, err
}

// groupStart reads where the controls start: the consumer group's
// committed offsets; start-from for a group that has none at all, earliest
// for a partition that appeared later.
func groupStart(ctx context.Context, g *offsets.KafkaGroup, src *batch.KafkaSource, cfg Config) (map[int32]int64, error) {
	parts := src.Partitions()
	committed, err := g.Load(ctx, parts)
	if err != nil {
		return nil, err
	}
	start, err := startRule(ctx, src, cfg)
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
		// Record the start before the first batch, as claimJob does for
		// mb_offsets: otherwise a crash before the partition's first commit
		// would resolve "latest" again on restart and skip what arrived.
		if err := g.Commit(ctx, p, next[p]); err != nil {
			return nil, err
		}
	}
	return next, nil
}

// startIdempotent claims the job in Redis (a new epoch fences older
// instances inside the fold script) and creates the offsets of partitions
// that have none: start-from for a new job, earliest for later partitions.
func startIdempotent(ctx context.Context, rw *writers.Redis, src *batch.KafkaSource, cfg Config, log *slog.Logger, crash func(string)) (*idempotent, error) {
	epoch, err := rw.Claim(ctx, cfg.Job)
	if err != nil {
		return nil, err
	}
	stored, err := rw.Offsets(ctx, cfg.Job, cfg.Topic)
	if err != nil {
		return nil, err
	}
	start, err := startRule(ctx, src, cfg)
	if err != nil {
		return nil, err
	}
	starts := map[int32]int64{}
	for _, p := range src.Partitions() {
		if _, ok := stored[p]; ok {
			continue
		}
		if starts[p], err = start(p, len(stored) == 0); err != nil {
			return nil, err
		}
	}
	if err := rw.InitOffsets(ctx, cfg.Job, cfg.Topic, starts); err != nil {
		return nil, err
	}
	return &idempotent{src: src, r: rw, job: cfg.Job, epoch: epoch, log: log, crash: crash}, nil
}

// startRule is where a partition without stored progress begins, for every
// strategy: at --start-from for a new job (one with no stored offsets at
// all), and at its earliest offset for a partition that appears later, so
// that nothing written to it is skipped.
func startRule(ctx context.Context, src *batch.KafkaSource, cfg Config) (offsets.StartFunc, error) {
	bounds, err := src.Bounds(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading offsets of topic %q: %w", cfg.Topic, err)
	}
	return func(p int32, newJob bool) (int64, error) {
		b, ok := bounds[p]
		if !ok {
			return 0, fmt.Errorf("no offsets for %s/%d", cfg.Topic, p)
		}
		if cfg.StartFrom == StartLatest && newJob {
			return b.End, nil
		}
		return b.Start, nil
	}, nil
}
