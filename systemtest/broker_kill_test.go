package systemtest

// The input's Kafka broker SIGKILLed mid-run and brought back on the same
// address and data after brokerKillOutage (issue #25): a job with default
// flags waits the outage out — it never exits, logs the outage once (not
// one line per attempt or partition) and, fed more events after the
// broker is back, drains them, exits 0 at idle and holds both inputs
// exactly once. On both brokers: a private Apache Kafka (KRaft, its own
// ports and log directory, private_kafka_test.go) and a private dev
// broker (`microbatch broker --data-dir`, kfake), the only ones a test may
// kill.

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

// killBroker is the input's broker in a broker kill test: a process of
// the test's own on its own port and data, which it SIGKILLs and starts
// again on both.
type killBroker interface {
	addr() string
	// kill SIGKILLs the broker and returns once it is gone.
	kill(t *testing.T)
	// restart starts it again on the same port and data and returns once
	// it serves the topic again.
	restart(t *testing.T)
}

// brokerKind starts a killBroker that holds topic, with 4 partitions
// once something was produced to it.
type brokerKind func(t *testing.T, topic string) killBroker

// brokerKillCase is a strategy and its sink on a broker.
type brokerKillCase struct {
	name     string
	broker   brokerKind
	strategy strategies.Strategy
	// sink is the run's --sink (addr: the broker's); extra, more run flags.
	sink   func(t *testing.T, addr string) string
	extra  func(t *testing.T) []string
	marker string // the log line of a committed batch or checkpoint
	// idle is the run's --until-idle.
	idle time.Duration
}

func brokerKillStateDir(t *testing.T) []string { return []string{"--state-dir", t.TempDir()} }

// TestBrokerKill SIGKILLs the broker once the run has committed, keeps
// it dead for brokerKillOutage — the run must still be running then — and
// starts it again on the same port and log directory (which must still
// hold the input), produces more events, and lets the run drain: exit 0
// at idle, verify says exactly once for both inputs, the outage was logged
// ("server unreachable": a kill the run never noticed proves nothing, and
// fails the test) with at most brokerKillMaxWarns WARN lines from the kill
// on.
func TestBrokerKill(t *testing.T) {
	t.Parallel()
	sqlite := func(t *testing.T, _ string) string { return "sqlite://" + t.TempDir() + "/x.db" }
	mariaDB := func(t *testing.T, _ string) string { return testutil.NeedServer(t, testutil.EnvMySQL) }
	files := func(t *testing.T, _ string) string { return "file://" + t.TempDir() + "/out" }
	for _, c := range []brokerKillCase{
		{"kfake/txn/SQLite", startDevKillBroker, strategies.StrategyTxn, sqlite, nil, committedMarker, brokerKillIdle},
		{"apache-kafka/txn/MariaDB", startKafkaKillBroker, strategies.StrategyTxn, mariaDB, nil, committedMarker, brokerKillIdle},
		// Checkpoint mode's readers retry a broker that is gone inside
		// sarama; its end-offset poller is what meets the outage (one
		// WARN, and no idle time while the ends are stale). Not with a
		// kafka:// sink on the dev broker: its restart aborts the
		// transactions open at the kill, the run's pre-committed one
		// among them, which Apache Kafka keeps until their timeout.
		{"kfake/checkpoint/files", startDevKillBroker, strategies.StrategyCheckpoint, files, brokerKillStateDir, ckptDoneMarker, brokerKillIdle},
		{"apache-kafka/checkpoint/files", startKafkaKillBroker, strategies.StrategyCheckpoint, files, brokerKillStateDir, ckptDoneMarker, brokerKillIdle},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testBrokerKill(t, c)
		})
	}
}

// devKillBroker is a dev broker (kfake) with its log in dataDir.
type devKillBroker struct {
	b              *Broker
	dataDir, topic string
}

// startDevKillBroker starts a dev broker of topic on a free port.
func startDevKillBroker(t *testing.T, topic string) killBroker {
	t.Helper()
	d := &devKillBroker{dataDir: t.TempDir(), topic: topic}
	// Not an ephemeral port (127.0.0.1:0): it must still be free when the
	// broker comes back after the outage.
	d.b = d.start(t, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	return d
}

func (d *devKillBroker) start(t *testing.T, listen string) *Broker {
	t.Helper()
	return StartBroker(t, "--listen", listen, "--data-dir", d.dataDir, "--topic", d.topic, "--partitions", "4")
}

func (d *devKillBroker) addr() string { return d.b.Addr }

func (d *devKillBroker) kill(t *testing.T) {
	t.Helper()
	if err := d.b.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing the broker: %v", err)
	}
	d.b.Stop(t)
}

func (d *devKillBroker) restart(t *testing.T) {
	t.Helper()
	addr := d.b.Addr
	if d.b = d.start(t, addr); d.b.Addr != addr {
		t.Fatalf("the broker came back on %s, want %s", d.b.Addr, addr)
	}
}

// kafkaKillBroker is a private Apache Kafka.
type kafkaKillBroker struct {
	srv            *privateServer
	address, topic string
}

