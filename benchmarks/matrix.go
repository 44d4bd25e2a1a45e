package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// Workload is the pre-produced input of the throughput runs.
type Workload struct {
	Events     int64  `json:"events"`
	Keys       int    `json:"keys"`
	Partitions int32  `json:"partitions"`
	Seed       uint64 `json:"seed"`
	// Format is how every event the bench produces is written (zero:
	// compact): the same events, more or less work to decode.
	Format event.Format `json:"format"`
}

// Options configure a bench run. Zero values take the defaults below.
type Options struct {
	Binary     string   // the microbatch executable (its run, verify and broker commands)
	Strategies []string // names from Names; empty: all
	Phases     []string // from Phases: which runs each strategy gets; empty: all
	Workload   Workload
	Interval   time.Duration // --interval and --checkpoint-interval of every run
	Crashes    int           // random SIGKILLs per strategy (negative: none)
	Brokers    []string      // empty: start a dev broker (kfake) and stop it at the end
	MySQL      string        // SQL sink DSN (mysql:// or sqlite://); empty: skip the strategies that need it
	Postgres   string        // PostgreSQL sink DSN for the pg-* strategies; empty: skip them
	Redis      string        // Redis DSN; empty: skip idempotent
	Out        string        // results directory

	LatencyRate     float64       // events/s of the steady production the latency is measured under
	LatencyDuration time.Duration // how long
	FeedRate        float64       // events/s fed to the input during the fault run
	FaultInitial    int64         // events in the fault run's input before its first run
	BaselineEvents  int64         // records the per-record baseline consumes
	BaselineWindow  time.Duration // at most this long
	KillSeed        uint64        // kill timing; 0: from the clock

	Progress io.Writer // progress lines; nil: none
	Command  string    // the command line, recorded in the results
}

// Defaults. DefaultInterval is short because a batch that finishes before
// the interval is up waits for the next tick: draining a backlog, the batch
// strategies can't beat --max-batch-records (100,000) × partitions per
// interval, 400,000 events/s at 1s with 4 partitions — that would measure
// the setting, not the strategy.
const (
	DefaultEvents          = 1_000_000
	DefaultKeys            = 1000
	DefaultPartitions      = 4
	DefaultSeed            = 7
	DefaultInterval        = 100 * time.Millisecond
	DefaultCrashes         = 10
	DefaultOut             = "microbatch-bench"
	DefaultLatencyRate     = 10_000
	DefaultLatencyDuration = 10 * time.Second
	DefaultFeedRate        = 5000
	DefaultFaultInitial    = 20_000
	DefaultBaselineEvents  = 50_000
	DefaultBaselineWindow  = time.Minute
)

// The phases of a strategy's runs (Options.Phases). The raw-consume
// reference runs whatever the phases, the per-record baseline with the
// throughput phase.
const (
	PhaseThroughput = "throughput" // the clean run on the backlog
	PhaseLatency    = "latency"    // the run under steady production
	PhaseFaults     = "faults"     // the kills, crash points, drain and verify
)

// Phases lists the phases in the order they run.
var Phases = []string{PhaseThroughput, PhaseLatency, PhaseFaults}

// ErrOptions marks a bad option (the CLI exits 2 on it).
var ErrOptions = errors.New("bad bench option")

