package systemtest

// The sink's server SIGKILLed mid-run and brought back on the same data
// after killOutage, while events keep arriving (issue #25): a job with
// default flags waits the outage out — it never exits, ends exact and logs
// a handful of lines about it, not one per attempt per partition. With a
// short --outage-timeout and a server that stays dead it exits 3, naming
// the server. The servers are private to each test (private_server_test.go):
// the shared ones must not be killed.

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

const (
	// killOutage is how long the sink's server stays dead: longer than
	// the fixed retries of old waited (8 tries, ~11 s), as short as a
	// restart for an upgrade.
	killOutage = 20 * time.Second
	// killInitial events are in the input before the run starts; the
	// feeder adds killFeedRate a second until the server is back.
	killInitial  = 20_000
	killFeedRate = 2_000
	killFeedSize = 500
	// killMaxWarns bounds the WARN lines the run may log from the kill to
	// its end: one when the server is lost, a few more (one every 30 s of
	// outage, Kafka's own), never one per attempt or per partition.
	killMaxWarns = 5
	// killIdle is the run's --until-idle: the feeder's chunks come far
	// more often, so the run can only end once the feeder stopped.
	killIdle = 3 * time.Second
	// killTimeout is the --outage-timeout of TestServerKillOutageTimeout.
	killTimeout = 5 * time.Second
)

const (
	unreachableMarker = `msg="server unreachable`
	backMarker        = `msg="server is back"`
	ckptDoneMarker    = `msg="checkpoint completed"`
)

var (
	warnRE   = regexp.MustCompile(`\blevel=WARN\b`)
	joinedRE = regexp.MustCompile(`msg="joined consumer group" generation=(\d+)`)
)

// serverKillCase is a strategy on a private server.
type serverKillCase struct {
	name     string
	strategy strategies.Strategy
	start    func(t *testing.T) (*privateServer, string)
	extra    []string // more run flags
}

// TestServerKill SIGKILLs the sink's server once the run has committed,
// keeps it dead for killOutage while the feeder adds events, and starts it
// again on the same data and port. The `run --until-idle` (default flags
// otherwise) must wait the outage out and exit 0 once the input is
// drained; the sink must then hold every event exactly once (verify);
// the run must have logged the outage ("server unreachable": a kill the
// run never noticed proves nothing, and fails the test) and at most
// killMaxWarns WARN lines from the kill on.
func TestServerKill(t *testing.T) {
	t.Parallel()
	for _, c := range []serverKillCase{
		{"txn/MariaDB", strategies.StrategyTxn, startPrivateMariaDB, nil},
		{"checkpoint-XA/MariaDB", strategies.StrategyCheckpoint, startPrivateMariaDB, nil},
		{"checkpoint-WAL/MariaDB", strategies.StrategyCheckpoint, startPrivateMariaDB, []string{"--sink-mode", string(strategies.SinkModeWAL)}},
		{"idempotent/Redis", strategies.StrategyIdempotent, startPrivateRedis, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testServerKill(t, c)
		})
	}
}

// killRun is a run of the server kill tests: its process, the input's
// feeder and what the run needs to be judged.
type killRun struct {
	brokers, topic, job, sink string
	strategy                  strategies.Strategy
	dir                       string
	p                         *groupProc
	produced, amount          int64
}

// startKillRun produces the initial input, starts the feeder and the run
// (extra: more flags), and waits for the run's first commit.
func startKillRun(t *testing.T, c serverKillCase, sink string, extra ...string) (*killRun, func() (int64, int64)) {
	t.Helper()
	brokers := testutil.NeedServer(t, testutil.EnvKafka)
	r := &killRun{brokers: brokers, topic: UniqueName(t, "kill"), job: shortJob("kill"), sink: sink, strategy: c.strategy, dir: t.TempDir()}
	events, amount := produceGroupInput(t, brokers, r.topic, 0, killInitial)
	f := kafkautil.StartFeeder(kafkautil.ProduceOptions{
		Brokers: kafkautil.SplitBrokers(brokers), Topic: r.topic, Count: killFeedSize,
		Keys: crashKeys, Seed: crashSeed, Rate: killFeedRate,
	}, event.Expected{Events: events, Amount: amount})
	t.Cleanup(func() { _, _ = f.Finish() })
	finish := func() (int64, int64) {
		r.produced, r.amount = finishFeeder(t, f)
		return r.produced, r.amount
	}
	args := append(defaultArgs(brokers, r.topic, r.job, sink, "--strategy", string(c.strategy),
		"--until-idle", killIdle.String()), append(c.extra, extra...)...)
	if c.strategy == strategies.StrategyCheckpoint {
		args = append(args, "--state-dir", t.TempDir())
	}
	r.p = startGroupProc(t, "run", r.dir, Env(), args)
	marker := committedMarker
	if c.strategy == strategies.StrategyCheckpoint {
		marker = ckptDoneMarker
	}
	r.p.waitLine(t, 0, groupWait, "the first commit", func(l string) bool { return strings.Contains(l, marker) })
	return r, finish
}

