package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/kafkasink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// StateBackend is where checkpoints are kept (--state-backend).
type StateBackend string

// State backends.
const (
	StateBackendFile   StateBackend = "file"   // Config.StateDir
	StateBackendMemory StateBackend = "memory" // lost when the process dies
)

// SinkMode is how an SQL sink commits (--sink-mode).
type SinkMode string

// Sink modes.
const (
	SinkMode2PC SinkMode = "2pc" // two-phase commit: XA, PostgreSQL prepared transactions, Kafka transactions, temp files
	SinkModeWAL SinkMode = "wal" // write-ahead: rows kept in the checkpoint, applied after it
)

// Crash points of checkpoint mode: named moments at which
// Config.CrashPoint is called, so that tests and benchmarks can kill the
// process exactly there. The names are part of the CLI
// (MICROBATCH_CRASH_AT); strategies re-exports them.
const (
	CrashAfterBarrier                = "after-barrier"                  // a source forwarded barrier n
	CrashAfterPrecommit              = "after-precommit"                // a sink pre-committed, not yet acked
	CrashAfterCheckpointBeforeCommit = "after-checkpoint-before-commit" // checkpoint saved, no sink told to commit
	CrashMidCommit                   = "mid-commit"                     // a sink committed, others may not have
)

// CrashPoints lists the crash points of checkpoint mode.
var CrashPoints = []string{CrashAfterBarrier, CrashAfterPrecommit, CrashAfterCheckpointBeforeCommit, CrashMidCommit}

// Limits of checkpoint mode's settings.
const (
	maxOperatorParallelism = 64
	minInterval            = 10 * time.Millisecond
	maxXAJobBytes          = 64 // an XA branch qualifier holds the job name
)

// Work is the job the pipeline runs. The zero value is the built-in job
// (per-key totals; per-event output records for Kafka and file sinks, sums
// into mb_totals for SQL sinks). Set Decode and Rows for a user's
// Transform: the sources decode each record, every value goes to sink
// subtask 0, and at each barrier Rows turns the interval's values into the
// rows of Upsert, written in the checkpoint's transaction.
type Work struct {
	Upsert writers.Upsert
	// Decode turns one record into a value; an error means a dead letter
	// with the error's text as the reason. It must not panic (strategies
	// turns a panic in the user's decode into an error) and must be safe
	// for concurrent use: every source calls it.
	Decode func(rec *batch.Record) (any, error)
	// Rows turns values Decode returned into rows of Upsert, checked and
	// sorted by key; nil for none. An error wrapping ErrConfig stops the
	// job.
	Rows func(values []any) ([][]any, error)
	// Claim, if set, runs on a SQL sink once its tables are checked and
	// before anything is written: a SQL job claims its table for the job
	// (sqljob.Query.Claim). An error stops the start.
	Claim func(ctx context.Context, w *sqlsink.Writer) error
}

// builtin says whether w is the built-in job.
func (w Work) builtin() bool { return w.Decode == nil }

// Spool keeps a transaction's dead letters until its barrier with bounded
// memory (strategies spills them to a temp file). Each calls fn with them
// in the order added, in slices; it may be called again. Not safe for
// concurrent use.
type Spool interface {
	Add(record.DeadLetter) error
	Each(fn func([]record.DeadLetter) error) error
	Reset() error
	Close()
}

