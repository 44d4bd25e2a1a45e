package strategies

// Checkpoint mode (`--strategy checkpoint`): a continuous, record-at-a-time
// pipeline made exactly-once by Flink-style barrier checkpoints and
// two-phase-commit sinks, for contrast with the micro-batch strategies.
//
//	sources (one per partition) ──hash(key)──▶ keyed operators ──▶ sink subtasks
//
// Every CheckpointInterval the coordinator injects barrier n into every
// source. A source records its next offset and forwards the barrier to
// every operator; an operator aligns (holds an input whose barrier n came
// until all inputs' did), snapshots its per-key totals and forwards the
// barrier; a sink pre-commits its transaction, opens the next and acks
// with the pending transactions. When all acked, the coordinator saves the
// checkpoint (offsets, state, pending transactions) to the state backend
// and only then tells the sinks to commit. The invariants this keeps:
//
//   - A pre-committed transaction is committed only after the checkpoint
//     listing it is saved, and a saved checkpoint's transactions are always
//     committed eventually — by the sink, or by recovery after a crash
//     (Commit is idempotent; an outcome-unknown Commit is retried, never
//     aborted).
//   - A sink acks barrier n+1 only after committing every transaction of
//     checkpoint n (the coordinator sends that commit before injecting
//     n+1), so a checkpoint lists all transactions not known committed,
//     and a committed transaction's slot (a Kafka transactional.id, an XA
//     connection) is reused only after a checkpoint that no longer lists
//     it completed: a recovery commit can never hit a newer transaction.
//   - A failed checkpoint (an error anywhere, or CheckpointTimeout) fails
//     the whole attempt: open and pre-committed transactions of no complete
//     checkpoint are aborted and the pipeline restarts in-process from the
//     latest complete checkpoint — the same recovery as after a crash.
//     ("Aborting and going on" without rewinding would lose the aborted
//     records: the next checkpoint's offsets lie past them.)

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// Limits of checkpoint mode's settings.
const (
	maxOperatorParallelism = 64
	minCheckpointInterval  = 10 * time.Millisecond
	maxXAJobBytes          = 64 // an XA branch qualifier holds the job name
	// maxRestartsWithoutProgress stops a job whose checkpoints keep
	// failing instead of restarting it forever.
	maxRestartsWithoutProgress = 5
	continuousTailQuiet        = 20 * time.Millisecond
)

func isKafkaDSN(dsn string) bool { return strings.HasPrefix(dsn, "kafka://") }
func isFileDSN(dsn string) bool  { return strings.HasPrefix(dsn, "file://") }

// ckptSinkSpec is a parsed checkpoint-mode sink.
type ckptSinkSpec struct {
	kind    string // kafka, xa, file, wal
	brokers []string
	topic   string // kafka
	dir     string // file
	dsn     string // xa, wal
}

// parseCheckpointSink reads --sink for checkpoint mode:
// kafka://host:port[,host:port]/topic, file:///dir, or an SQL DSN (XA with
// 2pc, WAL with --sink-mode wal).
func parseCheckpointSink(dsn string, mode SinkMode) (ckptSinkSpec, error) {
	switch {
	case isKafkaDSN(dsn):
		if mode == SinkModeWAL {
			return ckptSinkSpec{}, errors.New("sink: --sink-mode wal needs an SQL sink (mysql:// or sqlite://), not kafka://")
		}
		// Neither a broker address nor a topic holds an '@': a user (and
		// perhaps a password) is there, which this sink does not take.
		if strings.Contains(dsn, "@") {
			return ckptSinkSpec{}, errors.New("sink: a kafka:// sink takes no user or password: it reaches Kafka with the --kafka-tls and --kafka-sasl-* settings")
		}
		hosts, topic, ok := strings.Cut(strings.TrimPrefix(dsn, "kafka://"), "/")
		brokers := kafkautil.SplitBrokers(hosts)
		if !ok || len(brokers) == 0 || !record.ValidTopic(topic) {
			return ckptSinkSpec{}, errors.New("sink: want kafka://host:port[,host:port]/topic")
		}
		return ckptSinkSpec{kind: "kafka", brokers: brokers, topic: topic}, nil
	case isFileDSN(dsn):
		if mode == SinkModeWAL {
			return ckptSinkSpec{}, errors.New("sink: --sink-mode wal needs an SQL sink (mysql:// or sqlite://), not file://")
		}
		dir := strings.TrimPrefix(dsn, "file://")
		if dir == "" || strings.ContainsAny(dir, "?#") {
			return ckptSinkSpec{}, errors.New("sink: want file:///absolute/dir or file://relative/dir")
		}
		return ckptSinkSpec{kind: "file", dir: filepath.Clean(dir)}, nil
	case isRedisDSN(dsn):
		return ckptSinkSpec{}, errors.New("sink: checkpoint mode writes to kafka://, mysql:// (XA), file:// or, with --sink-mode wal, mysql:// or sqlite://; redis:// is for --strategy idempotent")
	}
	t, err := writers.ParseSQLDSN(dsn)
	if err != nil {
		return ckptSinkSpec{}, err
	}
	if mode == SinkModeWAL {
		return ckptSinkSpec{kind: "wal", dsn: dsn}, nil
	}
	if t.Dialect != offsets.MySQL {
		return ckptSinkSpec{}, errors.New("sink: SQLite has no two-phase commit (XA): use a mysql:// sink, or --sink-mode wal")
	}
	return ckptSinkSpec{kind: "xa", dsn: dsn}, nil
}