func testServerKill(t *testing.T, c serverKillCase) {
	srv, sink := c.start(t)
	r, finish := startKillRun(t, c, sink)
	p := r.p

	killLine := p.lineCount()
	srv.kill(t)
	killed := time.Now()
	// The run must notice while the server is dead: it commits every
	// second, and the feeder keeps it busy.
	lost := p.waitLine(t, killLine, killOutage, "the run to log the outage (\"server unreachable\")",
		func(l string) bool { return strings.Contains(l, unreachableMarker) })
	t.Logf("the run noticed the kill %s after it: %s", time.Since(killed).Round(time.Millisecond), p.linesFrom(lost)[0])
	time.Sleep(killOutage - time.Since(killed))
	p.requireRunning(t)
	srv.start(t)
	t.Logf("%s back %s after the kill", srv.name, time.Since(killed).Round(time.Millisecond))
	produced, amount := finish()

	if ps := p.exit(t, 3*time.Minute); ps.ExitCode() != 0 {
		t.Fatalf("the run ended %v after a %s outage of its sink, want exit 0 at idle; log %s:\n%s", ps, killOutage, p.logPath, tail(p.snapshot(), 40))
	}
	warns, back := outageLines(t, p, killLine, lost)
	if back == "" {
		back = "no \"server is back\" line"
	}
	t.Logf("%d events; %s; %d WARN lines from the kill on:\n%s", produced, back, len(warns), strings.Join(warns, "\n"))
	if c.strategy == strategies.StrategyCheckpoint {
		v := Run(t, r.dir, nil, time.Minute, "verify", "--strategy", string(c.strategy), "--sink", sink, "--job", r.job,
			"--expect-events", strconv.FormatInt(produced, 10), "--expect-amount", strconv.FormatInt(amount, 10))
		if v.Code != 0 || !strings.Contains(v.Stdout, "OK: exactly once") {
			t.Errorf("microbatch verify: %s", v)
		}
		return
	}
	checkGroupSink(t, openGroupSink(t, string(c.strategy), sink), r.brokers, r.topic, r.job, string(c.strategy), r.dir, produced, amount)
}

// TestServerKillOutageTimeout: with --outage-timeout 5s, a sink server
// SIGKILLed for good ends the run with exit 3 once the outage lasted that
// long — not before, and not much later — its last line naming the server
// and the timeout.
func TestServerKillOutageTimeout(t *testing.T) {
	t.Parallel()
	c := serverKillCase{"txn/MariaDB", strategies.StrategyTxn, startPrivateMariaDB, nil}
	srv, sink := c.start(t)
	r, _ := startKillRun(t, c, sink, "--outage-timeout", killTimeout.String())
	p := r.p

	killed := time.Now() // before the kill: the run's outage clock may start at once
	srv.kill(t)
	requireOutageExit(t, p, killed, killTimeout, "127.0.0.1:"+strconv.Itoa(srv.port))
}

// outageLines checks that p logged at most killMaxWarns WARN lines from
// line killLine on, and returns them with the first "server is back" line
// from line lost on ("" if none).
func outageLines(t *testing.T, p *groupProc, killLine, lost int) (warns []string, back string) {
	t.Helper()
	for _, l := range p.linesFrom(killLine) {
		if warnRE.MatchString(l) {
			warns = append(warns, l)
		}
	}
	if len(warns) > killMaxWarns {
		t.Errorf("%d WARN lines from the kill on, want at most %d:\n%s", len(warns), killMaxWarns, strings.Join(warns, "\n"))
	}
	for _, l := range p.linesFrom(lost) {
		if strings.Contains(l, backMarker) {
			return warns, l
		}
	}
	return warns, ""
}