// Config is one run of checkpoint mode: the settings it needs, filled by
// strategies from its own Config (defaults applied there).
type Config struct {
	Topic string
	Job   string
	// StartLatest makes a new job (no checkpoint) start at the partitions'
	// ends (--start-from latest) instead of their starts.
	StartLatest bool
	Sink        string // kafka://…, file://…, or an SQL DSN (XA, PostgreSQL prepared transactions, or write-ahead with SinkModeWAL)
	SinkMode    SinkMode
	// Kafka is how a kafka:// sink reaches its brokers (TLS, SASL).
	Kafka kafkasink.Security
	// ConnectTimeout bounds how long an SQL sink waits for its server.
	ConnectTimeout time.Duration
	// Connect, when set, opens an SQL sink: it calls open until it
	// succeeds or gives up, and returns the last error classified for the
	// exit codes (strategies sets it to its --connect-timeout retry, which
	// waits for a server that does not answer yet). Nil: open is called
	// once, bounded by ConnectTimeout.
	Connect func(ctx context.Context, open func(context.Context) error) error

	OperatorParallelism int           // keyed operator instances (= sink subtasks)
	Interval            time.Duration // how often barriers are injected
	Timeout             time.Duration // a checkpoint not complete by then fails
	StateBackend        StateBackend
	StateDir            string
	KafkaTxnTimeout     time.Duration // Kafka sink's transaction timeout
	MaxRestartTime      time.Duration // how long a restart may take; the txn timeout must cover it
	// OutageTimeout is how long failed attempts (and a sink's commits, a
	// source's reads) are retried, with backoff, while a server fails,
	// before the run gives up with ErrUnreachable; 0 or less waits forever.
	OutageTimeout time.Duration
	// KafkaName is how messages name Kafka (its brokers); "Kafka" if empty.
	KafkaName string
	// OnOutage, when set, is told when a server is lost and when it is back.
	OnOutage  func(OutageChange)
	UntilIdle time.Duration // stop after a final checkpoint once idle this long; 0: never

	Work Work
	// NewSpool makes the XA sink's dead-letter spools; nil: they are held
	// in memory until the barrier.
	NewSpool func() Spool

	Logger     *slog.Logger
	OnProgress func(batch.Progress) // each completed checkpoint
	// OnCheckpointFailure is told of each failed attempt that the job
	// restarts from (a checkpoint that failed or timed out, a task that
	// died), and OnRecovery when the job has been restored from the latest
	// complete checkpoint after one.
	OnCheckpointFailure func(error)
	OnRecovery          func()
	// CrashPoint, when set, is called at each crash point (CrashPoints),
	// possibly from several tasks at once.
	CrashPoint func(point string)

	// maxPrepared, when set, stands in for the PostgreSQL server's
	// max_prepared_transactions (tests of a server that allows none).
	maxPrepared func(context.Context) (int, error)
}

// setDefaults fills what Run needs and may be left zero: the logger and
// the connect timeout. Every other setting is the caller's (Validate).
func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = shared.DefaultConnectTimeout
	}
}

// Validate checks the settings of checkpoint mode; each error wraps
// ErrConfig and names the setting at fault.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.OperatorParallelism < 1 || c.OperatorParallelism > maxOperatorParallelism:
		return bad("operator-parallelism %d is outside 1..%d", c.OperatorParallelism, maxOperatorParallelism)
	case c.Interval < minInterval:
		return bad("checkpoint-interval %s is below %s", c.Interval, minInterval)
	case c.Timeout <= 0:
		return bad("checkpoint-timeout %s must be positive", c.Timeout)
	case c.MaxRestartTime <= 0:
		return bad("max-restart-time %s must be positive", c.MaxRestartTime)
	case c.StateBackend != StateBackendFile && c.StateBackend != StateBackendMemory:
		return bad("state-backend %q: want file or memory", c.StateBackend)
	case c.SinkMode != SinkMode2PC && c.SinkMode != SinkModeWAL:
		return bad("sink-mode %q: want 2pc or wal", c.SinkMode)
	}
	spec, err := ParseSink(c.Sink, c.SinkMode)
	if err != nil {
		return bad("%v", err)
	}
	if !c.Work.builtin() && (spec.Kind == SinkKafka || spec.Kind == SinkFile) {
		return bad("transform: checkpoint mode writes a Transform's rows, upserts into table %q, to an SQL sink: mysql:// (XA), postgres:// (prepared transactions), or mysql://, postgres:// or sqlite:// with --sink-mode wal; a %s:// sink takes the built-in job's per-event output only",
			c.Work.Upsert.Table, spec.Kind)
	}
	switch spec.Kind {
	case SinkXA:
		if len(c.Job) > maxXAJobBytes {
			return bad("job %q: the XA sink names its transactions after the job: use at most %d characters", c.Job, maxXAJobBytes)
		}
	case SinkKafka:
		// A transaction opens at barrier n-1 and is committed after
		// checkpoint n completes: up to an interval (or a checkpoint
		// timeout) plus a checkpoint timeout later; after a crash, a
		// restart later still.
		need := max(c.Interval, c.Timeout) + c.Timeout + c.MaxRestartTime
		if err := kafkasink.CheckTxnTimeout(c.KafkaTxnTimeout, need); err != nil {
			return bad("%v (need: max(checkpoint interval, checkpoint timeout) + checkpoint timeout + max restart time; raise --kafka-txn-timeout or lower the others)", err)
		}
	}
	return nil
}