func (c Config) validateCheckpoint(bad func(string, ...any) error) error {
	switch {
	case c.Checkpoint.OperatorParallelism < 1 || c.Checkpoint.OperatorParallelism > maxOperatorParallelism:
		return bad("operator-parallelism %d is outside 1..%d", c.Checkpoint.OperatorParallelism, maxOperatorParallelism)
	case c.Checkpoint.Interval < minCheckpointInterval:
		return bad("checkpoint-interval %s is below %s", c.Checkpoint.Interval, minCheckpointInterval)
	case c.Checkpoint.Timeout <= 0:
		return bad("checkpoint-timeout %s must be positive", c.Checkpoint.Timeout)
	case c.Checkpoint.MaxRestartTime <= 0:
		return bad("max-restart-time %s must be positive", c.Checkpoint.MaxRestartTime)
	case c.Checkpoint.StateBackend != StateBackendFile && c.Checkpoint.StateBackend != StateBackendMemory:
		return bad("state-backend %q: want file or memory", c.Checkpoint.StateBackend)
	case c.Checkpoint.SinkMode != SinkMode2PC && c.Checkpoint.SinkMode != SinkModeWAL:
		return bad("sink-mode %q: want 2pc or wal", c.Checkpoint.SinkMode)
	}
	spec, err := parseCheckpointSink(c.Sink, c.Checkpoint.SinkMode)
	if err != nil {
		return bad("%v", err)
	}
	if c.Transform != nil && (spec.kind == "kafka" || spec.kind == "file") {
		return bad("transform: checkpoint mode writes a Transform's rows, upserts into table %q, to an SQL sink: mysql:// (XA), or mysql:// or sqlite:// with --sink-mode wal; a %s:// sink takes the built-in job's per-event output only",
			c.Transform.Upsert().Table, spec.kind)
	}
	switch spec.kind {
	case "xa":
		if len(c.Job) > maxXAJobBytes {
			return bad("job %q: the XA sink names its transactions after the job: use at most %d characters", c.Job, maxXAJobBytes)
		}
	case "kafka":
		// A transaction opens at barrier n-1 and is committed after
		// checkpoint n completes: up to an interval (or a checkpoint
		// timeout) plus a checkpoint timeout later; after a crash, a
		// restart later still.
		need := max(c.Checkpoint.Interval, c.Checkpoint.Timeout) + c.Checkpoint.Timeout + c.Checkpoint.MaxRestartTime
		if err := writers.CheckKafkaTxnTimeout(c.Checkpoint.KafkaTxnTimeout, need); err != nil {
			return bad("%v (need: max(checkpoint interval, checkpoint timeout) + checkpoint timeout + max restart time; raise --kafka-txn-timeout or lower the others)", err)
		}
	}
	return nil
}

// ckptData is the job's part of a checkpoint (offsets.Checkpoint.Data).
type ckptData struct {
	// Subtasks is the highest sink parallelism that may have left
	// transactions behind: recovery cleans up that many subtasks.
	Subtasks int `json:"subtasks"`
	// State is the operators' keyed state: per key, [events, amount]. A
	// JSON object key is not byte-exact (encoding/json writes U+FFFD for
	// bytes that are not UTF-8), which is safe because the only keys here
	// are the built-in job's, and event.Decode dead-letters every record
	// whose key is not valid UTF-8; a Transform keeps no keyed state.
	State   map[string]keyState `json:"state"`
	Pending []writers.Pending   `json:"pending"`
}

