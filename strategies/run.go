package strategies

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/record"
)

// Result is what a finished run reports.
type Result struct {
	batch.Summary
	Started bool   // the job got past start-up (claimed its offsets)
	Epoch   int64  // the epoch it committed with (exactly-once SQL strategies)
	Sink    string // sink address without password
	// DeadLetterReason is the reason of the run's first dead letter, ""
	// without any.
	DeadLetterReason string
}

// AllDeadLetters reports whether the run read records and every one of
// them was dead-lettered: nothing of its input reached the results.
func (r Result) AllDeadLetters() bool { return r.Records == 0 && r.DeadLetters > 0 }

// Run runs the configured job until ctx is cancelled (graceful: the batch
// in flight commits or rolls back first), until it has been idle for
// UntilIdle, or until it fails.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg.retry = newRetryPolicy(cfg)
	w := &deadLetterWatch{log: cfg.Logger, job: cfg.Job, next: cfg.OnProgress}
	cfg.OnProgress = w.progress
	res, err := run(ctx, cfg)
	res.DeadLetterReason = w.firstReason()
	return res, err
}

// run is Run with cfg ready.
func run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Strategy == StrategyCheckpoint {
		return runCheckpointMode(ctx, cfg)
	}
	env := newRunEnv(cfg)
	st := batchStrategies[cfg.Strategy](env)
	began := time.Now()
	if err := st.open(ctx); err != nil {
		return Result{}, err
	}
	defer st.close()
	env.log.Debug("sink ready", "took", time.Since(began).Round(time.Millisecond))
	client, src, err := openSource(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	defer src.Close()
	env.log.Debug("kafka ready", "took", time.Since(began).Round(time.Millisecond))
	if err := checkBrokerLimits(cfg, client); err != nil {
		return Result{}, err
	}
	if c, ok := st.(tableClaimer); ok {
		if err := c.claimTable(ctx); err != nil {
			return Result{}, err
		}
	}
	env.client, env.src = client, src
	return (&batchRun{runEnv: env, st: st}).run(ctx)
}

