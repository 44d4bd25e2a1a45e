package strategies

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// connectTimeout bounds how long the checkpoint sinks wait for their
// server to answer.
const connectTimeout = DefaultConnectTimeout

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

	began := time.Now()
	w, rw, err := openSink(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	if rw != nil {
		defer rw.Close()
	} else {
		defer w.Close()
		if err := w.CreateTables(ctx); err != nil {
			return Result{}, classify(err)
		}
		if cfg.Transform != nil {
			if err := checkTable(ctx, w, cfg.Transform.Upsert()); err != nil {
				return Result{}, err
			}
		}
	}

	log.Debug("sink ready", "took", time.Since(began).Round(time.Millisecond))
	client, src, err := openSource(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	defer src.Close()
	log.Debug("kafka ready", "took", time.Since(began).Round(time.Millisecond))
	if err := checkBrokerLimits(cfg, client); err != nil {
		return Result{}, err
	}

	crash := func(string) {}
	if cfg.CrashPoint != nil {
		crash = cfg.CrashPoint
	}
	// Each group session gets a driver of its own over its partitions.
	newDriver := func() *batch.Driver {
		return &batch.Driver{
			Source:      src,
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
				crash(CrashAfterPlan)
			},
		}
	}
	res := Result{}
	var start sessionStart
	var stored storedPositions
	switch cfg.Strategy {
	case StrategyIdempotent:
		res.Sink = rw.String()
		stored = func(ctx context.Context) (map[int32]int64, error) { return rw.Offsets(ctx, cfg.Job, cfg.Topic) }
		start = func(ctx context.Context, s session) (*batch.Driver, int64, error) {
			d := newDriver()
			st, err := startIdempotent(ctx, rw, src, cfg, s, crash)
			if err != nil {
				return nil, 0, err
			}
			if err := st.recover(ctx, cfg.Topic, s.Partitions); err != nil {
				return nil, 0, err
			}
			all, err := rw.Offsets(ctx, cfg.Job, cfg.Topic)
			if err != nil {
				return nil, 0, err
			}
			d.Next = make(map[int32]int64, len(s.Partitions))
			for _, p := range s.Partitions {
				d.Next[p] = all[p]
			}
			d.Epoch = st.epoch
			d.BatchIDs = func(ctx context.Context) (id int64, err error) {
				// A repeat after a lost reply only skips an id.
				_, err = withRetry(ctx, cfg.Logger, "allocating a batch id", func() error {
					id, err = rw.NextBatchID(ctx, cfg.Job)
					return err
				})
				return id, err
			}
			d.Prepare, d.Task, d.Commit = st.prepare, st.task, st.commit
			return d, st.epoch, nil
		}
	case StrategyTxn, StrategySingle:
		res.Sink = w.String()
		stored = func(ctx context.Context) (map[int32]int64, error) {
			pos, err := offsets.Load(ctx, w.DB(), cfg.Job, cfg.Topic)
			next := make(map[int32]int64, len(pos))
			for p, x := range pos {
				next[p] = x.NextOffset
			}
			return next, err
		}
		start = func(ctx context.Context, s session) (*batch.Driver, int64, error) {
			d := newDriver()
			claim, err := claimPartitions(ctx, w, src, cfg, s)
			if err != nil {
				return nil, 0, err
			}
			d.Next = make(map[int32]int64, len(claim.Positions))
			for p, pos := range claim.Positions {
				d.Next[p] = pos.NextOffset
			}
			d.LastBatch, d.Epoch = claim.LastBatch, claim.Epoch
			if cfg.Strategy == StrategyTxn {
				d.Task = (&txnTask{src: src, w: w, work: workloadOf(cfg), job: cfg.Job, log: log, crash: crash}).run
			} else {
				s := newSingle(src, w, workloadOf(cfg), cfg.Job, log, crash)
				d.Task, d.Commit = s.compute, s.commit
			}
			return d, claim.Epoch, nil
		}
	case StrategyAtLeastOnce, StrategyAtMostOnce:
		res.Sink = w.String()
		stored = func(ctx context.Context) (map[int32]int64, error) {
			return offsets.NewKafkaGroup(client, cfg.Group.ID, cfg.Topic).Load(ctx, src.Partitions())
		}
		start = func(ctx context.Context, s session) (*batch.Driver, int64, error) {
			d := newDriver()
			group := offsets.NewKafkaGroup(client, cfg.Group.ID, cfg.Topic).AsMember(s.MemberID, s.Generation)
			var err error
			if d.Next, err = groupStart(ctx, group, src, cfg, s.Partitions); err != nil {
				return nil, 0, err
			}
			d.Epoch = int64(s.Generation)
			c := &control{src: src, w: w, work: workloadOf(cfg), group: group, job: cfg.Job, log: log, crash: crash, atMostOnce: cfg.Strategy == StrategyAtMostOnce}
			d.Task = c.run
			return d, d.Epoch, nil
		}
	}
	jobLag := func(ctx context.Context, bounds map[int32]batch.Bounds) (int64, error) {
		var next map[int32]int64
		_, err := withRetry(ctx, log, "reading the job's positions", func() (err error) {
			next, err = stored(ctx)
			return err
		})
		return wholeLag(next, bounds), err
	}
	startDriver := start
	start = func(ctx context.Context, s session) (*batch.Driver, int64, error) {
		d, epoch, err := startDriver(ctx, s)
		if d != nil {
			d.JobLag = jobLag
		}
		return d, epoch, err
	}
	if cfg.Group.InstanceID == "" {
		host, _ := os.Hostname()
		slot, err := claimInstanceSlot(cfg.Group.InstanceLockDir, cfg.Group.ID, cfg.Job, host)
		if err != nil {
			log.Warn("no default instance id: joining the group as a dynamic member (a restart after a crash waits for the dead member's session to time out; set --instance-id)", "err", err)
		} else {
			cfg.Group.InstanceID = slot.ID
			// Marked free only once the member has left the group (runGroup
			// returned); a failed run's member may still hold partitions.
			defer func() { slot.Release(err == nil) }()
		}
	}
	onStart := func(epoch int64) {
		log.Info("job started", "job", cfg.Job, "strategy", cfg.Strategy, "guarantee", GuaranteeOf(cfg.Strategy),
			"topic", cfg.Topic, "partitions", len(src.Partitions()), "group", cfg.Group.ID, "instance", cfg.Group.InstanceID,
			"epoch", epoch, "sink", res.Sink)
	}
	res.Summary, res.Epoch, err = runGroup(ctx, cfg, client, src.Partitions(), start, onStart)
	res.Started = res.Epoch != 0
	if res.Started {
		// The run's last word on lag is the whole job's, whichever process
		// holds which partition: "lag=0" must mean nothing is left behind.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if bounds, berr := src.Bounds(lctx); berr == nil {
			if next, serr := stored(lctx); serr == nil {
				res.Lag = wholeLag(next, bounds)
			}
		}
	}
	return res, err
}