// keyState is a key's running count and amount total in the operators'
// state. The total is exact (exact.Int): it never wraps. In a checkpoint
// it is [events, amount], two JSON integers, the amount of any size, as
// checkpoints always held it.
type keyState struct {
	Events int64
	Total  exact.Int
}

func (k keyState) MarshalJSON() ([]byte, error) {
	b := append(strconv.AppendInt([]byte{'['}, k.Events, 10), ',')
	return append(k.Total.Append(b), ']'), nil
}

func (k *keyState) UnmarshalJSON(b []byte) error {
	var v [2]json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || v[0] == nil || v[1] == nil {
		return fmt.Errorf("keyed state %s: want [events, amount]", b)
	}
	events, err := strconv.ParseInt(string(v[0]), 10, 64)
	if err != nil {
		return fmt.Errorf("keyed state %s: events: %w", b, err)
	}
	var total exact.Int
	if err := total.UnmarshalJSON(v[1]); err != nil {
		return fmt.Errorf("keyed state %s: amount: %w", b, err)
	}
	*k = keyState{Events: events, Total: total}
	return nil
}

// runCheckpoint runs checkpoint mode until ctx is cancelled (a final
// checkpoint is taken and committed first), until idle for UntilIdle, or
// until it fails. A failed attempt restarts in-process from the latest
// complete checkpoint.
func runCheckpoint(ctx context.Context, cfg Config, src *batch.KafkaSource) (Result, error) {
	spec, err := parseCheckpointSink(cfg.Sink, cfg.Checkpoint.SinkMode)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	// Input written by transactional producers (this mode's own Kafka
	// output, say) ends nearly every short range in a commit marker:
	// settle such tails after 20 ms, not the batch default of 500 ms,
	// which would hold up reading and barriers.
	src.TailQuiet = continuousTailQuiet
	var store offsets.CheckpointStore
	if cfg.Checkpoint.StateBackend == StateBackendMemory {
		store = offsets.NewMemoryCheckpoints()
	} else if store, err = offsets.NewFileCheckpoints(cfg.Checkpoint.StateDir, 0); err != nil {
		return Result{}, err
	}
	crash := func(string) {}
	if cfg.CrashPoint != nil {
		crash = cfg.CrashPoint
	}
	sinks, err := openCheckpointSinks(ctx, cfg, spec, int32(len(src.Partitions())))
	if err != nil {
		return Result{}, err
	}
	defer sinks.close()
	r := &ckptRunner{cfg: cfg, log: cfg.Logger, src: src, store: store, sinks: sinks, crash: crash, started: time.Now()}
	res := Result{Sink: sinks.String()}
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
		if r.cfg.Checkpoint.OnFailure != nil {
			r.cfg.Checkpoint.OnFailure(err)
		}
		if progressed {
			failures = 0
		}
		failures++
		if failures > maxRestartsWithoutProgress {
			return res, fmt.Errorf("giving up after %d restarts without a completed checkpoint: %w", failures-1, err)
		}
		r.recoveries++
		r.log.Warn("checkpoint attempt failed; restarting from the latest complete checkpoint", "err", err, "restart", failures)
		if err := sleepBackoff(ctx, failures); err != nil {
			return res, err
		}
	}
}

// ckptRunner holds what survives an in-process restart.
type ckptRunner struct {
	cfg        Config
	log        *slog.Logger
	src        *batch.KafkaSource
	store      offsets.CheckpointStore
	sinks      *ckptSinks
	crash      func(string)
	started    time.Time
	recoveries int
}