// requireOutageExit waits for p, whose server was killed at killed and
// left dead: it must exit 3 once the outage lasted timeout (within 30 s
// more), its last line naming the server and the timeout.
func requireOutageExit(t *testing.T, p *groupProc, killed time.Time, timeout time.Duration, server string) {
	t.Helper()
	ps := p.exit(t, 2*time.Minute)
	after := time.Since(killed)
	lines := p.snapshot()
	last := ""
	if len(lines) > 0 {
		last = lines[len(lines)-1]
	}
	t.Logf("exit %d %s after the kill; last line: %s", ps.ExitCode(), after.Round(time.Millisecond), last)
	if ps.ExitCode() != 3 {
		t.Fatalf("the run ended %v, want exit 3 (server unreachable); log %s:\n%s", ps, p.logPath, tail(lines, 40))
	}
	if after < timeout || after > timeout+30*time.Second {
		t.Errorf("exit 3 %s after the kill, want once the outage lasted --outage-timeout %s", after.Round(time.Millisecond), timeout)
	}
	if !strings.Contains(last, server) || !strings.Contains(last, "--outage-timeout "+timeout.String()) {
		t.Errorf("the last line does not name the server (%s) and the timeout (--outage-timeout %s): %s", server, timeout, last)
	}
	// Its lag is not known: the last one (0) would read as caught up.
	for _, l := range lines {
		if strings.Contains(l, `msg="run finished"`) && !strings.Contains(l, "lag=unknown") {
			t.Errorf("the run's last lag after an outage that ended it: %s", l)
		}
	}
}

// TestServerKillRebalance: two processes of a job share its partitions
// when the sink's server is SIGKILLed; one of them is stopped (SIGTERM)
// during the outage, so the group rebalances and the other must claim the
// whole topic while the server is still dead. The stopped one must exit 0;
// the other must wait the outage out in its new session too, and the job
// end exact once the server is back. In the "stop in the claim" cases the
// other is stopped too, while its claim waits for the server: it must
// exit 0 at once, not when the server is back (a final run drains then).
func TestServerKillRebalance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		serverKillCase
		stopInClaim bool
	}{
		{serverKillCase{"txn/MariaDB", strategies.StrategyTxn, startPrivateMariaDB, nil}, false},
		{serverKillCase{"idempotent/Redis", strategies.StrategyIdempotent, startPrivateRedis, nil}, false},
		{serverKillCase{"stop in the claim/txn/MariaDB", strategies.StrategyTxn, startPrivateMariaDB, nil}, true},
		{serverKillCase{"stop in the claim/idempotent/Redis", strategies.StrategyIdempotent, startPrivateRedis, nil}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testServerKillRebalance(t, c.serverKillCase, c.stopInClaim)
		})
	}
}

func testServerKillRebalance(t *testing.T, c serverKillCase, stopInClaim bool) {
	srv, sink := c.start(t)
	r, finish := startKillRun(t, c, sink, "--log-level", "debug")
	p := r.p
	q := startGroupProc(t, "run2", r.dir, Env(), p.cmd.Args[1:])
	gen := waitSettled(t, "two processes to share the partitions", 0, p, q)

	killLine := p.lineCount()
	srv.kill(t)
	killed := time.Now()
	p.waitLine(t, killLine, killOutage, "the run to log the outage (\"server unreachable\")",
		func(l string) bool { return strings.Contains(l, unreachableMarker) })
	stopGroupProc(t, q)
	// p's new session, with every partition, starts while the server is
	// dead (its claim waits for the server).
	joined := p.waitLine(t, killLine, killOutage, "a new session", func(l string) bool {
		m := joinedRE.FindStringSubmatch(l)
		if m == nil {
			return false
		}
		g, _ := strconv.Atoi(m[1])
		return g > gen
	})
	t.Logf("%s stopped, the group rebalanced %s after the kill", q.name, time.Since(killed).Round(time.Millisecond))
	if stopInClaim {
		stopped := time.Now()
		stopGroupProc(t, p)
		if as := p.lastAssignment(); as.line > joined {
			t.Fatalf("%s was assigned its partitions before the stop (%s): the stop missed the claim", p.name, p.linesFrom(as.line)[0])
		}
		t.Logf("%s stopped in its claim, %s after SIGTERM", p.name, time.Since(stopped).Round(time.Millisecond))
	}
	time.Sleep(killOutage - time.Since(killed))
	if !stopInClaim {
		p.requireRunning(t)
	}
	srv.start(t)
	produced, amount := finish()
	if stopInClaim {
		p = startGroupProc(t, "final", r.dir, Env(), p.cmd.Args[1:])
	}
	if ps := p.exit(t, 3*time.Minute); ps.ExitCode() != 0 {
		t.Fatalf("%s ended %v after a %s outage of its sink with a rebalance in it, want exit 0 at idle; log %s:\n%s", p.name, ps, killOutage, p.logPath, tail(p.snapshot(), 40))
	}
	checkGroupSink(t, openGroupSink(t, string(c.strategy), sink), r.brokers, r.topic, r.job, string(c.strategy), r.dir, produced, amount)
}
