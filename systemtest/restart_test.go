package systemtest

// Restarts as a user does them: default flags (no --instance-id), the
// process restarted right after a SIGKILL, processes killed during their
// join, dead members holding partitions while `--until-idle` decides the
// job is done.

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

const (
	// A restart must be back in the group, with its partitions, within
	// restartJoin of its start, and commit its first batch within
	// restartFirstCommit. Without static membership the restart's join
	// waits for its dead predecessor's session to time out (the default
	// 10 s; 8.4-10.6 s measured from start): the bounds sit well below
	// that and far above what a busy machine takes (a 0.9 s join and a
	// 3 s first commit at a load of 17 on 2 cores). The 1 s that issue
	// #14 asks for is measured, not asserted: benchmarks/restart.sh, and
	// the log line of TestDefaultRestarts.
	restartJoin        = strategies.DefaultSessionTimeout / 2
	restartFirstCommit = strategies.DefaultSessionTimeout * 3 / 4
	restartKills       = 20
	// restartFeedRate keeps a backlog for every restart: what arrived
	// while it was down, a batch's worth, small enough that its first batch
	// is about the join, not the backlog.
	restartFeedRate = 4_000
)

// restartCases are the brokers a restart depends on: the dev broker and
// Apache Kafka, each with the sink a user pairs it with.
func restartCases() []groupCase {
	return []groupCase{
		{"kfakeToSQLite", string(strategies.StrategyTxn), func(t *testing.T) (string, string) {
			b := StartBroker(t, "--partitions", strconv.Itoa(groupPartitions))
			return b.Addr, "sqlite://" + t.TempDir() + "/sink.db"
		}},
		{"ApacheKafkaToMariaDB", string(strategies.StrategyTxn), func(t *testing.T) (string, string) {
			return testutil.NeedServer(t, testutil.EnvKafka), testutil.NeedServer(t, testutil.EnvMySQL)
		}},
	}
}

// defaultArgs is `run` as a user starts it: where to read and write, and
// nothing else (the interval, session and rebalance timeouts, membership
// are the defaults).
func defaultArgs(brokers, topic, job, sink string, extra ...string) []string {
	return append([]string{"run", "--brokers", brokers, "--topic", topic, "--job", job, "--sink", sink}, extra...)
}

var logTimeRE = regexp.MustCompile(`^time=(\S+)`)

// lineTime is the time a text log line was written.
func lineTime(t *testing.T, line string) time.Time {
	t.Helper()
	m := logTimeRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("log line without time=: %q", line)
	}
	ts, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("log line %q: %v", line, err)
	}
	return ts
}

var instanceRE = regexp.MustCompile(`\binstance=(\S+)`)

// instanceOf is the group instance id the process reported at start ("" if
// its "job started" line names none).
func instanceOf(t *testing.T, p *groupProc) string {
	t.Helper()
	i := p.waitLine(t, 0, groupWait, "the job to start", func(l string) bool { return strings.Contains(l, `msg="job started"`) })
	if m := instanceRE.FindStringSubmatch(p.linesFrom(i)[0]); m != nil {
		return m[1]
	}
	return ""
}

// restartTimes waits for the process's first assignment and first
// committed batch and returns how long after start they were logged.
func restartTimes(t *testing.T, p *groupProc, started time.Time) (join, commit time.Duration) {
	t.Helper()
	i := p.waitLine(t, 0, groupWait, "the first committed batch", func(l string) bool { return strings.Contains(l, committedMarker) })
	commit = lineTime(t, p.linesFrom(i)[0]).Sub(started)
	as := p.assignments()
	if len(as) == 0 {
		t.Fatalf("%s committed without a \"partitions assigned\" line", p.name)
	}
	return lineTime(t, p.linesFrom(as[0].line)[0]).Sub(started), commit
}

// checkRestart requires a restarted process to be back in its group within
// restartJoin and to commit within restartFirstCommit; it returns the
// first commit's time.
func checkRestart(t *testing.T, p *groupProc, started time.Time) time.Duration {
	t.Helper()
	join, commit := restartTimes(t, p, started)
	if join > restartJoin || commit > restartFirstCommit {
		t.Errorf("%s: assigned its partitions %s and committed its first batch %s after start; want within %s and %s (a restart must not wait for its dead predecessor's session)",
			p.name, join.Round(time.Millisecond), commit.Round(time.Millisecond), restartJoin, restartFirstCommit)
	}
	return commit
}

// TestDefaultRestarts kills `microbatch run` with default flags 20 times
// while input keeps arriving, restarting it at once each time — some kills
// land during the join, before the process was assigned anything. Every
// restart must be back in the group and commit its first batch well before
// its dead predecessor's session could have timed out (it takes the
// predecessor's place in the group instead of waiting: restartJoin),
// the final `--until-idle` run must exit 0 with the job's whole lag at 0,
// and every event must be in the sink exactly once.
func TestDefaultRestarts(t *testing.T) {
	// Mostly waiting for the group: runs beside the other tests.
	t.Parallel()
	for _, c := range restartCases() {
		t.Run(c.name, func(t *testing.T) {
			brokers, sink := c.setup(t)
			testDefaultRestarts(t, brokers, sink)
		})
	}
}