func (o *Options) setDefaults() {
	if len(o.Strategies) == 0 {
		o.Strategies = Names
	}
	if len(o.Phases) == 0 {
		o.Phases = Phases
	}
	w := &o.Workload
	if w.Events == 0 {
		w.Events = DefaultEvents
	}
	if w.Keys == 0 {
		w.Keys = DefaultKeys
	}
	if w.Partitions == 0 {
		w.Partitions = DefaultPartitions
	}
	if w.Seed == 0 {
		w.Seed = DefaultSeed
	}
	if w.Format == "" {
		w.Format = event.FormatCompact
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Crashes == 0 {
		o.Crashes = DefaultCrashes
	}
	if o.Out == "" {
		o.Out = DefaultOut
	}
	if o.LatencyRate == 0 {
		o.LatencyRate = DefaultLatencyRate
	}
	if o.LatencyDuration == 0 {
		o.LatencyDuration = DefaultLatencyDuration
	}
	if o.FeedRate == 0 {
		o.FeedRate = DefaultFeedRate
	}
	if o.FaultInitial == 0 {
		o.FaultInitial = DefaultFaultInitial
	}
	if o.BaselineEvents == 0 {
		o.BaselineEvents = DefaultBaselineEvents
	}
	if o.BaselineWindow == 0 {
		o.BaselineWindow = DefaultBaselineWindow
	}
	if o.KillSeed == 0 {
		o.KillSeed = uint64(time.Now().UnixNano())
	}
}

// Validate checks the options, defaults applied.
func (o Options) Validate() error {
	o.setDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for _, n := range o.Strategies {
		if _, ok := specOf(n); !ok {
			return bad("strategies: unknown %q (known: %s)", n, strings.Join(Names, ", "))
		}
		if seen[n] {
			return bad("strategies: %q given twice", n)
		}
		seen[n] = true
	}
	for _, ph := range o.Phases {
		if !slices.Contains(Phases, ph) {
			return bad("phases: unknown %q (known: %s)", ph, strings.Join(Phases, ", "))
		}
	}
	switch {
	case o.Binary == "":
		return bad("no microbatch binary to run")
	case o.Workload.Events < 1:
		return bad("events: want at least 1")
	case o.Workload.Keys < 1:
		return bad("keys: want at least 1")
	case o.Workload.Partitions < 1 || o.Workload.Partitions > 10000:
		return bad("partitions: %d is outside 1..10000", o.Workload.Partitions)
	case o.Interval <= 0:
		return bad("interval: must be positive")
	case !slices.Contains(event.Formats, o.Workload.Format):
		return bad("format: unknown %q (known: compact, spaced, wide)", o.Workload.Format)
	case o.LatencyRate <= 0 || o.LatencyDuration <= 0 || o.LatencyRate*o.LatencyDuration.Seconds() < 1:
		return bad("latency-rate × latency-duration must be at least one event")
	case o.FeedRate <= 0:
		return bad("feed-rate: must be positive")
	case o.BaselineEvents < 2:
		return bad("baseline-events: want at least 2")
	}
	if o.MySQL != "" {
		t, err := sqlsink.ParseDSN(o.MySQL)
		if err != nil {
			return bad("mysql: %v", err)
		}
		if t.Dialect == offsets.Postgres {
			return bad("mysql: %s is PostgreSQL: give it to --postgres (the pg-* strategies), and a mysql:// or sqlite:// DSN here", t.Display)
		}
	}
	if o.Postgres != "" {
		t, err := sqlsink.ParseDSN(o.Postgres)
		if err != nil {
			return bad("postgres: %v", err)
		}
		if t.Dialect != offsets.Postgres {
			return bad("postgres: %s is not PostgreSQL: give a postgres:// DSN (MySQL/MariaDB and SQLite go to --mysql)", t.Display)
		}
	}
	if o.Redis != "" {
		if _, _, err := redissink.ParseDSN(o.Redis); err != nil {
			return bad("redis: %v", err)
		}
	}
	return nil
}

// bench is one run of the matrix.
type bench struct {
	o       Options
	ctx     context.Context
	brokers []string
	dev     *devBroker      // the dev broker the bench started, if any
	sql     *sqlsink.Writer // the --mysql sink; nil: none
	pg      *sqlsink.Writer // the --postgres sink; nil: none
	redis   *redissink.Sink
	runID   string
	input   string // the workload topic
	logDir  string
	workDir string
	rng     *rand.Rand
	prog    *progress
	topics  []string // per-run topics, deleted at the end

	wantPerKey map[string]event.Expected // the workload's per-key totals, once computed

	faultDone float64 // estimate of the current fault run's steps done
	res       *Results
}

// Run runs the matrix and writes results.md, results.json and chart.svg to
// o.Out (logs of every run in o.Out/logs). A strategy that fails is
// recorded in its row and the others still run; the returned error then
// names it, after the results were written.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.setDefaults()
	b := &bench{o: o, ctx: ctx, runID: strconv.FormatInt(time.Now().Unix()%1e8, 36), prog: newProgress(o.Progress),
		rng: rand.New(rand.NewPCG(o.KillSeed, o.KillSeed^0x5eed))}
	b.res = &Results{Started: time.Now(), Command: o.Command, Workload: o.Workload, Settings: Settings{
		Interval: o.Interval.String(), Phases: o.Phases, Crashes: max(o.Crashes, 0), LatencyRate: o.LatencyRate, LatencySeconds: o.LatencyDuration.Seconds(),
		FeedRate: o.FeedRate, FaultInitial: o.FaultInitial, BaselineEvents: o.BaselineEvents, KillSeed: o.KillSeed,
		KillFrom: killMinDelay.String(), KillTo: (killMinDelay + killSpan(o.Interval)).String(),
		ThroughputTimer: "process start → the log line of the commit that held the last event (start-up included; the --until-idle wait before exit not)",
		LatencyMethod: fmt.Sprintf("%.0f events/s produced for %s while the job runs, each stamped ts = send time; totals sinks (SQL, Redis): "+
			"a poller reads the visible event count every %s and event k (scheduled at start + k/rate) counts as visible when the count reaches k+1; "+
			"record sinks (Kafka read-committed, committed files): first seen − ts of each record", o.LatencyRate, o.LatencyDuration, pollEvery),
		RecoveryMethod: "restart → the log line of its first commit (batch committed / checkpoint completed), over the restarts of the fault run that got that far",
	}}
	if err := os.MkdirAll(filepath.Join(o.Out, "logs"), 0o755); err != nil {
		return nil, err
	}
	b.logDir = filepath.Join(o.Out, "logs")
	var err error
	if b.workDir, err = os.MkdirTemp("", "microbatch-bench-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.workDir)

	if err := b.setUp(); err != nil {
		b.tearDown()
		return b.res, err
	}
	b.runAll()
	b.tearDown()
	b.res.Seconds = time.Since(b.res.Started).Seconds()
	b.res.judge()
	if err := writeResults(o.Out, b.res); err != nil {
		return b.res, err
	}
	b.prog.printf("done in %s: %s, %s, %s", time.Since(b.res.Started).Round(time.Second),
		filepath.Join(o.Out, "results.md"), filepath.Join(o.Out, "results.json"), filepath.Join(o.Out, "chart.svg"))
	if ctx.Err() != nil {
		return b.res, ctx.Err()
	}
	if len(b.res.Errors) > 0 {
		return b.res, fmt.Errorf("bench: %d failures, first: %s", len(b.res.Errors), b.res.Errors[0])
	}
	return b.res, nil
}

// setUp starts or checks the servers, records the machine, plans the
// steps and produces the workload.
func (b *bench) setUp() error {
	o := b.o
	b.brokers = o.Brokers
	if len(b.brokers) == 0 {
		b.prog.printf("starting a dev broker (microbatch broker, kfake)")
		dev, err := startDevBroker(o.Binary, o.Workload.Partitions, filepath.Join(b.logDir, "broker.log"))
		if err != nil {
			return err
		}
		b.dev = dev
		b.brokers = []string{dev.addr}
	}
	b.res.Machine = Machine{CPUs: runtime.NumCPU(), CPUModel: cpuModel(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Go: runtime.Version(), Broker: brokerKind(b.brokers)}
	if b.dev != nil {
		b.res.Machine.Broker += ", started by the bench"
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if o.MySQL != "" {
		w, err := sqlsink.Open(ctx, o.MySQL)
		if err != nil {
			return fmt.Errorf("--mysql: %w", err)
		}
		b.sql = w
		if err := w.CreateTables(ctx); err != nil {
			return err
		}
		b.res.Machine.MySQL = sqlVersion(ctx, w)
	}
	if o.Postgres != "" {
		w, err := sqlsink.Open(ctx, o.Postgres)
		if err != nil {
			return fmt.Errorf("--postgres: %w", err)
		}
		b.pg = w
		if err := w.CreateTables(ctx); err != nil {
			return err
		}
		b.res.Machine.Postgres = sqlVersion(ctx, w)
	}
	if o.Redis != "" {
		r, err := redissink.Open(ctx, o.Redis)
		if err != nil {
			return fmt.Errorf("--redis: %w", err)
		}
		b.redis = r
		b.res.Machine.Redis = redisVersion(ctx, r)
	}
	b.prog.printf("machine: %d CPUs (%s), %s, broker %s", b.res.Machine.CPUs, b.res.Machine.CPUModel, b.res.Machine.Go, b.res.Machine.Broker)

	// The plan, for the ETA.
	w := o.Workload
	b.prog.plan(float64(w.Events)/150_000 + 2)       // produce
	b.prog.plan(3 * (float64(w.Events)/800_000 + 1)) // raw consume three times
	if b.runs(PhaseThroughput) {
		b.prog.plan(3 * b.estNoGuarantee()) // the no-guarantee pipeline three times
	}
	if b.sql != nil && b.runs(PhaseThroughput) {
		b.prog.plan(min(float64(o.BaselineEvents)/3000+3, o.BaselineWindow.Seconds()))
	}
	for _, n := range o.Strategies {
		s, _ := specOf(n)
		if reason := b.skipReason(s); reason != "" {
			continue
		}
		b.prog.plan(b.estPhases(s))
	}

	b.input = workloadTopic(w)
	b.prog.printf("workload: %d events, %d keys, %d partitions, seed %d, format %s in topic %s", w.Events, w.Keys, w.Partitions, w.Seed, w.Format, b.input)
	start := time.Now()
	produced, err := ensureWorkload(b.ctx, w, b.brokers, b.input)
	if err != nil {
		return fmt.Errorf("producing the workload: %w", err)
	}
	if produced {
		b.prog.printf("produced the workload in %s", time.Since(start).Round(time.Millisecond))
	} else {
		b.prog.printf("reusing the workload already in %s", b.input)
	}
	b.prog.finished(float64(w.Events)/150_000 + 2)
	return nil
}

func (b *bench) tearDown() {
	if len(b.res.Errors) == 0 {
		b.cleanUp()
	} else {
		b.prog.printf("keeping the bench's topics and sink data (jobs mb%s-*) for inspection", b.runID)
	}
	if b.dev != nil {
		b.prog.printf("stopping the dev broker")
		b.dev.stop()
		b.dev = nil
	}
	if b.sql != nil {
		b.sql.Close()
	}
	if b.pg != nil {
		b.pg.Close()
	}
	if b.redis != nil {
		b.redis.Close()
	}
}

// cleanUp removes what the bench's jobs left: their topics on an external
// broker, their rows in the SQL sink, their keys in Redis (best effort).
// The workload topic stays, for the next run.
func (b *bench) cleanUp() {
	if len(b.o.Brokers) > 0 {
		deleteTopics(b.brokers, b.topics)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "mb" + b.runID + "-"
	for _, w := range []*sqlsink.Writer{b.sql, b.pg} {
		if w == nil {
			continue
		}
		for _, table := range []string{"mb_totals", "mb_offsets", "mb_dead_letters", sqlsink.XATable, sqlsink.PreparedTable, sqlsink.WALTable, baselineTable} {
			_, _ = w.DB().ExecContext(ctx, `DELETE FROM `+table+` WHERE job LIKE ?`, prefix+"%")
		}
	}
	if b.redis != nil {
		c := b.redis.Client()
		it := c.Scan(ctx, 0, "mb:{"+prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			_ = c.Del(ctx, it.Val()).Err()
		}
	}
}

func (b *bench) runAll() {
	o := b.o
	// The ceiling is the best of three raw reads (two now, one at the
	// end): on a shared machine one read can be slowed by the broker's
	// own housekeeping, and a ceiling that is too low flatters everyone.
	b.raw()
	b.raw()
	if b.runs(PhaseThroughput) {
		// The bar, measured as the ceiling is: best of three reads.
		b.noGuarantee()
		b.noGuarantee()
	}
	if !b.runs(PhaseThroughput) {
		// No baseline: it is a throughput reference.
	} else if b.sql != nil && b.ctx.Err() == nil {
		b.baseline()
	} else if b.sql == nil {
		b.res.Skipped = append(b.res.Skipped, Skip{Name: "per-record baseline", Reason: "no --mysql given"})
	}
	for i, n := range o.Strategies {
		if b.ctx.Err() != nil {
			b.fail(nil, "interrupted")
			return
		}
		s, _ := specOf(n)
		if reason := b.skipReason(s); reason != "" {
			b.prog.printf("skipping %s: %s", n, reason)
			b.res.Skipped = append(b.res.Skipped, Skip{Name: n, Reason: reason})
			continue
		}
		b.prog.printf("strategy %d/%d: %s", i+1, len(o.Strategies), n)
		b.res.Rows = append(b.res.Rows, Row{Name: n, Strategy: string(s.strategy), Guarantee: string(strategies.GuaranteeOf(s.strategy))})
		row := &b.res.Rows[len(b.res.Rows)-1]
		row.Sink = b.sinkLabel(s)
		if b.runs(PhaseThroughput) {
			est := b.estClean(s)
			if err := b.clean(s, row); err != nil {
				b.fail(row, "%s clean run: %v", n, err)
			}
			b.prog.finished(est)
		}
		if b.runs(PhaseLatency) {
			if err := b.latency(s, row); err != nil {
				b.fail(row, "%s latency run: %v", n, err)
			}
			b.prog.finished(b.estLatency())
		}
		if b.runs(PhaseFaults) {
			b.faultDone = 0
			if err := b.fault(s, row); err != nil {
				b.fail(row, "%s fault run: %v", n, err)
			}
			b.prog.finished(b.estFaultAll(s) - b.faultDone)
		}
	}
	if b.ctx.Err() == nil {
		b.raw()
		if b.runs(PhaseThroughput) {
			b.noGuarantee()
		}
	}
	b.res.setRatios()
}

// fail records a failure of a step; the bench goes on with the next.
func (b *bench) fail(row *Row, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.prog.printf("FAILED: %s", msg)
	b.res.Errors = append(b.res.Errors, msg)
	if row != nil {
		row.Errors = append(row.Errors, msg)
	}
}

// raw measures the raw consume rate of the workload topic.
func (b *bench) raw() {
	b.prog.printf("raw consume: reading all %d events, no processing", b.o.Workload.Events)
	r, err := consumeAll(b.ctx, b.brokers, b.input, DefaultRawSettings)
	if err != nil {
		b.fail(nil, "raw consume: %v", err)
		return
	}
	rate := r.EventsPerSec()
	b.res.Raw.Runs = append(b.res.Raw.Runs, rate)
	b.res.Raw.Settings = DefaultRawSettings
	b.res.Raw.BytesPerRecord = float64(r.Bytes) / float64(max(r.Records, 1))
	b.res.Raw.Method = "the fastest bare sarama reader we have (" + DefaultRawSettings.String() + ") reads every partition to its end; timed from client creation to the last record; run twice before the strategies and once after, the best of the three shown"
	b.prog.finished(float64(b.o.Workload.Events)/800_000 + 1)
	b.prog.printf("raw consume: %s events (%.0f bytes each) in %s: %s events/s", group(r.Records), b.res.Raw.BytesPerRecord,
		r.Duration.Round(time.Millisecond), group(int64(rate)))
}

// baseline measures the hand-written per-record consumer.
func (b *bench) baseline() {
	limit := min(b.o.BaselineEvents, b.o.Workload.Events)
	b.prog.printf("per-record baseline: sarama consumer group, one autocommitted upsert per record, auto-committed marks; first %d events (at most %s)", limit, b.o.BaselineWindow)
	res, err := runBaseline(b.ctx, b.sql, b.brokers, b.input, "mb"+b.runID+"-baseline", limit, b.o.BaselineWindow)
	b.prog.finished(min(float64(b.o.BaselineEvents)/3000+3, b.o.BaselineWindow.Seconds()))
	if err != nil {
		b.fail(nil, "per-record baseline: %v", err)
		return
	}
	b.res.Baseline = &res
	b.prog.printf("per-record baseline: %s events/s (%s)", group(int64(res.EventsPerSec)), res.Method)
}

// runs says whether the bench runs phase ph.
func (b *bench) runs(ph string) bool { return slices.Contains(b.o.Phases, ph) }

// Step estimates in seconds, for the ETA.
func (b *bench) estPhases(s spec) float64 {
	est := 0.0
	if b.runs(PhaseThroughput) {
		est += b.estClean(s)
	}
	if b.runs(PhaseLatency) {
		est += b.estLatency()
	}
	if b.runs(PhaseFaults) {
		est += b.estFaultAll(s)
	}
	return est
}

func (b *bench) estClean(s spec) float64 {
	rate := 300_000.0
	if s.strategy == strategies.StrategyCheckpoint {
		rate = 100_000
	}
	return float64(b.o.Workload.Events)/rate + 3
}

func (b *bench) estLatency() float64 { return b.o.LatencyDuration.Seconds() + 4 }

// estFaultAll is the fault run's estimate; its kills and crash points
// report their part (estKill, estPoint) as they finish.
func (b *bench) estFaultAll(s spec) float64 {
	return 4 + 2*b.o.Interval.Seconds() + float64(max(b.o.Crashes, 0))*b.estKill() + float64(len(s.points))*b.estPoint()
}

func (b *bench) estKill() float64 {
	return (killMinDelay + killSpan(b.o.Interval)/2).Seconds() + b.o.Interval.Seconds() + 0.3
}
func (b *bench) estPoint() float64 { return 2*b.o.Interval.Seconds() + 1 }

func (b *bench) logPath(job, what string) string {
	return filepath.Join(b.logDir, job+"-"+what+".log")
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