// restore loads the latest complete checkpoint and brings sinks and
// sources to it: the checkpoint's pending transactions are committed and
// everything else the sinks left is aborted, before anything new is
// written. It returns the checkpoint to resume from.
func (r *ckptRunner) restore(ctx context.Context) (*offsets.Checkpoint, ckptData, error) {
	cfg := r.cfg
	chk, err := r.store.Latest(ctx, cfg.Job)
	if err != nil {
		return nil, ckptData{}, fatal{err}
	}
	data := ckptData{State: map[string]keyState{}}
	if chk != nil {
		if chk.Topic != cfg.Topic {
			return nil, ckptData{}, fmt.Errorf("%w: job %q's checkpoint %d is of topic %q, not %q: use another --job or --state-dir", ErrConfig, cfg.Job, chk.ID, chk.Topic, cfg.Topic)
		}
		if err := json.Unmarshal(chk.Data, &data); err != nil {
			return nil, ckptData{}, fmt.Errorf("checkpoint %d: %w", chk.ID, err)
		}
		if data.State == nil {
			data.State = map[string]keyState{}
		}
	} else {
		// A new job. Its checkpoint ids start at the clock (in ms), not at
		// 1, so that they never repeat those of an earlier run whose
		// checkpoints are gone (memory backend, a deleted state dir): sinks
		// name transactions, files and WAL marks after them.
		chk = &offsets.Checkpoint{Job: cfg.Job, Topic: cfg.Topic, Offsets: map[int32]int64{}, ID: time.Now().UnixMilli()}
		start, err := startRule(ctx, r.src, cfg)
		if err != nil {
			return nil, ckptData{}, err
		}
		for _, p := range r.src.Partitions() {
			if chk.Offsets[p], err = start(p, true); err != nil {
				return nil, ckptData{}, err
			}
		}
	}
	// Partitions added since the checkpoint start at their beginning.
	bounds, err := r.src.Bounds(ctx)
	if err != nil {
		return nil, ckptData{}, fmt.Errorf("reading offsets of topic %q: %w", cfg.Topic, err)
	}
	for p, b := range bounds {
		next, ok := chk.Offsets[p]
		switch {
		case !ok:
			chk.Offsets[p] = b.Start
		case next < b.Start:
			return nil, ckptData{}, fmt.Errorf("%s/%d: checkpoint %d resumes at %d, log starts at %d: %w", cfg.Topic, p, chk.ID, next, b.Start, batch.ErrDataLoss)
		case next > b.End:
			return nil, ckptData{}, fmt.Errorf("%s/%d: checkpoint %d resumes at %d, log ends at %d: %w", cfg.Topic, p, chk.ID, next, b.End, batch.ErrOffsetAhead)
		}
	}
	data.Subtasks = max(data.Subtasks, cfg.Checkpoint.OperatorParallelism)
	if err := r.sinks.recover(ctx, data.Subtasks, data.Pending); err != nil {
		return nil, ckptData{}, err
	}
	data.Pending = nil
	// Save the restored position before anything new is written: it pins
	// a new job's start offsets (--start-from latest must not move on a
	// restart) and records how many sink subtasks may leave transactions
	// behind, and its pending list is now empty (all committed).
	if chk.Data, err = json.Marshal(data); err != nil {
		return nil, ckptData{}, err
	}
	chk.Time = time.Now()
	if err := r.store.Save(ctx, chk); err != nil {
		return nil, ckptData{}, err
	}
	return chk, data, nil
}

// fatal marks an error that a restart can't cure.
type fatal struct{ err error }

func (f fatal) Error() string { return f.err.Error() }
func (f fatal) Unwrap() error { return f.err }

// attempt restores, runs the pipeline until it stops or fails, and reports
// whether it completed a checkpoint.
func (r *ckptRunner) attempt(ctx context.Context, res *Result) (progressed bool, err error) {
	chk, data, err := r.restore(ctx)
	if err != nil {
		return false, err
	}
	if !res.Started {
		res.Started = true
		r.log.Info("job started", "job", r.cfg.Job, "strategy", r.cfg.Strategy, "guarantee", GuaranteeOf(r.cfg.Strategy),
			"topic", r.cfg.Topic, "partitions", len(chk.Offsets), "operators", r.cfg.Checkpoint.OperatorParallelism,
			"checkpoint", chk.ID, "state", r.store, "sink", r.sinks)
	} else {
		r.log.Info("job recovered", "job", r.cfg.Job, "checkpoint", chk.ID, "recoveries", r.recoveries)
		if r.cfg.Checkpoint.OnRecovery != nil {
			r.cfg.Checkpoint.OnRecovery()
		}
	}
	p := newPipeline(r, chk, data)
	err = p.run(ctx, res)
	return p.completed > 0, err
}

// mergeState folds operator snapshots into one keyed state.
func mergeState(parts []map[string]keyState) map[string]keyState {
	out := map[string]keyState{}
	for _, m := range parts {
		maps.Copy(out, m)
	}
	return out
}

// sortedPending orders pending transactions for a stable checkpoint file.
func sortedPending(ps []writers.Pending) []writers.Pending {
	slices.SortFunc(ps, func(a, b writers.Pending) int {
		return cmp.Or(cmp.Compare(a.Subtask, b.Subtask), cmp.Compare(a.Txn, b.Txn))
	})
	return ps
}