// runCheckpointMode runs strategy checkpoint, which has a pipeline of its
// own instead of the driver and the consumer group.
func runCheckpointMode(ctx context.Context, cfg Config) (Result, error) {
	client, src, err := openSource(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	defer src.Close()
	if err := checkBrokerLimits(cfg, client); err != nil {
		return Result{}, err
	}
	return runCheckpoint(ctx, cfg, src)
}

// batchStrategy is a micro-batch strategy (every one but checkpoint) as
// Run and the consumer group drive it. Each owns its sink and its
// start-up: how a session's partitions are claimed and where they start.
type batchStrategy interface {
	// open connects to the sink (waiting up to the connect timeout) and
	// readies it for the run: its tables, a Transform's table checked.
	open(ctx context.Context) error
	// connect only connects to the sink, writing nothing (the dry run).
	connect(ctx context.Context) error
	close() error
	// sinkName is the sink's address without password.
	sinkName() string
	// stored reads where the job stands on every partition of its topic,
	// as the sink (or, for the controls, the consumer group) stores it.
	stored(ctx context.Context) (map[int32]int64, error)
	// start claims session s's partitions — a new epoch that fences
	// whoever held them — finishes what was left half done, and readies d
	// for them: positions, epoch, task and commit. It returns the epoch.
	start(ctx context.Context, s session, d *batch.Driver) (int64, error)
}

// batchStrategies makes each micro-batch strategy's type.
var batchStrategies = map[Strategy]func(*runEnv) batchStrategy{
	StrategyTxn:         func(e *runEnv) batchStrategy { return &txnStrategy{sqlStrategy{runEnv: e}} },
	StrategySingle:      func(e *runEnv) batchStrategy { return &singleStrategy{sqlStrategy{runEnv: e}} },
	StrategyIdempotent:  func(e *runEnv) batchStrategy { return &idempotentStrategy{runEnv: e} },
	StrategyAtLeastOnce: func(e *runEnv) batchStrategy { return &controlStrategy{sqlStrategy: sqlStrategy{runEnv: e}} },
	StrategyAtMostOnce: func(e *runEnv) batchStrategy {
		return &controlStrategy{sqlStrategy: sqlStrategy{runEnv: e}, atMostOnce: true}
	},
}

// runEnv is what every strategy works with: the run's settings, its
// Kafka client and source (set by Run once the sink is ready).
type runEnv struct {
	cfg    Config
	log    *slog.Logger
	crash  func(point string) // never nil
	client sarama.Client
	src    *batch.KafkaSource
}

func newRunEnv(cfg Config) *runEnv {
	if cfg.retry == nil {
		cfg.retry = newRetryPolicy(cfg)
	}
	crash := func(string) {}
	if cfg.CrashPoint != nil {
		crash = cfg.CrashPoint
	}
	return &runEnv{cfg: cfg, log: cfg.Logger, crash: crash}
}

// batchRun is one run of a micro-batch strategy: the consumer group, with
// a driver per session.
type batchRun struct {
	*runEnv
	st batchStrategy
}

// run joins the group and runs its sessions (runGroup), then reports the
// whole job's lag.
func (r *batchRun) run(ctx context.Context) (res Result, err error) {
	cfg := &r.cfg
	res.Sink = r.st.sinkName()
	if cfg.Group.InstanceID == "" {
		host, _ := os.Hostname()
		slot, serr := claimInstanceSlot(cfg.Group.InstanceLockDir, cfg.Group.ID, cfg.Job, host)
		if serr != nil {
			r.log.Warn("no default instance id: joining the group as a dynamic member (a restart after a crash waits for the dead member's session to time out; set --instance-id)", "err", serr)
		} else {
			cfg.Group.InstanceID = slot.ID
			// Marked free only once the member has left the group (runGroup
			// returned); a failed run's member may still hold partitions.
			defer func() { slot.Release(err == nil) }()
		}
	}
	onStart := func(epoch int64) {
		r.log.Info("job started", "job", cfg.Job, "strategy", cfg.Strategy, "guarantee", GuaranteeOf(cfg.Strategy),
			"topic", cfg.Topic, "partitions", len(r.src.Partitions()), "group", cfg.Group.ID, "instance", cfg.Group.InstanceID,
			"epoch", epoch, "sink", res.Sink)
	}
	res.Summary, res.Epoch, err = runGroup(ctx, *cfg, r.client, r.src.Partitions(), r.startSession, onStart)
	res.Started = res.Epoch != 0
	if res.Started && !errors.Is(err, ErrUnreachable) {
		// The run's last word on lag is the whole job's, whichever process
		// holds which partition: "lag=0" must mean nothing is left behind.
		// (Not after an outage that ended the run: its server just failed
		// for the whole outage timeout.)
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if bounds, berr := r.src.Bounds(lctx); berr == nil {
			if next, serr := r.st.stored(lctx); serr == nil {
				res.Lag = wholeLag(next, bounds)
			}
		}
	}
	return res, err
}

// startSession is the group's sessionStart: a driver over the session's
// partitions, readied by the strategy.
func (r *batchRun) startSession(ctx context.Context, s session) (*batch.Driver, int64, error) {
	cfg := r.cfg
	d := &batch.Driver{
		Source:      boundsSource{Source: r.src, retry: cfg.retry},
		Topic:       cfg.Topic,
		Interval:    cfg.Interval,
		MaxRecords:  cfg.MaxBatchRecords,
		Parallelism: cfg.Parallelism,
		UntilIdle:   cfg.UntilIdle,
		OnProgress:  cfg.OnProgress,
		OnStart: func(b batch.Info, ranges []record.Range) {
			if cfg.OnBatchStart != nil {
				cfg.OnBatchStart(b, ranges)
			}
			r.crash(CrashAfterPlan)
		},
	}
	epoch, err := r.st.start(ctx, s, d)
	if err != nil {
		return nil, 0, err
	}
	d.JobLag = r.jobLag
	return d, epoch, nil
}

// jobLag is the driver's JobLag: the whole job's lag, from the stored
// positions of every partition.
func (r *batchRun) jobLag(ctx context.Context, bounds map[int32]batch.Bounds) (int64, error) {
	var next map[int32]int64
	_, err := withRetry(ctx, r.cfg.retry, "reading the job's positions", func() (err error) {
		next, err = r.st.stored(ctx)
		return err
	})
	return wholeLag(next, bounds), err
}

// wholeLag is the job's lag over every partition in bounds; a partition
// with no stored position has all of its log ahead of it.
func wholeLag(next map[int32]int64, bounds map[int32]batch.Bounds) int64 {
	var lag int64
	for p, b := range bounds {
		n, ok := next[p]
		if !ok {
			n = b.Start
		}
		lag += max(b.End-n, 0)
	}
	return lag
}

// openSource connects to Kafka, waiting up to the connect timeout for it
// to answer, and opens the job's topic.
func openSource(ctx context.Context, cfg Config) (sarama.Client, *batch.KafkaSource, error) {
	var client sarama.Client
	err := connect(ctx, cfg.ConnectTimeout, func(context.Context) error {
		conf, err := cfg.kafkaConfig(clientIDPrefix + cfg.Job)
		if err != nil {
			return err
		}
		c, err := cfg.Kafka.NewClient(cfg.Brokers, conf)
		if err != nil {
			return err
		}
		client = c
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	src, err := batch.NewKafkaSource(client, cfg.Topic)
	if err != nil {
		client.Close()
		return nil, nil, classify(err)
	}
	return client, src, nil
}
