package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
)

// Result is what a finished run reports.
type Result struct {
	batch.Summary        // Batches counts completed checkpoints
	Started       bool   // the job got past start-up (restored its checkpoint)
	Sink          string // sink address without password
}

// Run runs checkpoint mode, reading src, until ctx is cancelled (a final
// checkpoint is taken and committed first), until idle for UntilIdle, or
// until it fails. A failed attempt restarts in-process from the latest
// complete checkpoint. cfg must be valid (Validate).
func Run(ctx context.Context, cfg Config, src *batch.KafkaSource) (Result, error) {
	cfg.setDefaults()
	spec, err := ParseSink(cfg.Sink, cfg.SinkMode)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var store offsets.CheckpointStore
	if cfg.StateBackend == StateBackendMemory {
		store = offsets.NewMemoryCheckpoints()
	} else if store, err = offsets.NewFileCheckpoints(cfg.StateDir, 0); err != nil {
		return Result{}, err
	}
	crash := func(string) {}
	if cfg.CrashPoint != nil {
		crash = cfg.CrashPoint
	}
	sinks, err := openSinks(ctx, cfg, spec, int32(len(src.Partitions())))
	if err != nil {
		return Result{}, err
	}
	defer sinks.close()
	r := &runner{cfg: cfg, log: cfg.Logger, src: src, store: store, sinks: sinks, crash: crash, started: time.Now(),
		kafka: cmp.Or(cfg.KafkaName, "Kafka")}
	r.out = &shared.Outages{Timeout: cfg.OutageTimeout, Log: cfg.Logger, Sink: sinks.String(), OnChange: cfg.OnOutage}
	return r.run(ctx)
}

// runner holds what survives an in-process restart.
type runner struct {
	cfg        Config
	log        *slog.Logger
	src        *batch.KafkaSource
	store      offsets.CheckpointStore
	sinks      *sinkSet
	crash      func(string)
	started    time.Time
	recoveries int
	// out is the run's retry policy: failed attempts, commits and reads
	// back off and count against the outage timeout of their server.
	out   *shared.Outages
	kafka string // Kafka's name in messages
}

// serverOf names the server a failed attempt is blamed on: Kafka for a
// read, else the sink (its state backend is local).
func (r *runner) serverOf(err error) string {
	if batch.IsRetryable(err) {
		return r.kafka
	}
	return r.out.Sink
}

// answered notes that the sink answered (a checkpoint completed). Kafka
// is back when the pipeline's poller reads the partitions' ends again: a
// checkpoint completes, empty, while Kafka does not answer.
func (r *runner) answered() {
	r.out.Up(r.out.Sink)
}

// run makes attempts until one ends well or an error no restart cures.
func (r *runner) run(ctx context.Context) (Result, error) {
	res := Result{Sink: r.sinks.String()}
	failures := 0
	for {
		progressed, err := r.attempt(ctx, &res)
		switch {
		case err == nil:
			res.Elapsed = time.Since(r.started)
			return res, nil
		case errors.As(err, new(fatal)), errors.Is(err, writers.ErrTxnLost), errors.Is(err, ErrConfig),
			errors.Is(err, batch.ErrDataLoss), errors.Is(err, batch.ErrOffsetAhead):
			return res, err
		case errors.Is(err, sarama.ErrInvalidTransactionTimeout):
			// The broker refuses --kafka-txn-timeout (above its
			// transaction.max.timeout.ms; the preflight could not read
			// it): no restart changes that.
			return res, fmt.Errorf("%w: %w", ErrConfig, err)
		case ctx.Err() != nil:
			return res, err
		}
		if r.cfg.OnCheckpointFailure != nil {
			r.cfg.OnCheckpointFailure(err)
		}
		if progressed {
			failures = 0
		}
		failures++
		// No attempt limit: failed attempts back off and count against
		// the outage timeout of the server they failed on (one WARN per
		// outage, see shared.Outages), as Flink's restarts do.
		left, ferr := r.out.Failed(r.serverOf(err), "checkpoint attempt (restarting from the latest complete checkpoint)", err)
		if ferr != nil {
			return res, fmt.Errorf("no completed checkpoint: %w", ferr)
		}
		r.recoveries++
		r.log.Debug("checkpoint attempt failed; restarting from the latest complete checkpoint", "err", err, "restart", failures)
		if err := shared.Sleep(ctx, min(shared.Backoff(failures), left)); err != nil {
			return res, err
		}
	}
}

