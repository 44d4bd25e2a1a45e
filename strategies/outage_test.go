package strategies_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// outageLength is how long TestOutageWaitedOut takes the sink away: longer
// than a fixed count of retries with backoff ever waited (8 tries, 11 s),
// as short as a database failover or restart.
const outageLength = 20 * time.Second

// TestOutageWaitedOut takes the job's sink away for outageLength mid-run,
// while events keep arriving, and brings it back: a proxy in front of the
// shared MariaDB (txn), a PostgreSQL database (txn, single) or Redis
// (idempotent) cuts every connection and
// refuses new ones. The run must not exit, must end exact, must report the
// outage (OnOutage: lost, then back) and log at most 5 WARN lines for it
// — not one per attempt per partition.
func TestOutageWaitedOut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		strategy strategies.Strategy
		sink     sinkTarget
	}{
		{strategies.StrategyTxn, mariaDB},
		{strategies.StrategyIdempotent, redisSink},
		{strategies.StrategyCheckpoint, mariaDB}, // XA
		{strategies.StrategyTxn, postgresSink},
		{strategies.StrategySingle, postgresSink},
	} {
		name := string(c.strategy)
		if c.sink.name == postgresSink.name {
			name += "/" + c.sink.name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testOutageWaitedOut(t, c.strategy, c.sink.dsn(t))
		})
	}
}

func testOutageWaitedOut(t *testing.T, strategy strategies.Strategy, upstream string) {
	brokers := kfake.brokers(t)
	proxy, dsn := proxied(t, upstream)
	topic := newTopic(t, brokers)
	job := uniqueName(t, "job")
	const before, during = 20_000, 10_000
	exp := produce(t, brokers, topic, integrationSeed, 0, before)

	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategy
	cfg.MaxBatchRecords = 2_000
	if strategy == strategies.StrategyCheckpoint {
		cfg = checkpointConfig(t, brokers, topic, job, dsn, string(strategies.SinkMode2PC), t.TempDir())
	}
	// Idle for longer than producing the outage's events may take on a
	// busy machine: the run must meet the refused sink, not idle out.
	cfg.UntilIdle = 10 * time.Second
	o := watchOutages(t, &cfg)
	run := startRun(t, cfg)
	<-run.first(t)

	o.counting.Store(true)
	proxy.Refuse(true)
	down := time.Now()
	e := produce(t, brokers, topic, integrationSeed, before, during)
	exp.Events, exp.Amount = exp.Events+e.Events, exp.Amount+e.Amount
	o.waitDown(t, run)
	time.Sleep(outageLength - time.Since(down))
	proxy.Refuse(false)

	res, err := run.wait(t)
	if err != nil {
		t.Fatalf("the run exited on a %s outage of its sink: %v", outageLength, err)
	}
	t.Logf("%d batches, %d records; outage changes %v; %d WARN lines from the outage on", res.Batches, res.Records, o.list(), o.warns.Load())
	if !o.saw(false) {
		t.Errorf("OnOutage never said the sink was back: %v", o.list())
	}
	if n := o.warns.Load(); n > 5 {
		t.Errorf("%d WARN lines for one outage of %s, want at most 5", n, outageLength)
	}
	if strategy == strategies.StrategyCheckpoint {
		// Its positions are in the checkpoint, not in the sink.
		got, _, err := strategies.ReadTotals(context.Background(), upstream, job)
		if err != nil {
			t.Fatal(err)
		}
		if got.Events != exp.Events || !got.AmountIs(exp.Amount) {
			t.Fatalf("sink holds events=%d amount=%d, want %d %d", got.Events, got.Amount, exp.Events, exp.Amount)
		}
		return
	}
	checkSinkAfterCuts(t, strategy, upstream, brokers, job, topic, exp, before+during)
}

