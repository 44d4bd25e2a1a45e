package systemtest

// The input's Kafka broker SIGKILLed mid-run and brought back on the same
// address and data after brokerKillOutage (issue #25): a job with default
// flags waits the outage out — it never exits, logs the outage once (not
// one line per attempt or partition) and, fed more events after the
// broker is back, drains them, exits 0 at idle and holds both inputs
// exactly once. The broker is a private dev broker (`microbatch broker
// --data-dir`), the only one a test may kill.

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

const (
	// brokerKillOutage is how long the broker stays dead.
	brokerKillOutage = 20 * time.Second
	// brokerKillBefore events are produced before the run starts,
	// brokerKillAfter once the broker is back.
	brokerKillBefore = 20_000
	brokerKillAfter  = 10_000
	brokerKillSeed   = 25
	// brokerKillIdle is the run's --until-idle: far shorter than the
	// outage, which must not count as idle time (the lag is unknown while
	// Kafka does not answer, not zero).
	brokerKillIdle = 3 * time.Second
)

var brokerKillDownRE = regexp.MustCompile(`msg="server is back".* down_for=(\S+)`)

// brokerKillCase is a strategy and its sink.
type brokerKillCase struct {
	name     string
	strategy strategies.Strategy
	// sink is the run's --sink (addr: the broker's); extra, more run flags.
	sink   func(t *testing.T, addr string) string
	extra  func(t *testing.T) []string
	marker string // the log line of a committed batch or checkpoint
	// idle is the run's --until-idle.
	idle time.Duration
}

func brokerKillStateDir(t *testing.T) []string { return []string{"--state-dir", t.TempDir()} }

// TestBrokerKill SIGKILLs the dev broker once the run has committed, keeps
// it dead for brokerKillOutage — the run must still be running then — and
// starts it again on the same port and data directory (which must still
// hold the input), produces more events, and lets the run drain: exit 0
// at idle, verify says exactly once for both inputs, the outage was logged
// ("server unreachable": a kill the run never noticed proves nothing, and
// fails the test) with at most brokerKillMaxWarns WARN lines from the kill
// on.
func TestBrokerKill(t *testing.T) {
	t.Parallel()
	for _, c := range []brokerKillCase{
		{"txn/SQLite", strategies.StrategyTxn,
			func(t *testing.T, _ string) string { return "sqlite://" + t.TempDir() + "/x.db" },
			nil, committedMarker, brokerKillIdle},
		// Checkpoint mode's readers retry a broker that is gone inside
		// sarama; its end-offset poller is what meets the outage (one
		// WARN, and no idle time while the ends are stale). Not with a
		// kafka:// sink on the dev broker: its restart aborts the
		// transactions open at the kill, the run's pre-committed one
		// among them, which Apache Kafka keeps until their timeout.
		{"checkpoint/files", strategies.StrategyCheckpoint,
			func(t *testing.T, _ string) string { return "file://" + t.TempDir() + "/out" },
			brokerKillStateDir, ckptDoneMarker, brokerKillIdle},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testBrokerKill(t, c)
		})
	}
}

// brokerKillStart starts a dev broker of topic on listen with its log in
// dataDir.
func brokerKillStart(t *testing.T, listen, dataDir, topic string) *Broker {
	t.Helper()
	return StartBroker(t, "--listen", listen, "--data-dir", dataDir, "--topic", topic, "--partitions", "4")
}

// brokerKillSIGKILL kills the broker's process and reaps it.
func brokerKillSIGKILL(t *testing.T, b *Broker) {
	t.Helper()
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing the broker: %v", err)
	}
	b.Stop(t)
}

func brokerKillEnds(t *testing.T, addr, topic string) int64 {
	t.Helper()
	return sum(testutil.EndOffsets(t, kafkautil.SplitBrokers(addr), topic))
}