// startKafkaKillBroker starts a private Apache Kafka; topic is created by
// the first produce.
func startKafkaKillBroker(t *testing.T, topic string) killBroker {
	t.Helper()
	srv, addr := startPrivateKafka(t)
	return &kafkaKillBroker{srv: srv, address: addr, topic: topic}
}

func (k *kafkaKillBroker) addr() string      { return k.address }
func (k *kafkaKillBroker) kill(t *testing.T) { k.srv.kill(t) }

// restart returns once every partition of the topic has a leader that
// answers for it again.
func (k *kafkaKillBroker) restart(t *testing.T) {
	t.Helper()
	k.srv.start(t)
	if err := kafkautil.EnsureTopic([]string{k.address}, k.topic, 4); err != nil {
		t.Fatalf("%s after its restart: %v\n%s", k.srv.name, err, k.srv.logTail())
	}
}

func brokerKillEnds(t *testing.T, addr, topic string) int64 {
	t.Helper()
	return sum(testutil.EndOffsets(t, kafkautil.SplitBrokers(addr), topic))
}

func testBrokerKill(t *testing.T, c brokerKillCase) {
	start := time.Now()
	dir := t.TempDir()
	topic, job := UniqueName(t, "bkill"), shortJob("bkill")
	b := c.broker(t, topic)
	addr := b.addr()
	events, amount := Produce(t, addr, topic, brokerKillSeed, 0, brokerKillBefore)

	sink := c.sink(t, addr)
	args := defaultArgs(addr, topic, job, sink, "--strategy", string(c.strategy), "--until-idle", c.idle.String())
	if c.extra != nil {
		args = append(args, c.extra(t)...)
	}
	p := startGroupProc(t, "run", dir, Env(), args)
	p.waitLine(t, 0, groupWait, "the first commit", func(l string) bool { return strings.Contains(l, c.marker) })

	killLine := p.lineCount()
	b.kill(t)
	killed := time.Now()
	// Still running at the kill, or the kill missed.
	p.requireRunning(t)
	lost := p.waitLine(t, killLine, brokerKillOutage, "the run to log the outage (\"server unreachable\")",
		func(l string) bool { return strings.Contains(l, unreachableMarker) })
	t.Logf("the run noticed the kill %s after it: %s", time.Since(killed).Round(time.Millisecond), p.linesFrom(lost)[0])
	time.Sleep(brokerKillOutage - time.Since(killed))
	p.requireRunning(t)

	restarting := time.Now()
	b.restart(t)
	t.Logf("broker back %s after the kill", time.Since(killed).Round(time.Millisecond))
	if n := brokerKillEnds(t, addr, topic); n != events {
		t.Fatalf("the restarted broker holds %d records of %s, want the %d produced before the kill", n, topic, events)
	}
	ev, am := Produce(t, addr, topic, brokerKillSeed, events, brokerKillAfter)
	events, amount = events+ev, amount+am

	if ps := p.exit(t, 2*time.Minute); ps.ExitCode() != 0 {
		t.Fatalf("the run ended %v after a %s outage of its broker, want exit 0 at idle; log %s:\n%s", ps, brokerKillOutage, p.logPath, tail(p.snapshot(), 40))
	}
	warns, back := outageLines(t, p, killLine, lost)
	// Back once the broker answered again, not at the first empty
	// checkpoint completed during the outage: logged after the restart
	// began (the log's times are in milliseconds). Not judged by its
	// down_for, which counts from the run's first failed read (up to 10 s
	// after the kill in checkpoint mode) and so may be half the outage.
	if m := brokerKillDownRE.FindStringSubmatch(back); m == nil {
		t.Errorf("no \"server is back\" line with its down_for after the outage; log %s", p.logPath)
	} else if _, err := time.ParseDuration(m[1]); err != nil {
		t.Errorf("\"server is back\" with down_for=%s: %v", m[1], err)
	} else if at := lineTime(t, back); at.Before(restarting.Truncate(time.Millisecond)) {
		t.Errorf("\"server is back\" logged at %s, before the broker's restart began (%s): %s",
			at.Format(time.RFC3339Nano), restarting.UTC().Format(time.RFC3339Nano), back)
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
// naming the broker and the timeout. On both brokers.
func TestBrokerKillOutageTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		broker brokerKind
	}{{"kfake", startDevKillBroker}, {"apache-kafka", startKafkaKillBroker}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testBrokerKillOutageTimeout(t, c.broker)
		})
	}
}

func testBrokerKillOutageTimeout(t *testing.T, broker brokerKind) {
	const timeout = 5 * time.Second
	dir := t.TempDir()
	topic, job := UniqueName(t, "bkill"), shortJob("bkill")
	b := broker(t, topic)
	Produce(t, b.addr(), topic, brokerKillSeed, 0, brokerKillBefore)
	p := startGroupProc(t, "run", dir, Env(), defaultArgs(b.addr(), topic, job, "sqlite://"+t.TempDir()+"/x.db",
		"--strategy", string(strategies.StrategyTxn), "--until-idle", "1m", "--outage-timeout", timeout.String()))
	p.waitLine(t, 0, groupWait, "the first commit", func(l string) bool { return strings.Contains(l, committedMarker) })

	killed := time.Now() // before the kill: the run's outage clock may start at once
	b.kill(t)
	requireOutageExit(t, p, killed, timeout, "Kafka "+b.addr())
}