// attempt restores, runs the pipeline until it stops or fails, and reports
// whether it completed a checkpoint.
func (r *runner) attempt(ctx context.Context, res *Result) (progressed bool, err error) {
	chk, data, err := r.restore(ctx)
	if err != nil {
		return false, err
	}
	if !res.Started {
		res.Started = true
		r.log.Info("job started", "job", r.cfg.Job, "strategy", "checkpoint", "guarantee", "exactly-once",
			"topic", r.cfg.Topic, "partitions", len(chk.Offsets), "operators", r.cfg.OperatorParallelism,
			"checkpoint", chk.ID, "state", r.store, "sink", r.sinks)
	} else {
		r.log.Info("job recovered", "job", r.cfg.Job, "checkpoint", chk.ID, "recoveries", r.recoveries)
		if r.cfg.OnRecovery != nil {
			r.cfg.OnRecovery()
		}
	}
	p := newPipeline(r, chk, data)
	err = p.run(ctx, res)
	return p.completed > 0, err
}

// restore loads the latest complete checkpoint and brings sinks and
// sources to it: the checkpoint's pending transactions are committed and
// everything else the sinks left is aborted, before anything new is
// written. It returns the checkpoint to resume from.
func (r *runner) restore(ctx context.Context) (*offsets.Checkpoint, jobData, error) {
	chk, data, err := r.load(ctx)
	if err != nil {
		return nil, jobData{}, err
	}
	if err := r.resumable(ctx, chk); err != nil {
		return nil, jobData{}, err
	}
	data.Subtasks = max(data.Subtasks, r.cfg.OperatorParallelism)
	if err := r.sinks.recover(ctx, data.Subtasks, data.Pending); err != nil {
		return nil, jobData{}, err
	}
	data.Pending = nil
	// Save the restored position before anything new is written: it pins
	// a new job's start offsets (--start-from latest must not move on a
	// restart) and records how many sink subtasks may leave transactions
	// behind, and its pending list is now empty (all committed).
	if chk.Data, err = json.Marshal(data); err != nil {
		return nil, jobData{}, err
	}
	chk.Time = time.Now()
	if err := r.store.Save(ctx, chk); err != nil {
		return nil, jobData{}, err
	}
	return chk, data, nil
}

// load reads the latest complete checkpoint, or makes a new job's first.
func (r *runner) load(ctx context.Context) (*offsets.Checkpoint, jobData, error) {
	cfg := r.cfg
	chk, err := r.store.Latest(ctx, cfg.Job)
	if err != nil {
		return nil, jobData{}, fatal{err}
	}
	data := jobData{State: keyedState{}}
	if chk == nil {
		chk, err = r.newJob(ctx)
		return chk, data, err
	}
	if chk.Topic != cfg.Topic {
		return nil, jobData{}, fmt.Errorf("%w: job %q's checkpoint %d is of topic %q, not %q: use another --job or --state-dir", ErrConfig, cfg.Job, chk.ID, chk.Topic, cfg.Topic)
	}
	if err := json.Unmarshal(chk.Data, &data); err != nil {
		return nil, jobData{}, fmt.Errorf("checkpoint %d: %w", chk.ID, err)
	}
	if data.State == nil {
		data.State = keyedState{}
	}
	return chk, data, nil
}

// newJob is a new job's starting point. Its checkpoint ids start at the
// clock (in ms), not at 1, so that they never repeat those of an earlier
// run whose checkpoints are gone (memory backend, a deleted state dir):
// sinks name transactions, files and WAL marks after them. Every
// partition starts at its start, or with StartLatest at its end.
func (r *runner) newJob(ctx context.Context) (*offsets.Checkpoint, error) {
	cfg := r.cfg
	chk := &offsets.Checkpoint{Job: cfg.Job, Topic: cfg.Topic, Offsets: map[int32]int64{}, ID: time.Now().UnixMilli()}
	start, err := shared.StartRule(ctx, r.src, cfg.Topic, cfg.StartLatest)
	if err != nil {
		return nil, err
	}
	for _, p := range r.src.Partitions() {
		if chk.Offsets[p], err = start(p, true); err != nil {
			return nil, err
		}
	}
	return chk, nil
}

// resumable checks chk's offsets against the log, and starts partitions
// added since the checkpoint at their beginning.
func (r *runner) resumable(ctx context.Context, chk *offsets.Checkpoint) error {
	topic := r.cfg.Topic
	bounds, err := r.src.Bounds(ctx)
	if err != nil {
		return fmt.Errorf("reading offsets of topic %q: %w", topic, err)
	}
	for p, b := range bounds {
		next, ok := chk.Offsets[p]
		switch {
		case !ok:
			chk.Offsets[p] = b.Start
		case next < b.Start:
			return fmt.Errorf("%s/%d: checkpoint %d resumes at %d, log starts at %d: %w", topic, p, chk.ID, next, b.Start, batch.ErrDataLoss)
		case next > b.End:
			return fmt.Errorf("%s/%d: checkpoint %d resumes at %d, log ends at %d: %w", topic, p, chk.ID, next, b.End, batch.ErrOffsetAhead)
		}
	}
	return nil
}
