package strategies

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/checkpoint"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/kafkasink"
)

// Strategy is a delivery strategy, as `--strategy` names it: the string
// values are the command line's contract.
type Strategy string

// Strategy names accepted by Config.Strategy.
const (
	StrategyTxn         Strategy = "txn"
	StrategySingle      Strategy = "single"
	StrategyAtLeastOnce Strategy = "at-least-once"
	StrategyAtMostOnce  Strategy = "at-most-once"
	StrategyIdempotent  Strategy = "idempotent"
	StrategyCheckpoint  Strategy = "checkpoint"
)

// Strategies lists the implemented strategies.
var Strategies = []Strategy{StrategyTxn, StrategySingle, StrategyIdempotent, StrategyCheckpoint, StrategyAtLeastOnce, StrategyAtMostOnce}

// Guarantee is what a strategy promises about the sink after crashes.
type Guarantee string

// Guarantees.
const (
	ExactlyOnce Guarantee = "exactly-once"
	AtLeastOnce Guarantee = "at-least-once" // no loss, duplicates possible
	AtMostOnce  Guarantee = "at-most-once"  // no duplicates, loss possible
)

// GuaranteeOf returns the promise of a strategy ("" if unknown).
func GuaranteeOf(strategy Strategy) Guarantee {
	switch strategy {
	case StrategyTxn, StrategySingle, StrategyIdempotent, StrategyCheckpoint:
		return ExactlyOnce
	case StrategyAtLeastOnce:
		return AtLeastOnce
	case StrategyAtMostOnce:
		return AtMostOnce
	}
	return ""
}

// Crash points: named moments at which Config.CrashPoint is called, so that
// tests and benchmarks can kill the process exactly there. Each strategy
// reaches the points it has, in its own order (README, "Crash points").
const (
	CrashAfterPlan               = "after-plan"                 // batch planned, nothing read
	CrashMidWrite                = "mid-write"                  // some results written, not all
	CrashAfterWriteBeforeOffsets = "after-write-before-offsets" // results written, offsets not
	CrashAfterOffsetsBeforeWrite = "after-offsets-before-write" // offsets stored, results not (all) written

	// The consumer group (every strategy but checkpoint): the group has
	// assigned this process its partitions; none is claimed yet. A process
	// that dies here is a member that died in the middle of its join.
	CrashAfterJoin = "after-join"

	// Checkpoint mode (defined by package checkpoint).
	CrashAfterBarrier                = checkpoint.CrashAfterBarrier                // a source forwarded barrier n
	CrashAfterPrecommit              = checkpoint.CrashAfterPrecommit              // a sink pre-committed, not yet acked
	CrashAfterCheckpointBeforeCommit = checkpoint.CrashAfterCheckpointBeforeCommit // checkpoint saved, no sink told to commit
	CrashMidCommit                   = checkpoint.CrashMidCommit                   // a sink committed, others may not have
)

// CrashPoints lists the crash points of the micro-batch strategies.
var CrashPoints = []string{CrashAfterPlan, CrashMidWrite, CrashAfterWriteBeforeOffsets, CrashAfterOffsetsBeforeWrite}

// GroupCrashPoints lists the crash points of the consumer group.
var GroupCrashPoints = []string{CrashAfterJoin}

// CheckpointCrashPoints lists the crash points of checkpoint mode.
var CheckpointCrashPoints = []string{CrashAfterBarrier, CrashAfterPrecommit, CrashAfterCheckpointBeforeCommit, CrashMidCommit}

// StartFrom is where a new job's partitions start (Config.StartFrom).
type StartFrom string

// Start-from values for partitions without a stored offset.
const (
	StartEarliest StartFrom = "earliest"
	StartLatest   StartFrom = "latest"
)

// Assignment is how the consumer group spreads partitions over its
// members (GroupConfig.Assignment).
type Assignment string

// Partition assignment strategies of the consumer group.
const (
	AssignSticky     Assignment = "sticky"
	AssignRange      Assignment = "range"
	AssignRoundRobin Assignment = "roundrobin"
)

// StateBackend is where checkpoint mode keeps its checkpoints
// (CheckpointConfig.StateBackend).
type StateBackend = checkpoint.StateBackend

