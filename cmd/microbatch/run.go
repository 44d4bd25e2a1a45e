package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// The demo's fixed event sequence.
const (
	demoSeed       = 1
	demoKeys       = 1000
	demoPartitions = 4
	demoBrokerDir  = "microbatch-demo-broker"
	defaultSink    = "sqlite://microbatch.db"
	// SQLite has no two-phase commit: checkpoint mode's default writes files.
	defaultCheckpointSink = "file://microbatch-output"
)

// defaultSinkFor is the sink of a job of strategy when --sink is empty.
// run and verify both take it from here, so that verify, like run, needs
// no --sink for the default: it reads where run wrote.
func defaultSinkFor(strategy strategies.Strategy) string {
	if strategy == strategies.StrategyCheckpoint {
		return defaultCheckpointSink
	}
	return defaultSink
}

func runCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a job: read Kafka in micro-batches and commit results with offsets",
		Long: `Run a job: every --interval, plan one offset range per partition, process the
partitions in parallel and commit each partition's results together with its
offset in one sink transaction.

With brokers set nowhere (no --brokers, no MICROBATCH_BROKERS, no brokers key in
the config file), an embedded Kafka broker is started in-process (its log kept
in ./` + demoBrokerDir + `) and filled with --demo-events events, so the command
works on a machine with nothing installed.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	fs.String("strategy", string(strategies.StrategyTxn), "delivery strategy: "+strings.Join(names(strategies.Strategies), ", "))
	fs.String("brokers", "", "Kafka bootstrap brokers, comma separated (set nowhere: embedded demo broker)")
	markList(fs, "brokers")
	fs.String("topic", strategies.DefaultTopic, "topic to read (with --sql: the query's FROM; if given, it must agree)")
	addSQLFlags(fs, sqlFlagHelp)
	fs.String("job", strategies.DefaultJob, "job name: keys the offset rows and totals")
	fs.String("start-from", string(strategies.StartEarliest), "where partitions without a stored offset start: earliest or latest")
	fs.String("sink", "", "sink DSN: "+strategies.SinkFormsHelp()+" (empty: "+defaultSink+"; checkpoint: "+defaultCheckpointSink+")")
	fs.Duration("interval", strategies.DefaultInterval, "batch interval")
	fs.Int("parallelism", 0, "partition tasks run at once (0: one per partition)")
	fs.Int64("max-batch-records", strategies.DefaultMaxBatchRecords, "most offsets per partition in one batch")
	fs.Duration("until-idle", 0, "exit 0 once all partitions are consumed and stay so this long (0: run forever); exit 6 if every record the run read was dead-lettered")
	fs.Int64("demo-events", 100000, "events the embedded demo broker's topic is filled with (without --brokers)")
	fs.Float64("demo-rate", 25000, "events per second of the demo generator (0: as fast as possible)")
	fs.String("group", "", "Kafka consumer group the job's processes join to share its partitions (empty: the job name)")
	fs.String("assignment-strategy", string(strategies.DefaultAssignment), "how the group spreads partitions over processes: sticky, range or roundrobin")
	fs.Duration("session-timeout", strategies.DefaultSessionTimeout, "a process silent this long loses its partitions to the others (within the broker's group.min/max.session.timeout.ms)")
	fs.Duration("rebalance-timeout", strategies.DefaultRebalanceTimeout, "how long a rebalance waits for a process to finish its batch in flight")
	fs.String("instance-id", "", "static group membership id, one per process: a restart with the same id takes the dead process's partitions back at once (empty: <job>-<host>-<slot>, the slot from a lock file in $TMPDIR/microbatch-members)")
	fs.Int("operator-parallelism", strategies.DefaultOperatorParallelism, "checkpoint: keyed operator instances, each with its own sink subtask")
	fs.Duration("checkpoint-interval", strategies.DefaultCheckpointInterval, "checkpoint: how often barriers are injected (and sink transactions committed)")
	fs.Duration("checkpoint-timeout", strategies.DefaultCheckpointTimeout, "checkpoint: a checkpoint not complete by then fails and the job restarts from the previous one")
	fs.String("state-backend", string(strategies.StateBackendFile), "checkpoint: where checkpoints are kept: file (--state-dir) or memory (lost when the process dies)")
	fs.String("state-dir", strategies.DefaultStateDir, "checkpoint: directory of the file state backend")
	fs.String("sink-mode", string(strategies.SinkMode2PC), "checkpoint: 2pc (two-phase commit) or wal (write-ahead, SQL sinks)")
	fs.Duration("kafka-txn-timeout", strategies.DefaultKafkaTxnTimeout, "checkpoint, Kafka sink: transaction timeout; must exceed checkpoint interval + timeout + max restart time")
	fs.Duration("max-restart-time", strategies.DefaultMaxRestartTime, "checkpoint: longest expected restart after a crash; pre-committed Kafka transactions must outlive it")
	fs.String("log-level", "info", "log level: info or debug (debug also logs each batch's plan: per partition the offset range it reads)")
	fs.String("metrics-addr", "", "serve Prometheus metrics (/metrics) and a live status page (/) on host:port; :port binds 127.0.0.1 (empty: off)")
	fs.Bool("dry-run", false, "check the settings, reach Kafka and the sink, print what the job would do first, and exit (writes nothing)")
	fs.Duration("connect-timeout", strategies.DefaultConnectTimeout, "how long start-up waits for Kafka and the sink to answer (exit 3 after)")
	fs.Duration("outage-timeout", strategies.DefaultOutageTimeout, "how long the run waits out Kafka or the sink failing (lost connection, failover), retrying with backoff, before it exits 3; 0 waits forever")
	fs.String("log-format", logText, "log format on stderr: text or json (text on a terminal shows progress as one live status line)")
	fs.BoolP("quiet", "q", false, "log warnings and errors only: no progress")
	addKafkaSecurityFlags(fs)
	addSinkSecurityFlags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		return runJob(cmd.Context(), s)
	}
	return cmd
}

// runJob is `run`: its settings read into a runPlan (settings -> config),
// then the dry run or the run itself.
func runJob(ctx context.Context, s *settings) error {
	rp, err := runSettings(s)
	if err != nil {
		return err
	}
	out := newOutput(os.Stderr, rp.logFormat, rp.logLevel, rp.quiet)
	defer out.done()
	rp.cfg.Logger = out.log
	rp.cfg.OnBatchStart = out.batchStart
	checkpoint := rp.cfg.Strategy == strategies.StrategyCheckpoint
	rp.cfg.OnProgress = func(p batch.Progress) { out.progress(p, checkpoint) }
	if rp.cfg.CrashPoint, err = crashPointFromEnv(); err != nil {
		return err
	}
	if rp.cfg.ConnectTimeout, err = s.duration("connect-timeout"); err != nil {
		return err
	}
	if rp.cfg.OutageTimeout, err = s.duration("outage-timeout"); err != nil {
		return err
	}
	if rp.cfg.OutageTimeout == 0 {
		rp.cfg.OutageTimeout = strategies.NoOutageTimeout // 0 waits forever
	}
	if dry, err := s.boolean("dry-run"); err != nil {
		return err
	} else if dry {
		return explainNoTopic(dryRunJob(ctx, s, rp.cfg, rp.query), rp.query)
	}
	if rp.query != nil && !isRedisDSN(rp.cfg.Sink) {
		// Before Run, which checks the table but does not create it; and
		// only for a configuration Run would take.
		check := rp.cfg
		if len(check.Brokers) == 0 {
			check.Brokers = []string{"embedded"}
		}
		if err := check.Validate(); err != nil {
			return configError{err}
		}
		if err := ensureSQLTable(ctx, rp.query, rp.cfg.Sink, rp.cfg.ConnectTimeout); err != nil {
			return err
		}
	}
	err = explainNoTopic(rp.run(ctx, s, out), rp.query)
	if owned := (*sqljob.OwnerError)(nil); errors.As(err, &owned) {
		// The table or the job's query is another's (the strategy's
		// claim at start): the reason, and what to do instead.
		return badConfig("%v (%s)", owned, ownerHint(owned, isRedisDSN(rp.cfg.Sink)))
	}
	return err
}

// runPlan is a run as its settings describe it: the library's Config and
// what the CLI does around it (the demo broker, the log output).
type runPlan struct {
	cfg strategies.Config
	// query is the --sql job (cfg.Transform runs it), nil for the
	// built-in job.
	query *sqljob.Query
	// brokersGiven: brokers is set somewhere; if not, the embedded demo
	// broker runs (and cfg.Brokers is empty).
	brokersGiven bool
	demoEvents   int64
	demoRate     float64
	logLevel     slog.Level
	logFormat    string
	quiet        bool
}

// runSettings reads run's settings into a runPlan, refusing a bad one with
// the setting's name, in the order the flags are checked since the CLI
// began (the first bad setting is the one reported).
func runSettings(s *settings) (runPlan, error) {
	var rp runPlan
	cfg, brokersGiven, err := jobSettings(s)
	if err != nil {
		return rp, err
	}
	rp.brokersGiven = brokersGiven
	if err := checkpointSettings(s, &cfg); err != nil {
		return rp, err
	}
	if err := groupSettings(s, &cfg); err != nil {
		return rp, err
	}
	par, err := s.int64("parallelism")
	if err != nil {
		return rp, err
	}
	cfg.Parallelism = int(par)
	level, err := s.oneOf("log-level", "info", "debug")
	if err != nil {
		return rp, err
	}
	if cfg.Sink == "" {
		cfg.Sink = defaultSinkFor(cfg.Strategy)
	}
	if err := strategies.CheckSink(cfg.Sink); err != nil {
		return rp, configError{fmt.Errorf("sink: %w", err)}
	}
	if rp.query, err = compileSQL(s, cfg.Strategy, cfg.Sink); err != nil {
		return rp, err
	}
	cfg.Topic = commandTopic(s, rp.query)
	if rp.query != nil {
		cfg.Transform = strategies.SQLTransform(rp.query)
	}
	if err := secureSettings(s, &cfg); err != nil {
		return rp, err
	}
	if rp.demoEvents, err = s.int64("demo-events"); err != nil {
		return rp, err
	}
	if rp.demoRate, err = s.float("demo-rate"); err != nil {
		return rp, err
	}
	rp.logLevel = slog.LevelInfo
	if level == "debug" {
		rp.logLevel = slog.LevelDebug
	}
	if rp.logFormat, err = s.oneOf("log-format", logText, logJSON); err != nil {
		return rp, err
	}
	if rp.quiet, err = s.boolean("quiet"); err != nil {
		return rp, err
	}
	rp.cfg = cfg
	return rp, nil
}

// jobSettings reads the job's own settings: what it reads, where it starts
// and how it batches. given says whether brokers is set anywhere.
func jobSettings(s *settings) (cfg strategies.Config, given bool, err error) {
	// The embedded demo broker runs only when brokers is set nowhere; a
	// brokers setting that names no broker is refused (settings.brokers).
	// So cfg.Brokers is empty exactly when the demo runs.
	brokers, given, err := s.brokers()
	if err != nil {
		return cfg, given, err
	}
	cfg = strategies.Config{
		Strategy: strategies.Strategy(s.str("strategy")),
		Brokers:  brokers,
		Topic:    s.str("topic"),
		Job:      s.str("job"),
		Sink:     s.str("sink"),
	}
	if cfg.StartFrom, err = choice(s, "start-from", strategies.StartEarliest, strategies.StartLatest); err != nil {
		return cfg, given, err
	}
	if cfg.Interval, err = s.duration("interval"); err != nil {
		return cfg, given, err
	}
	if cfg.UntilIdle, err = s.duration("until-idle"); err != nil {
		return cfg, given, err
	}
	if cfg.MaxBatchRecords, err = s.int64("max-batch-records"); err != nil {
		return cfg, given, err
	}
	// Zero would silently mean "the default" to the library: refuse it.
	if cfg.Interval == 0 {
		return cfg, given, badConfig("%s: must be positive (e.g. 1s)", s.label("interval"))
	}
	if cfg.MaxBatchRecords == 0 {
		return cfg, given, badConfig("%s: must be positive", s.label("max-batch-records"))
	}
	return cfg, given, nil
}

// run runs the job: with its status page, on the embedded demo broker when
// no brokers are given, then logs the outcome (and the demo's report).
func (rp runPlan) run(ctx context.Context, s *settings, out *output) error {
	cfg, log := rp.cfg, rp.cfg.Logger
	stopStatus, err := startStatus(s, &cfg)
	if err != nil {
		return err
	}
	defer stopStatus()

	var demo *demoRun
	if !rp.brokersGiven {
		// Refuse a bad configuration before the demo creates anything.
		check := cfg
		check.Brokers = []string{"embedded"}
		if err := check.Validate(); err != nil {
			return configError{err}
		}
		if demo, err = startDemo(ctx, log, cfg.Topic, rp.demoEvents, rp.demoRate); err != nil {
			return err
		}
		defer demo.stop()
		cfg.Brokers = demo.broker.Addrs()
	}

	res, err := strategies.Run(ctx, cfg)
	if errors.Is(err, strategies.ErrConfig) || errors.Is(err, writers.ErrBadDSN) {
		return configError{err}
	}
	if res.Started {
		logFinished(log, cfg, res, err)
	}
	out.done()
	if err != nil {
		return err
	}
	if demo != nil {
		// Also after Ctrl-C: the stop was graceful, the report still due.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// -q: no summary; the report is still made, and shown when the
		// sink fails it.
		var w io.Writer = os.Stdout
		var held bytes.Buffer
		if rp.quiet {
			w = &held
		}
		ok, err := true, error(nil)
		if rp.query != nil {
			err = demo.reportSQL(rctx, w, cfg, rp.query)
		} else {
			ok, err = demo.report(rctx, w, cfg, ctx.Err() != nil)
		}
		if rp.quiet && (!ok || err != nil) {
			_, _ = os.Stdout.Write(held.Bytes())
		}
		if err != nil {
			return err
		}
	}
	// A run to idle that dead-lettered everything it read did nothing
	// right: say so with its own exit code, not 0. (Ended by a signal, the
	// stop is graceful whatever it read.)
	if cfg.UntilIdle > 0 && ctx.Err() == nil && res.AllDeadLetters() {
		return allDeadLettersError{res: res, job: cfg.Job}
	}
	return nil
}

// allDeadLettersError is a run to idle that read records and dead-lettered
// every one of them (exit 6).
type allDeadLettersError struct {
	res strategies.Result
	job string
}

func (e allDeadLettersError) Error() string {
	return fmt.Sprintf("every one of the %d records the run read was dead-lettered (the first because: %s): nothing reached the results; "+
		"the job %s's dead letters hold each record with its reason — fix the query or the input, then reset the job's offsets to read them again",
		e.res.DeadLetters, e.res.DeadLetterReason, e.job)
}

// logFinished logs a started run's outcome, err its error. After an
// outage that ended the run the lag is not known: its last value would
// read as caught up.
func logFinished(log *slog.Logger, cfg strategies.Config, res strategies.Result, err error) {
	rate := 0.0
	if res.Elapsed > 0 {
		rate = float64(res.Records+res.DeadLetters) / res.Elapsed.Seconds()
	}
	var lag any = res.Lag
	if errors.Is(err, strategies.ErrUnreachable) {
		lag = "unknown"
	}
	log.Info("run finished", "job", cfg.Job, "strategy", cfg.Strategy, "epoch", res.Epoch, "batches", res.Batches,
		"records", res.Records, "dead_letters", res.DeadLetters, "fenced", res.Fenced, "elapsed", res.Elapsed.Round(time.Millisecond),
		"records_per_sec", int64(rate), "lag", lag, "rolled_back", res.RolledBack)
}

// groupSettings reads the consumer-group settings.
func groupSettings(s *settings, cfg *strategies.Config) error {
	var err error
	cfg.Group.ID, cfg.Group.InstanceID = s.str("group"), s.str("instance-id")
	if cfg.Group.Assignment, err = choice(s, "assignment-strategy", strategies.AssignSticky, strategies.AssignRange, strategies.AssignRoundRobin); err != nil {
		return err
	}
	if cfg.Group.SessionTimeout, err = s.duration("session-timeout"); err != nil {
		return err
	}
	if cfg.Group.RebalanceTimeout, err = s.duration("rebalance-timeout"); err != nil {
		return err
	}
	return nil
}

// checkpointSettings reads the settings of checkpoint mode.
func checkpointSettings(s *settings, cfg *strategies.Config) error {
	var err error
	ops, err := s.int64("operator-parallelism")
	if err != nil {
		return err
	}
	cfg.Checkpoint.OperatorParallelism = int(ops)
	if ops < 1 {
		return badConfig("%s: must be at least 1", s.label("operator-parallelism"))
	}
	for name, dst := range map[string]*time.Duration{
		"checkpoint-interval": &cfg.Checkpoint.Interval, "checkpoint-timeout": &cfg.Checkpoint.Timeout,
		"kafka-txn-timeout": &cfg.Checkpoint.KafkaTxnTimeout, "max-restart-time": &cfg.Checkpoint.MaxRestartTime,
	} {
		if *dst, err = s.duration(name); err != nil {
			return err
		}
		if *dst <= 0 {
			return badConfig("%s: must be positive", s.label(name))
		}
	}
	if cfg.Checkpoint.StateBackend, err = choice(s, "state-backend", strategies.StateBackendFile, strategies.StateBackendMemory); err != nil {
		return err
	}
	if cfg.Checkpoint.SinkMode, err = choice(s, "sink-mode", strategies.SinkMode2PC, strategies.SinkModeWAL); err != nil {
		return err
	}
	cfg.Checkpoint.StateDir = s.str("state-dir")
	return nil
}

// demoRun is the embedded broker plus the generator filling it.
type demoRun struct {
	broker   *devbroker.Broker
	cancel   context.CancelFunc
	done     chan error
	expected event.Expected
}

func startDemo(ctx context.Context, log *slog.Logger, topic string, events int64, rate float64) (*demoRun, error) {
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Topics: []string{topic}, Partitions: demoPartitions, DataDir: demoBrokerDir})
	if err != nil {
		return nil, err
	}
	have, err := topicSize(b.Addrs(), topic)
	if err != nil {
		b.Close()
		return nil, err
	}
	d := &demoRun{broker: b, done: make(chan error, 1), expected: event.ExpectedTotals(demoSeed, demoKeys, max(events, have))}
	gctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	log.Info("embedded demo broker started", "addr", b.Addrs()[0], "data_dir", demoBrokerDir, "topic", topic,
		"events_present", have, "events_to_produce", max(events-have, 0))
	go func() {
		if have >= events {
			d.done <- nil
			return
		}
		_, err := kafkautil.Produce(gctx, kafkautil.ProduceOptions{
			Brokers: b.Addrs(), Topic: topic, Count: events - have, Skip: have, Keys: demoKeys, Seed: demoSeed, Rate: rate,
		})
		d.done <- err
	}()
	return d, nil
}

// topicSize counts the records in topic (the demo topic has no transaction
// markers, so the end offsets are the record count).
func topicSize(brokers []string, topic string) (int64, error) {
	ends, err := kafkautil.EndOffsets(brokers, topic)
	var n int64
	for _, e := range ends {
		n += e
	}
	return n, err
}

// stop ends the generator, then the broker (which persists its log).
func (d *demoRun) stop() {
	d.cancel()
	<-d.done
	d.done <- nil // later stops find it ready
	d.broker.Close()
}

// report prints what the sink holds next to what the demo produced to w,
// and whether the sink keeps the strategy's promise. A run that was
// interrupted before catching up only says where it stands.
func (d *demoRun) report(ctx context.Context, w io.Writer, cfg strategies.Config, interrupted bool) (bool, error) {
	got, sink, err := strategies.ReadTotalsSecure(ctx, cfg.Sink, cfg.Job, cfg.Kafka)
	if err != nil {
		return false, err
	}
	if interrupted && got.Events < d.expected.Events {
		fmt.Fprintf(w, "stopped: job %s in %s holds %d of the demo's %d events, each exactly once; run again to continue\n",
			cfg.Job, sink, got.Events, d.expected.Events)
		return true, nil
	}
	return printComparison(w, sink, cfg.Job, strategies.GuaranteeOf(cfg.Strategy), got, d.expected.Events, big.NewInt(d.expected.Amount)), nil
}

// reportSQL is verify --sql on the demo: the query recomputed from the
// embedded broker's topic up to the job's positions, compared with the
// sink group by group. A difference fails the run (errDiffers).
func (d *demoRun) reportSQL(ctx context.Context, w io.Writer, cfg strategies.Config, q *sqljob.Query) error {
	v := sqlVerify{q: q, show: 10, oj: offsetsJob{job: cfg.Job, topic: q.Topic(), group: cfg.Group.ID, sink: cfg.Sink,
		strategy: cfg.Strategy, brokers: d.broker.Addrs(), kafka: cfg.Kafka, connectTimeout: cfg.ConnectTimeout}}
	if v.oj.group == "" {
		v.oj.group = cfg.Job
	}
	if cfg.Strategy == strategies.StrategyCheckpoint {
		v.stateDir = cfg.Checkpoint.StateDir
	}
	ok, err := verifySQL(ctx, w, v)
	if err == nil && !ok {
		err = errDiffers
	}
	return err
}

// crashEnv names the variable that arms a crash point: <point>:<n> makes
// the process SIGKILL itself the n-th time it reaches point. For tests and
// benchmarks; nothing happens unless it is set.
const (
	crashEnv       = "MICROBATCH_CRASH_AT"
	crashSignalEnv = "MICROBATCH_CRASH_SIGNAL"
)

// crashHoldMarker is the line a held crash point writes to stderr before
// it blocks (MICROBATCH_CRASH_SIGNAL=HOLD).
const crashHoldMarker = "crash point reached: holding"

func crashPointFromEnv() (func(string), error) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		return nil, nil
	}
	point, nstr, ok := strings.Cut(spec, ":")
	n, err := strconv.ParseInt(nstr, 10, 64)
	points := slices.Concat(strategies.CrashPoints, strategies.GroupCrashPoints, strategies.CheckpointCrashPoints)
	if !ok || err != nil || n < 1 || !slices.Contains(points, point) {
		return nil, badConfig("%s=%q: want <point>:<n>, n ≥ 1, point one of %s", crashEnv, spec, strings.Join(points, ", "))
	}
	// MICROBATCH_CRASH_SIGNAL=STOP pauses the process there instead (SIGSTOP, to
	// be continued with SIGCONT): how tests make a zombie mid-batch. HOLD
	// blocks only the task that reached the point, forever, and lets the
	// rest of the process run on: a checkpoint held at after-precommit
	// can't complete, so a kill that follows lands inside it by
	// construction, wherever the other tasks are.
	sig := syscall.SIGKILL
	hold := false
	switch v := os.Getenv(crashSignalEnv); v {
	case "", "KILL":
	case "STOP":
		sig = syscall.SIGSTOP
	case "HOLD":
		hold = true
	default:
		return nil, badConfig("%s=%q: want KILL, STOP or HOLD", crashSignalEnv, v)
	}
	var reached atomic.Int64
	return func(p string) {
		if p != point || reached.Add(1) != n {
			return
		}
		if hold {
			fmt.Fprintf(os.Stderr, "%s %s:%d\n", crashHoldMarker, point, n)
			select {} // until the process is killed
		}
		if sig == syscall.SIGKILL {
			_ = syscall.Kill(os.Getpid(), sig)
			// No cleanup, no deferred calls: a crash, not a stop.
			select {} // the signal is on its way
		}
		// kill(2) may return before every thread has stopped: wait for
		// the SIGCONT, so that nothing past the point runs before the stop
		// (the tests saw the zombie open its transaction first otherwise).
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		_ = syscall.Kill(os.Getpid(), sig)
		<-cont
	}, nil
}

// indent puts prefix before every line of text.
func indent(text, prefix string) string {
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