func testDefaultRestarts(t *testing.T, brokers, sink string) {
	topic, job := UniqueName(t, "restart"), UniqueName(t, "restart-job")
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill timing seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	events, amount := produceGroupInput(t, brokers, topic, 0, 20_000)
	feeder := kafkautil.StartFeeder(kafkautil.ProduceOptions{
		Brokers: kafkautil.SplitBrokers(brokers), Topic: topic, Count: 1_000, Keys: crashKeys, Seed: crashSeed, Rate: restartFeedRate,
	}, event.Expected{Events: events, Amount: amount})
	t.Cleanup(func() { _, _ = feeder.Finish() })
	dir := t.TempDir()
	args := defaultArgs(brokers, topic, job, sink)

	var latencies []time.Duration
	var instance string
	duringJoin := 0
	for kills := 0; kills < restartKills; {
		started := time.Now()
		if kills%5 == 1 {
			// Killed in the middle of its join, by construction: the process
			// SIGKILLs itself when the group has assigned it its partitions,
			// before it claimed any. Its restart must still be quick.
			p := startGroupProc(t, fmt.Sprintf("run-%02d", kills), dir, Env("MICROBATCH_CRASH_AT="+strategies.CrashAfterJoin+":1"), args)
			if ps := p.wait(); !killedBy(ps, syscall.SIGKILL) || len(p.assignments()) != 0 {
				t.Fatalf("%s: ended %v with %d assignments, want killed at %s", p.name, ps, len(p.assignments()), strategies.CrashAfterJoin)
			}
			duringJoin++
			kills++
			t.Logf("kill %2d: during the join, %s after start", kills, time.Since(started).Round(time.Millisecond))
			continue
		}
		p := startGroupProc(t, fmt.Sprintf("run-%02d", kills), dir, Env(), args)
		lat := checkRestart(t, p, started)
		latencies = append(latencies, lat)
		id := instanceOf(t, p)
		if instance == "" {
			instance = id
		} else if id != instance {
			t.Errorf("restart %d joined as %q, its predecessors as %q: a restart must take the dead process's slot", kills, id, instance)
		}
		// Kill it a little later, at any point of its batches.
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		p.requireRunning(t)
		p.signal(t, syscall.SIGKILL)
		p.wait()
		kills++
		t.Logf("kill %2d: first commit %s after start", kills, lat.Round(time.Millisecond))
	}
	produced, expAmount := finishFeeder(t, feeder)

	final := startGroupProc(t, "final", dir, Env(), append(args, "--until-idle", "2s"))
	if ps := final.exit(t, 3*time.Minute); ps.ExitCode() != 0 {
		t.Fatalf("final --until-idle run: %v, want exit 0; log %s:\n%s", ps, final.logPath, tail(final.snapshot(), 40))
	}
	if lag := finishedLag(t, final); lag != 0 {
		t.Errorf("final run reported lag=%d, want 0", lag)
	}
	gs := openGroupSink(t, string(strategies.StrategyTxn), sink)
	checkGroupSink(t, gs, brokers, topic, job, string(strategies.StrategyTxn), dir, produced, expAmount)

	slices.Sort(latencies)
	within := 0
	for _, l := range latencies {
		if l <= time.Second {
			within++
		}
	}
	t.Logf("restart → first commit over %d restarts: min %s, median %s, max %s, %d within 1 s (%d kills during the join)",
		len(latencies), latencies[0].Round(time.Millisecond), latencies[len(latencies)/2].Round(time.Millisecond),
		latencies[len(latencies)-1].Round(time.Millisecond), within, duringJoin)
}

var finishedLagRE = regexp.MustCompile(`msg="run finished" .*\blag=(\d+)`)