// SinkMode is how checkpoint mode's sink makes its writes exactly-once
// (CheckpointConfig.SinkMode).
type SinkMode = checkpoint.SinkMode

// State backends and sink modes of checkpoint mode.
const (
	StateBackendFile   = checkpoint.StateBackendFile
	StateBackendMemory = checkpoint.StateBackendMemory
	SinkMode2PC        = checkpoint.SinkMode2PC
	SinkModeWAL        = checkpoint.SinkModeWAL
)

// OutageChange is a server lost or back (Config.OnOutage).
type OutageChange = shared.OutageChange

// Defaults.
const (
	DefaultTopic               = "events"
	DefaultJob                 = "default"
	DefaultInterval            = time.Second
	DefaultMaxBatchRecords     = 100_000
	DefaultOperatorParallelism = 2
	DefaultCheckpointInterval  = time.Second
	DefaultCheckpointTimeout   = time.Minute
	DefaultStateDir            = "microbatch-state"
	DefaultKafkaTxnTimeout     = 10 * time.Minute
	DefaultMaxRestartTime      = 2 * time.Minute
	DefaultSessionTimeout      = 10 * time.Second
	DefaultConnectTimeout      = shared.DefaultConnectTimeout
	DefaultOutageTimeout       = shared.DefaultOutageTimeout
	// NoOutageTimeout as Config.OutageTimeout waits for a lost server
	// forever (the CLI's --outage-timeout 0).
	NoOutageTimeout         = time.Duration(-1)
	DefaultRebalanceTimeout = time.Minute
	DefaultAssignment       = AssignSticky
	// MaxBatchRecordsLimit keeps a batch's per-key sums inside int64 (with
	// event.MaxAbsAmount) and its retry cost bounded.
	MaxBatchRecordsLimit = 1_000_000
)

// Config is one run of a job. The settings of one concern are grouped
// (Group, Checkpoint, Kafka), as sarama's Config.Consumer.Group is.
type Config struct {
	Strategy        Strategy
	Brokers         []string
	Topic           string
	Job             string
	StartFrom       StartFrom
	Sink            string // SQL DSN (sqlsink.ParseDSN), or redis:// for idempotent
	Interval        time.Duration
	Parallelism     int   // 0 = number of partitions
	MaxBatchRecords int64 // per partition per batch
	UntilIdle       time.Duration
	// ConnectTimeout is how long start-up waits for Kafka and the sink to
	// answer before it gives up (ErrUnreachable).
	ConnectTimeout time.Duration
	// OutageTimeout is how long the run waits out a server (the sink, or
	// Kafka) that stopped answering — retrying with backoff, logging one
	// line per outage — before it fails with ErrUnreachable. 0 means
	// DefaultOutageTimeout; NoOutageTimeout waits forever.
	OutageTimeout time.Duration
	// OnOutage, when set, is told when a server is lost and when it is
	// back (metrics, status pages).
	OnOutage func(OutageChange)
	// Kafka is how to reach the brokers (TLS, SASL); it applies to the
	// source and to a kafka:// checkpoint sink alike.
	Kafka kafkasink.Security

	// Group is the consumer group of every strategy but checkpoint.
	Group GroupConfig

	// Checkpoint is the settings of checkpoint mode (strategy checkpoint).
	Checkpoint CheckpointConfig

	// Transform, when set, replaces the built-in per-key totals job with
	// the user's (checkpoint mode: with an SQL sink only).
	Transform *Transform

	Logger       *slog.Logger
	OnBatchStart func(batch.Info, []record.Range)
	OnProgress   func(batch.Progress)
	// CrashPoint, when set, is called at each crash point (see
	// CrashPoints), possibly from several partition tasks at once.
	CrashPoint func(point string)

	// retry is the run's retry policy, made by Run from the settings above.
	retry *retryPolicy
}