func testBrokerKill(t *testing.T, c brokerKillCase) {
	start := time.Now()
	dataDir, dir := t.TempDir(), t.TempDir()
	topic, job := UniqueName(t, "bkill"), shortJob("bkill")
	b := brokerKillStart(t, "127.0.0.1:0", dataDir, topic)
	addr := b.Addr
	events, amount := Produce(t, addr, topic, brokerKillSeed, 0, brokerKillBefore)

	sink := c.sink(t, addr)
	args := defaultArgs(addr, topic, job, sink, "--strategy", string(c.strategy), "--until-idle", c.idle.String())
	if c.extra != nil {
		args = append(args, c.extra(t)...)
	}
	p := startGroupProc(t, "run", dir, Env(), args)
	p.waitLine(t, 0, groupWait, "the first commit", func(l string) bool { return strings.Contains(l, c.marker) })

	killLine := p.lineCount()
	brokerKillSIGKILL(t, b)
	killed := time.Now()
	// Still running at the kill, or the kill missed.
	p.requireRunning(t)
	lost := p.waitLine(t, killLine, brokerKillOutage, "the run to log the outage (\"server unreachable\")",
		func(l string) bool { return strings.Contains(l, unreachableMarker) })
	t.Logf("the run noticed the kill %s after it: %s", time.Since(killed).Round(time.Millisecond), p.linesFrom(lost)[0])
	time.Sleep(brokerKillOutage - time.Since(killed))
	p.requireRunning(t)

	b = brokerKillStart(t, addr, dataDir, topic)
	if b.Addr != addr {
		t.Fatalf("the broker came back on %s, want %s", b.Addr, addr)
	}
	t.Logf("broker back %s after the kill", time.Since(killed).Round(time.Millisecond))
	if n := brokerKillEnds(t, addr, topic); n != events {
		t.Fatalf("the restarted broker holds %d records of %s, want the %d produced before the kill (--data-dir %s)", n, topic, events, dataDir)
	}
	ev, am := Produce(t, addr, topic, brokerKillSeed, events, brokerKillAfter)
	events, amount = events+ev, amount+am

	if ps := p.exit(t, 2*time.Minute); ps.ExitCode() != 0 {
		t.Fatalf("the run ended %v after a %s outage of its broker, want exit 0 at idle; log %s:\n%s", ps, brokerKillOutage, p.logPath, tail(p.snapshot(), 40))
	}
	warns, back := outageLines(t, p, killLine, lost)
	// Back once the broker answered again, not at the first empty
	// checkpoint completed during the outage.
	if m := brokerKillDownRE.FindStringSubmatch(back); m == nil {
		t.Errorf("no \"server is back\" line with its down_for after the outage; log %s", p.logPath)
	} else if d, err := time.ParseDuration(m[1]); err != nil || d < brokerKillOutage/2 {
		t.Errorf("\"server is back\" after %s of an outage of %s: %s", m[1], brokerKillOutage, back)
	}
	if n := brokerKillEnds(t, addr, topic); n != events {
		t.Errorf("the topic holds %d records, produce reported %d", n, events)
	}
	v := Run(t, dir, nil, time.Minute, "verify", "--strategy", string(c.strategy), "--sink", sink, "--job", job,
		"--expect-events", strconv.FormatInt(events, 10), "--expect-amount", strconv.FormatInt(amount, 10))
	if v.Code != 0 || !strings.Contains(v.Stdout, "OK: exactly once") {
		t.Errorf("microbatch verify: %s", v)
	}
	t.Logf("%d events in %s; %s; %d WARN lines from the kill on:\n%s", events, time.Since(start).Round(time.Millisecond),
		back, len(warns), strings.Join(warns, "\n"))
}

// TestBrokerKillOutageTimeout: with --outage-timeout 5s, a broker
// SIGKILLed for good ends the run with exit 3 once the outage lasted that
// long (counted from the run's first failure to reach it), its last line
// naming the broker and the timeout.
func TestBrokerKillOutageTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 5 * time.Second
	dir := t.TempDir()
	topic, job := UniqueName(t, "bkill"), shortJob("bkill")
	b := brokerKillStart(t, "127.0.0.1:0", t.TempDir(), topic)
	Produce(t, b.Addr, topic, brokerKillSeed, 0, brokerKillBefore)
	p := startGroupProc(t, "run", dir, Env(), defaultArgs(b.Addr, topic, job, "sqlite://"+t.TempDir()+"/x.db",
		"--strategy", string(strategies.StrategyTxn), "--until-idle", "1m", "--outage-timeout", timeout.String()))
	p.waitLine(t, 0, groupWait, "the first commit", func(l string) bool { return strings.Contains(l, committedMarker) })

	brokerKillSIGKILL(t, b)
	requireOutageExit(t, p, time.Now(), timeout, "Kafka "+b.Addr)
}