// storedPositions reads where the job stands on every partition of its
// topic, as its sink (or, for the controls, its consumer group) stores it.
type storedPositions func(ctx context.Context) (map[int32]int64, error)

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

// openSink connects to the micro-batch strategies' sink — Redis for
// idempotent, SQL for the others — waiting up to the connect timeout for
// it to answer.
func openSink(ctx context.Context, cfg Config) (w *writers.SQL, rw *writers.Redis, err error) {
	err = connect(ctx, cfg.ConnectTimeout, func(actx context.Context) (err error) {
		if cfg.Strategy == StrategyIdempotent {
			rw, err = writers.OpenRedis(actx, cfg.Sink)
		} else {
			w, err = writers.OpenSQL(actx, cfg.Sink)
		}
		return err
	})
	return w, rw, err
}

// checkTable makes sure a Transform's table exists with its columns and
// key before the first batch, so that a missing one is one clear message
// at start instead of a failed batch (or, on MySQL without the key,
// duplicate rows).
func checkTable(ctx context.Context, w *writers.SQL, u writers.Upsert) error {
	err := w.CheckUpsert(ctx, u)
	if errors.Is(err, writers.ErrBadTable) || errors.Is(err, writers.ErrBadIdentifier) {
		return fmt.Errorf("%w: transform: %v", ErrConfig, err)
	}
	return err
}

// claimPartitions takes a new epoch for the session's partitions and makes
// sure every partition of the topic has an offset row, resolving
// start-from for the new ones.
func claimPartitions(ctx context.Context, w *writers.SQL, src *batch.KafkaSource, cfg Config, s session) (offsets.Claim, error) {
	start, err := startRule(ctx, src, cfg)
	if err != nil {
		return offsets.Claim{}, err
	}
	var claim offsets.Claim
	_, err = withRetry(ctx, cfg.Logger, fmt.Sprintf("claiming partitions of job %q", cfg.Job), func() error {
		tx, err := w.DB().BeginTxx(ctx, nil)
		if err != nil {
			return fmt.Errorf("claiming partitions of job %q: %w", cfg.Job, err)
		}
		defer tx.Rollback() // no-op after Commit
		if claim, err = offsets.ClaimPartitions(ctx, tx, w.Dialect(), cfg.Job, cfg.Topic, s.All, s.Partitions, int64(s.Generation), start); err != nil {
			return err
		}
		return tx.Commit()
	})
	return claim, err
}

// groupStart reads where the controls start on the session's partitions:
// the consumer group's committed offsets; start-from for a group that has
// none at all, earliest for a partition that appeared later.
func groupStart(ctx context.Context, g *offsets.KafkaGroup, src *batch.KafkaSource, cfg Config, parts []int32) (map[int32]int64, error) {
	committed, err := g.Load(ctx, src.Partitions())
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
		// Record the start before the first batch, as claimPartitions does for
		// mb_offsets: otherwise a crash before the partition's first commit
		// would resolve "latest" again on restart and skip what arrived.
		if err := g.Commit(ctx, p, next[p]); err != nil {
			return nil, err
		}
	}
	return next, nil
}

// startIdempotent claims the session's partitions in Redis (a new epoch,
// checked per partition inside every script, fences their previous owner)
// after creating the offsets of partitions that have none: start-from for a
// new job, earliest for later partitions.
func startIdempotent(ctx context.Context, rw *writers.Redis, src *batch.KafkaSource, cfg Config, s session, crash func(string)) (*idempotent, error) {
	stored, err := rw.Offsets(ctx, cfg.Job, cfg.Topic)
	if err != nil {
		return nil, err
	}
	start, err := startRule(ctx, src, cfg)
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
	if err := rw.InitOffsets(ctx, cfg.Job, cfg.Topic, starts); err != nil {
		return nil, err
	}
	epoch, err := rw.ClaimPartitions(ctx, cfg.Job, cfg.Topic, s.Partitions, int64(s.Generation))
	if err != nil {
		return nil, err
	}
	return &idempotent{src: src, r: rw, work: workloadOf(cfg), job: cfg.Job, epoch: epoch, log: cfg.Logger, crash: crash}, nil
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