// GroupConfig is the scale-out of every strategy but checkpoint (see the
// package doc, "Scale-out"): processes of one job join the Kafka consumer
// group ID, which assigns them partitions.
type GroupConfig struct {
	ID               string        // default: the job
	Assignment       Assignment    // sticky, range or roundrobin
	SessionTimeout   time.Duration // a member silent this long loses its partitions
	RebalanceTimeout time.Duration // how long a rebalance waits for a member's batch in flight
	// InstanceID is this process's static group membership id (KIP-345):
	// a restart with the same id takes the dead member's place and gets
	// its partitions back at once, instead of waiting SessionTimeout for
	// the dead member to be dropped. Empty: <job>-<host>-<slot>, the slot
	// being the lowest free one among the processes of the group on this
	// host (a lock file in InstanceLockDir, released by the kernel when
	// the process dies, so a restart takes the same slot; see
	// instance.go). Give every process its own id when you set it.
	InstanceID string
	// InstanceLockDir holds the slot locks of the default instance ids
	// (default: <os.TempDir()>/microbatch-members). It must be shared by
	// every process of the group with the same host name: two that lock
	// slots in separate directories both take slot 0, the same id, and
	// the broker fences the older one.
	InstanceLockDir string
}

// CheckpointConfig is the settings of checkpoint mode (strategy
// checkpoint); see package checkpoint.
type CheckpointConfig struct {
	OperatorParallelism int           // keyed operator instances (= sink subtasks)
	Interval            time.Duration // how often barriers are injected
	Timeout             time.Duration // a checkpoint not complete by then fails
	StateBackend        StateBackend  // file (StateDir) or memory
	StateDir            string
	SinkMode            SinkMode      // 2pc, or wal (SQL sinks)
	KafkaTxnTimeout     time.Duration // Kafka sink's transaction timeout
	MaxRestartTime      time.Duration // how long a restart may take; the txn timeout must cover it

	// OnFailure is told of each failed attempt that the job restarts from
	// (a checkpoint that failed or timed out, a task that died), and
	// OnRecovery when the job has been restored from the latest complete
	// checkpoint after one.
	OnFailure  func(error)
	OnRecovery func()
}

var jobRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`) // no leading dot: names files

// validGroup is the rule for group and instance ids: Kafka's topic alphabet,
// which keeps them usable in file and key names too.
func validGroup(name string) bool { return record.ValidTopic(name) }

// SetDefaults fills the settings left zero with their defaults.
func (c *Config) SetDefaults() {
	if c.Strategy == "" {
		c.Strategy = StrategyTxn
	}
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Job == "" {
		c.Job = DefaultJob
	}
	if c.StartFrom == "" {
		c.StartFrom = StartEarliest
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Group.ID == "" {
		c.Group.ID = c.Job
	}
	if c.Group.Assignment == "" {
		c.Group.Assignment = DefaultAssignment
	}
	if c.Group.SessionTimeout == 0 {
		c.Group.SessionTimeout = DefaultSessionTimeout
	}
	if c.Group.RebalanceTimeout == 0 {
		c.Group.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.Group.InstanceLockDir == "" {
		c.Group.InstanceLockDir = filepath.Join(os.TempDir(), DefaultInstanceLockDirName)
	}
	if c.Checkpoint.OperatorParallelism == 0 {
		c.Checkpoint.OperatorParallelism = DefaultOperatorParallelism
	}
	if c.Checkpoint.Interval == 0 {
		c.Checkpoint.Interval = DefaultCheckpointInterval
	}
	if c.Checkpoint.Timeout == 0 {
		c.Checkpoint.Timeout = DefaultCheckpointTimeout
	}
	if c.Checkpoint.StateBackend == "" {
		c.Checkpoint.StateBackend = StateBackendFile
	}
	if c.Checkpoint.StateDir == "" {
		c.Checkpoint.StateDir = DefaultStateDir
	}
	if c.Checkpoint.SinkMode == "" {
		c.Checkpoint.SinkMode = SinkMode2PC
	}
	if c.Checkpoint.KafkaTxnTimeout == 0 {
		c.Checkpoint.KafkaTxnTimeout = DefaultKafkaTxnTimeout
	}
	if c.Checkpoint.MaxRestartTime == 0 {
		c.Checkpoint.MaxRestartTime = DefaultMaxRestartTime
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.OutageTimeout == 0 {
		c.OutageTimeout = DefaultOutageTimeout
	}
}

// Validate checks the configuration, defaults applied; each error names
// the setting at fault.
func (c Config) Validate() error {
	c.SetDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case !slices.Contains(Strategies, c.Strategy):
		return bad("unknown strategy %q (available: %s)", c.Strategy, strings.Join(strategyNames(), ", "))
	case len(c.Brokers) == 0:
		return bad("brokers: none given")
	case c.Kafka.Validate() != nil:
		return bad("%v", c.Kafka.Validate())
	case !record.ValidTopic(c.Topic):
		return bad("topic %q: use 1-249 of [A-Za-z0-9._-]", c.Topic)
	case !jobRE.MatchString(c.Job):
		return bad("job %q: use 1-128 of [A-Za-z0-9._-], not starting with a dot", c.Job)
	case c.StartFrom != StartEarliest && c.StartFrom != StartLatest:
		return bad("start-from %q: want earliest or latest", c.StartFrom)
	case c.Sink == "":
		return bad("sink: none given")
	case c.OutageTimeout < 0 && c.OutageTimeout != NoOutageTimeout:
		return bad("outage-timeout %s is negative (0 waits forever)", c.OutageTimeout)
	case c.UntilIdle < 0:
		return bad("until-idle %s is negative", c.UntilIdle)
	case c.Transform != nil && c.Transform.validate() != nil:
		return bad("transform: %v", c.Transform.validate())
	case c.Strategy == StrategyCheckpoint:
		return c.validateCheckpoint()
	case shared.IsKafkaDSN(c.Sink) || shared.IsFileDSN(c.Sink):
		return bad("sink: a kafka:// or file:// sink needs --strategy checkpoint (strategy %s writes to SQL)", c.Strategy)
	case c.Strategy == StrategyIdempotent && !shared.IsRedisDSN(c.Sink):
		return bad("sink: strategy idempotent writes to Redis: want redis://[:password@]host:port/db")
	case c.Strategy != StrategyIdempotent && shared.IsRedisDSN(c.Sink):
		return bad("sink: a redis:// sink needs --strategy idempotent (strategy %s writes to SQL)", c.Strategy)
	case shared.IsRedisDSN(c.Sink) && c.Transform != nil && c.Transform.Upsert().Merge == writers.MergeAppend:
		return bad("transform: Redis keeps rows by key (a hash field per key), so it can't append rows to %s: make the job an upsert (a SQL row job: REPLACE INTO %s (PRIMARY KEY (…)) SELECT …) or write the append to a SQL sink",
			c.Transform.Upsert().Table, c.Transform.Upsert().Table)
	case c.Interval < 0:
		return bad("interval %s is negative", c.Interval)
	case c.Parallelism < 0:
		return bad("parallelism %d is negative", c.Parallelism)
	case c.MaxBatchRecords < 0 || c.MaxBatchRecords > MaxBatchRecordsLimit:
		return bad("max-batch-records %d is outside 1..%d", c.MaxBatchRecords, MaxBatchRecordsLimit)
	}
	return c.validateGroup(bad)
}

// validateGroup checks the consumer-group settings.
func (c Config) validateGroup(bad func(string, ...any) error) error {
	switch {
	case !validGroup(c.Group.ID):
		return bad("group %q: use 1-249 of [A-Za-z0-9._-]", c.Group.ID)
	case c.Group.Assignment != AssignSticky && c.Group.Assignment != AssignRange && c.Group.Assignment != AssignRoundRobin:
		return bad("assignment-strategy %q: want sticky, range or roundrobin", c.Group.Assignment)
	case c.Group.SessionTimeout < 100*time.Millisecond:
		return bad("session-timeout %s: must be at least 100ms (the broker's group.min.session.timeout.ms is usually 6s)", c.Group.SessionTimeout)
	case c.Group.RebalanceTimeout < c.Group.SessionTimeout:
		return bad("rebalance-timeout %s: must be at least session-timeout %s", c.Group.RebalanceTimeout, c.Group.SessionTimeout)
	case c.Group.RebalanceTimeout < 2*c.Interval:
		return bad("rebalance-timeout %s: must cover a batch in flight, at least 2 intervals (%s)", c.Group.RebalanceTimeout, 2*c.Interval)
	case c.Group.InstanceID != "" && !validGroup(c.Group.InstanceID):
		return bad("instance-id %q: use 1-249 of [A-Za-z0-9._-]", c.Group.InstanceID)
	}
	return nil
}

// strategyNames is Strategies as text, for messages.
func strategyNames() []string {
	out := make([]string, len(Strategies))
	for i, s := range Strategies {
		out[i] = string(s)
	}
	return out
}