// TestOutageTimeout takes the sink away for good with --outage-timeout
// 3s: the run must fail with ErrUnreachable (exit 3) naming the sink and
// how long it was gone, once the outage lasted the timeout.
func TestOutageTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		strategy strategies.Strategy
		sink     sinkTarget
	}{
		{strategies.StrategyTxn, mariaDB},
		{strategies.StrategyIdempotent, redisSink},
	} {
		t.Run(string(c.strategy), func(t *testing.T) {
			t.Parallel()
			brokers := kfake.brokers(t)
			proxy, dsn := proxied(t, c.sink.dsn(t))
			topic := newTopic(t, brokers)
			produce(t, brokers, topic, integrationSeed, 0, 5_000)
			cfg := baseConfig(t, brokers, topic, uniqueName(t, "job"), dsn)
			cfg.Strategy = c.strategy
			cfg.OutageTimeout = 3 * time.Second
			o := watchOutages(t, &cfg)
			run := startRun(t, cfg)
			<-run.first(t)
			down := time.Now() // before the cut: the run's outage clock may start at once
			proxy.Refuse(true)
			produce(t, brokers, topic, integrationSeed, 5_000, 5_000)
			_, err := run.wait(t)
			took := time.Since(down)
			t.Logf("after %s: %v", took.Round(time.Millisecond), err)
			if !errors.Is(err, strategies.ErrUnreachable) {
				t.Fatalf("run with its sink gone returned %v, want ErrUnreachable", err)
			}
			if took < cfg.OutageTimeout {
				t.Errorf("gave up after %s, before --outage-timeout %s", took, cfg.OutageTimeout)
			}
			if msg := err.Error(); !strings.Contains(msg, proxy.Addr()) || !strings.Contains(msg, "has not answered for") ||
				!strings.Contains(msg, "--outage-timeout 3s") {
				t.Errorf("message %q does not name the sink (%s), how long it was gone and the setting", msg, proxy.Addr())
			}
			if !o.saw(true) {
				t.Errorf("OnOutage never said the sink was lost: %v", o.list())
			}
		})
	}
}

// proxied starts a CutProxy in front of upstream's server and returns it
// with the DSN through it.
func proxied(t *testing.T, upstream string) (*testutil.CutProxy, string) {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testutil.StartCutProxy(t, u.Host)
	u.Host = proxy.Addr()
	return proxy, u.String()
}

// outages records a run's OnOutage calls and counts its WARN lines once
// counting is on.
type outages struct {
	mu       sync.Mutex
	changes  []strategies.OutageChange
	counting atomic.Bool
	warns    atomic.Int64
}

func watchOutages(t *testing.T, cfg *strategies.Config) *outages {
	o := &outages{}
	cfg.OnOutage = func(c strategies.OutageChange) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.changes = append(o.changes, c)
	}
	cfg.Logger = slog.New(warnCounter{slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}), o})
	return o
}

func (o *outages) list() []strategies.OutageChange {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]strategies.OutageChange(nil), o.changes...)
}

// saw reports a change of the sink, lost (down) or back.
func (o *outages) saw(down bool) bool {
	for _, c := range o.list() {
		if c.Sink && c.Down == down {
			return true
		}
	}
	return false
}

// waitDown waits until the run has met the outage (bounded; the run must
// not end meanwhile).
func (o *outages) waitDown(t *testing.T, r *runningJob) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !o.saw(true) {
		if time.Now().After(deadline) {
			t.Fatal("the run did not meet the outage within a minute")
		}
		select {
		case <-r.done:
			t.Fatalf("the run ended during the outage: %v", r.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type warnCounter struct {
	slog.Handler
	o *outages
}

func (h warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && h.o.counting.Load() {
		h.o.warns.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h warnCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return warnCounter{h.Handler.WithAttrs(as), h.o}
}

func (h warnCounter) WithGroup(name string) slog.Handler {
	return warnCounter{h.Handler.WithGroup(name), h.o}
}

// runningJob is a Run in the background.
type runningJob struct {
	firstBatch chan struct{}
	done       chan struct{}
	res        strategies.Result
	err        error
}

// startRun starts cfg's run; first fires after its first committed batch.
func startRun(t *testing.T, cfg strategies.Config) *runningJob {
	r := &runningJob{firstBatch: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	next := cfg.OnProgress
	cfg.OnProgress = func(p batch.Progress) {
		once.Do(func() { close(r.firstBatch) })
		if next != nil {
			next(p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	go func() {
		defer close(r.done)
		defer cancel()
		r.res, r.err = strategies.Run(ctx, cfg)
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// first returns a channel that fires after the first batch, failing the
// test if the run ends before it.
func (r *runningJob) first(t *testing.T) <-chan struct{} {
	t.Helper()
	select {
	case <-r.firstBatch:
	case <-r.done:
		t.Fatalf("the run ended before its first batch: %v", r.err)
	}
	return r.firstBatch
}

func (r *runningJob) wait(t *testing.T) (strategies.Result, error) {
	t.Helper()
	<-r.done
	return r.res, r.err
}