// finishedLag is the lag of the process's "run finished" line.
func finishedLag(t *testing.T, p *groupProc) int64 {
	t.Helper()
	m := finishedLagRE.FindStringSubmatch(p.text())
	if m == nil {
		t.Fatalf("%s: no \"run finished\" line with lag=; log %s:\n%s", p.name, p.logPath, tail(p.snapshot(), 40))
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// TestUntilIdleWaitsForTheWholeJob: four processes share the job; three
// die with partitions in their hands (their sessions last 10 s more).
// A `--until-idle` run started then takes one dead process's place and
// catches up its partitions at once — and must not call the job done
// while the other dead processes' partitions lag: it exits 0 only when
// every partition of the topic is caught up, and says lag=0 then.
func TestUntilIdleWaitsForTheWholeJob(t *testing.T) {
	t.Parallel()
	for _, c := range restartCases() {
		t.Run(c.name, func(t *testing.T) {
			brokers, sink := c.setup(t)
			topic, job := UniqueName(t, "idle"), UniqueName(t, "idle-job")
			produced, expAmount := produceGroupInput(t, brokers, topic, 0, 10_000)
			// Input keeps coming until the processes have settled: each must
			// have had something to commit in its generation.
			feeder := startGroupFeeder(t, brokers, topic, produced, expAmount)
			dir := t.TempDir()
			args := defaultArgs(brokers, topic, job, sink)
			var procs []*groupProc
			for i := range 4 {
				procs = append(procs, startGroupProc(t, fmt.Sprintf("p%d", i), dir, Env(), args))
			}
			waitSettled(t, "four processes to share the partitions", 0, procs...)
			// Keep slot 0 alive, kill slots 1-3: the new process must take
			// slot 1, the lowest a crashed process left.
			slices.SortFunc(procs, func(a, b *groupProc) int { return strings.Compare(instanceOf(t, a), instanceOf(t, b)) })
			deadID := instanceOf(t, procs[1])
			if !strings.HasSuffix(instanceOf(t, procs[0]), "-0") || !strings.HasSuffix(deadID, "-1") {
				t.Fatalf("instance ids %q, %q: want slots 0 and 1", instanceOf(t, procs[0]), deadID)
			}
			for _, p := range procs[1:] {
				p.signal(t, syscall.SIGKILL)
				p.wait()
			}
			produced, expAmount = finishFeeder(t, feeder)
			ev, am := produceGroupInput(t, brokers, topic, produced, 20_000)
			produced, expAmount = produced+ev, expAmount+am

			q := startGroupProc(t, "until-idle", dir, Env(), append(args, "--until-idle", "1s"))
			if id := instanceOf(t, q); id != deadID {
				t.Errorf("the new process joined as %q, want the lowest free slot's id %q", id, deadID)
			}
			if ps := q.exit(t, 2*time.Minute); ps.ExitCode() != 0 {
				t.Fatalf("--until-idle run: %v, want exit 0; log %s:\n%s", ps, q.logPath, tail(q.snapshot(), 40))
			}
			gs := openGroupSink(t, string(strategies.StrategyTxn), sink)
			end, stored := testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic), gs.next(t, job, topic)
			if fmt.Sprint(end) != fmt.Sprint(stored) {
				t.Errorf("--until-idle exited 0 with the job behind: stored offsets %v, partition ends %v (lag %d)",
					stored, end, sum(end)-sum(stored))
			}
			if lag := finishedLag(t, q); lag != 0 {
				t.Errorf("--until-idle reported lag=%d at exit, want 0", lag)
			}
			stopGroupProc(t, procs[0])
			checkGroupSink(t, gs, brokers, topic, job, string(strategies.StrategyTxn), dir, produced, expAmount)
		})
	}
}

// TestProcessesOnOneHost: two processes of a job on one host, default
// flags, get distinct group identities and share the partitions; one that
// stops gracefully hands its partitions over at once (it leaves the
// group, static member or not); one that is SIGKILLed is back, with the
// same identity, committing without waiting for the dead one's session.
func TestProcessesOnOneHost(t *testing.T) {
	t.Parallel()
	for _, c := range restartCases() {
		t.Run(c.name, func(t *testing.T) {
			brokers, sink := c.setup(t)
			topic, job := UniqueName(t, "host"), UniqueName(t, "host-job")
			produced, expAmount := produceGroupInput(t, brokers, topic, 0, 20_000)
			feeder := startGroupFeeder(t, brokers, topic, produced, expAmount)
			dir := t.TempDir()
			args := defaultArgs(brokers, topic, job, sink)
			a := startGroupProc(t, "a", dir, Env(), args)
			b := startGroupProc(t, "b", dir, Env(), args)
			gen := waitSettled(t, "two processes to share the partitions", 0, a, b)
			idA, idB := instanceOf(t, a), instanceOf(t, b)
			if idA == idB || !strings.HasSuffix(idA, "-0") && !strings.HasSuffix(idB, "-0") {
				t.Fatalf("instance ids %q and %q: want two distinct slots, one of them 0", idA, idB)
			}

			// Graceful stop: b leaves the group as it stops — right after
			// its exit the group no longer lists it (a static member that
			// did not leave stays listed until its session, 10 s, runs
			// out) — and a takes everything.
			stopGroupProc(t, b)
			left := time.Now()
			if members := groupInstances(t, brokers, job); slices.Contains(members, idB) {
				t.Errorf("right after b stopped the group still lists its instance %q (members %q): a stopped process must leave the group, not wait out its session", idB, members)
			}
			waitSettled(t, "a to take b's partitions", gen, a)
			t.Logf("a took b's partitions %s after b stopped", time.Since(left).Round(time.Millisecond))

			// Crash and restart: same identity, partitions back at once.
			a.signal(t, syscall.SIGKILL)
			a.wait()
			started := time.Now()
			a2 := startGroupProc(t, "a2", dir, Env(), args)
			checkRestart(t, a2, started)
			if id := instanceOf(t, a2); id != idA {
				t.Errorf("restart joined as %q, want the killed process's %q", id, idA)
			}
			produced, expAmount = finishFeeder(t, feeder)
			gs := openGroupSink(t, string(strategies.StrategyTxn), sink)
			waitDrained(t, gs, brokers, topic, job, a2)
			stopGroupProc(t, a2)
			checkGroupSink(t, gs, brokers, topic, job, string(strategies.StrategyTxn), dir, produced, expAmount)
		})
	}
}
