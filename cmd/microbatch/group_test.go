package main_test

// Scale-out over a Kafka consumer group (issue #6): several `microbatch
// run` processes of one job share the topic's partitions. The tests kill,
// add, stop and pause processes while input keeps flowing, and require the
// sink to end with every event exactly once and every partition's offset
// at its log end — and the logs to show that the group really rebalanced.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// Group test parameters. The input is the crash tests' sequence (crashSeed,
// crashKeys), so checkCrashPerKey can judge it, on a topic of
// groupPartitions partitions.
const (
	groupPartitions = 8
	groupInitial    = 100_000 // produced before the scale-out test's processes start
	groupTotal      = 300_000 // the scale-out test's input, at least
	groupFeedRate   = 15_000  // events/s the feeder adds while processes come and go
	groupFeedChunk  = 5_000
	groupInterval   = 150 * time.Millisecond
	groupMaxBatch   = 2_000
	groupSession    = 2 * time.Second
	groupRebalance  = 10 * time.Second
	// groupWait bounds every wait for the group to reach a state (a bound
	// for a busy machine: a rebalance takes a few seconds).
	groupWait = 2 * time.Minute
	// zombieReach is the after-plan reach at which the zombie stops: its
	// third batch, after two committed ones.
	zombieReach = 3
	// zombieCommits is how many batches another process must commit on the
	// zombie's partitions before the zombie goes on.
	zombieCommits = 3
)

// TestGroupScaleOut runs one job as three processes of a consumer group
// while a feeder keeps adding input: one process is SIGKILLed inside a
// batch, a fourth joins, another is stopped gracefully. The survivors must
// take over the partitions of the killed and stopped ones and the sink must
// end exact.
func TestGroupScaleOut(t *testing.T) {
	t.Parallel()
	for _, c := range groupCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, sink := c.setup(t)
			testGroupScaleOut(t, c.strategy, brokers, sink)
		})
	}
}

// TestGroupZombieFenced stops a process (SIGSTOP) right after it planned a
// batch, waits until the group gave its partitions to another process and
// that one committed on them, then lets the zombie go on with its planned
// batch: the sink must refuse the zombie's commit (ErrFenced), the zombie
// must say so and rejoin, and the totals stay exact.
func TestGroupZombieFenced(t *testing.T) {
	t.Parallel()
	for _, c := range groupCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, sink := c.setup(t)
			testGroupZombie(t, c.strategy, brokers, sink)
		})
	}
}

// TestGroupJobsIsolated runs two jobs on one topic at the same time: each
// is its own consumer group (--group defaults to --job), so each must be
// assigned every partition and count every event, unaffected by the other.
func TestGroupJobsIsolated(t *testing.T) {
	t.Parallel()
	brokers := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.NeedServer(t, testutil.EnvMySQL)
	began := time.Now()
	topic := uniqueName(t, "iso")
	produced, expAmount := produceGroupInput(t, brokers, topic, 0, 40_000)
	logDir := t.TempDir()
	jobs := []string{uniqueName(t, "iso-a"), uniqueName(t, "iso-b")}
	var procs []*groupProc
	for i, job := range jobs {
		args := append(groupArgs(brokers, topic, job, sink, string(strategies.StrategyTxn)), "--until-idle", "2s")
		procs = append(procs, startGroupProc(t, fmt.Sprintf("job-%c", 'a'+i), logDir, cmdEnv(), args))
	}
	gs := openGroupSink(t, string(strategies.StrategyTxn), sink)
	for i, p := range procs {
		ps := p.exit(t, 2*time.Minute)
		log := p.text()
		if ps.ExitCode() != 0 {
			t.Fatalf("job %s: run exited %v\n%s", jobs[i], ps, log)
		}
		as := p.assignments()
		if len(as) == 0 {
			t.Fatalf("job %s: no partitions assigned line\n%s", jobs[i], log)
		}
		for _, a := range as {
			if a.group != jobs[i] || !slices.Equal(a.parts, allPartitions()) {
				t.Errorf("job %s: assigned %v in group %q generation %d, want all %d partitions in group %q",
					jobs[i], a.parts, a.group, a.generation, groupPartitions, jobs[i])
			}
		}
		got := checkGroupSink(t, gs, brokers, topic, jobs[i], string(strategies.StrategyTxn), logDir, produced, expAmount)
		t.Logf("job %s: %d sessions, generations %v; sink holds %d events (amount %d), %d keys",
			jobs[i], len(as), generationsOf(as), got.Events, got.Amount, got.Keys)
	}
	t.Logf("two jobs on one topic: %d events (amount %d) each, exact; %s", produced, expAmount, time.Since(began).Round(time.Millisecond))
}

// TestGroupParseLog makes sure the log readers the group tests rely on
// can say yes and no.
func TestGroupParseLog(t *testing.T) {
	const (
		assigned3 = `time=2026-01-01T00:00:00.000Z level=INFO msg="partitions assigned" group=g generation=3 member=m-1 partitions="[0 2 4]" epoch=7`
		assigned1 = `time=2026-01-01T00:00:00.000Z level=INFO msg="partitions assigned" group=g generation=4 member=m-1 partitions=[5] epoch=8`
		assigned0 = `time=2026-01-01T00:00:00.000Z level=INFO msg="partitions assigned" group=g generation=5 member=m-1 partitions=[] epoch=9`
		start4    = `time=2026-01-01T00:00:00.001Z level=DEBUG msg="batch started" batch=4 partitions=3 offsets=600`
		commit4   = `time=2026-01-01T00:00:00.030Z level=INFO msg="batch committed" batch=4 partitions=3 records=600 dead_letters=0 lag=0 fenced=0`
		start5    = `time=2026-01-01T00:00:00.151Z level=DEBUG msg="batch started" batch=5 partitions=3 offsets=600`
		finished  = `time=2026-01-01T00:00:01.000Z level=INFO msg="run finished" job=j strategy=txn epoch=9 batches=2 records=600 dead_letters=0 fenced=2 elapsed=1s`
	)
	as := parseAssignments([]string{assigned3, start4, assigned1, assigned0})
	want := []assignment{
		{line: 0, group: "g", generation: 3, member: "m-1", parts: []int32{0, 2, 4}, epoch: 7},
		{line: 2, group: "g", generation: 4, member: "m-1", parts: []int32{5}, epoch: 8},
		{line: 3, group: "g", generation: 5, member: "m-1", epoch: 9},
	}
	if fmt.Sprint(as) != fmt.Sprint(want) {
		t.Errorf("parseAssignments: got %+v, want %+v", as, want)
	}
	for _, c := range []struct {
		name  string
		lines []string
		open  bool
	}{
		{"no batch", []string{assigned3}, false},
		{"inside a batch", []string{assigned3, start4}, true},
		{"between batches", []string{assigned3, start4, commit4}, false},
		{"inside the second batch", []string{start4, commit4, start5}, true},
		// After a rebalance a batch id may come again: an older commit
		// line of the same id does not close the batch in flight.
		{"id repeated", []string{start4, commit4, assigned1, start4}, true},
	} {
		if got := openBatch(c.lines); got != c.open {
			t.Errorf("openBatch %s: got %v, want %v", c.name, got, c.open)
		}
	}
	if m := finishedRE.FindStringSubmatch(finished); m == nil || m[1] != "2" {
		t.Errorf("finishedRE on %q: %q", finished, m)
	}
}

// groupCase is one strategy on one pair of servers.
type groupCase struct {
	name     string
	strategy string
	setup    func(t *testing.T) (brokers, sink string)
}

func groupCases() []groupCase {
	return []groupCase{
		{"txn/ApacheKafkaToMariaDB", string(strategies.StrategyTxn), func(t *testing.T) (string, string) {
			return testutil.NeedServer(t, testutil.EnvKafka), testutil.NeedServer(t, testutil.EnvMySQL)
		}},
		{"single/kfakeToSQLite", string(strategies.StrategySingle), func(t *testing.T) (string, string) {
			b := startBroker(t, "--partitions", strconv.Itoa(groupPartitions))
			return b.addr, "sqlite://" + t.TempDir() + "/sink.db"
		}},
		{"idempotent/ApacheKafkaToRedis", string(strategies.StrategyIdempotent), func(t *testing.T) (string, string) {
			return testutil.NeedServer(t, testutil.EnvKafka), testutil.NeedServer(t, testutil.EnvRedis)
		}},
	}
}

func groupArgs(brokers, topic, job, sink, strategy string) []string {
	return []string{"run", "--brokers", brokers, "--topic", topic, "--job", job, "--sink", sink, "--strategy", strategy,
		"--interval", groupInterval.String(), "--max-batch-records", strconv.Itoa(groupMaxBatch), "--log-level", "debug",
		"--session-timeout", groupSession.String(), "--rebalance-timeout", groupRebalance.String()}
}

func testGroupScaleOut(t *testing.T, strategy, brokers, sink string) {
	began := time.Now()
	topic := uniqueName(t, "group")
	job := uniqueName(t, "group-job")
	events, amount := produceGroupInput(t, brokers, topic, 0, groupInitial)
	feed := startGroupFeeder(t, brokers, topic, events, amount)
	gs := openGroupSink(t, strategy, sink)
	logDir := t.TempDir()
	args := groupArgs(brokers, topic, job, sink, strategy)
	start := func(name string) *groupProc { return startGroupProc(t, name, logDir, cmdEnv(), args) }

	p1, p2, p3 := start("p1"), start("p2"), start("p3")
	genStart := waitSettled(t, "three processes share the partitions", 0, p1, p2, p3)
	for _, p := range []*groupProc{p1, p2, p3} {
		if a := p.lastAssignment(); len(a.parts) == 0 {
			t.Fatalf("%s got no partitions in generation %d (8 partitions, 3 processes)", p.name, genStart)
		}
	}
	t.Logf("generation %d: p1 %v, p2 %v, p3 %v (%s)", genStart, p1.lastAssignment().parts, p2.lastAssignment().parts,
		p3.lastAssignment().parts, time.Since(began).Round(time.Millisecond))

	// SIGKILL p2 inside a batch.
	victim := p2.lastAssignment()
	tries, batchID := killInBatch(t, p2)
	if ps := p2.exit(t, 30*time.Second); !killedBy(ps, syscall.SIGKILL) {
		t.Fatalf("p2 ended with %v, not by our SIGKILL", ps)
	}
	killedAt := time.Now()
	genKill := waitSettled(t, "p1 and p3 take over p2's partitions", victim.generation, p1, p3)
	t.Logf("SIGKILL p2 inside batch %s (attempt %d), holding %v of generation %d; generation %d after %s: p1 %v, p3 %v",
		batchID, tries, victim.parts, victim.generation, genKill, time.Since(killedAt).Round(time.Millisecond),
		p1.lastAssignment().parts, p3.lastAssignment().parts)

	// A fourth process joins.
	p4 := start("p4")
	genJoin := waitSettled(t, "p4 joins", genKill, p1, p3, p4)
	if a := p4.lastAssignment(); len(a.parts) == 0 {
		t.Fatalf("p4 got no partitions in generation %d", genJoin)
	}
	t.Logf("generation %d: p1 %v, p3 %v, p4 %v", genJoin, p1.lastAssignment().parts, p3.lastAssignment().parts, p4.lastAssignment().parts)

	// p1 stops gracefully: its batch in flight commits, it leaves the group.
	leaving := p1.lastAssignment()
	p1.signal(t, syscall.SIGTERM)
	ps := p1.exit(t, 30*time.Second)
	if ps.ExitCode() != 0 || !strings.Contains(p1.text(), `msg="run finished"`) {
		t.Fatalf("p1 after SIGTERM: %v, want exit 0 and \"run finished\"; log %s", ps, p1.logPath)
	}
	genTerm := waitSettled(t, "p3 and p4 take over p1's partitions", genJoin, p3, p4)
	t.Logf("SIGTERM p1 (held %v): exit 0; generation %d: p3 %v, p4 %v", leaving.parts, genTerm,
		p3.lastAssignment().parts, p4.lastAssignment().parts)

	// Enough input, then drain. The feeder's rate is a target, not a
	// promise on a busy machine: what it did not add, a bulk produce does.
	produced, expAmount := finishFeeder(t, feed)
	if produced < groupTotal {
		ev, am := produceGroupInput(t, brokers, topic, produced, groupTotal-produced)
		produced += ev
		expAmount += am
	}
	drainStart := time.Now()
	waitDrained(t, gs, brokers, topic, job, p3, p4)
	drained := time.Since(drainStart)
	var fenced []int
	for _, p := range []*groupProc{p3, p4} {
		fenced = append(fenced, stopGroupProc(t, p))
	}
	fenced = append(fenced, finishedFenced(t, p1))

	got := checkGroupSink(t, gs, brokers, topic, job, strategy, logDir, produced, expAmount)

	// The run really rebalanced, and p2's partitions went to others.
	all := []*groupProc{p1, p2, p3, p4}
	gens := map[int]bool{}
	for _, p := range all {
		for _, a := range p.assignments() {
			gens[a.generation] = true
		}
	}
	if len(gens) < 3 {
		t.Errorf("partitions assigned in generations %v only, want at least 3", slices.Sorted(maps.Keys(gens)))
	}
	for _, part := range victim.parts {
		if owner := laterOwner(part, victim.generation, p1, p3, p4); owner == "" {
			t.Errorf("partition %d of the killed p2 was never assigned to another process", part)
		}
	}
	batches := 0
	for _, p := range all {
		batches += p.commitsAfter(-1)
	}
	t.Logf("%s: %d events (amount %d) produced, %d at the start; sink holds %d events, %d keys, %d dead letters; "+
		"generations %v; %d batches committed; fenced p3=%d p4=%d p1=%d; drained in %s; %s in all",
		strategy, produced, expAmount, groupInitial, got.Events, got.Keys, got.DeadLetters,
		slices.Sorted(maps.Keys(gens)), batches, fenced[0], fenced[1], fenced[2], drained.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond))
}

func testGroupZombie(t *testing.T, strategy, brokers, sink string) {
	began := time.Now()
	topic := uniqueName(t, "zombie")
	job := uniqueName(t, "zombie-job")
	events, amount := produceGroupInput(t, brokers, topic, 0, 20_000)
	feed := startGroupFeeder(t, brokers, topic, events, amount)
	gs := openGroupSink(t, strategy, sink)
	logDir := t.TempDir()
	args := groupArgs(brokers, topic, job, sink, strategy)

	a := startGroupProc(t, "a", logDir, cmdEnv(), args)
	genA := waitSettled(t, "a holds every partition", 0, a)
	z := startGroupProc(t, "z", logDir, cmdEnv(
		"MICROBATCH_CRASH_AT="+strategies.CrashAfterPlan+":"+strconv.Itoa(zombieReach), "MICROBATCH_CRASH_SIGNAL=STOP"), args)
	waitFor(t, groupWait, "z to stop itself at its batch's plan", func() bool {
		z.requireRunning(t)
		return z.stopped()
	})
	stoppedAt := time.Now()
	z.sync(t) // all z wrote before it stopped is read
	za := z.lastAssignment()
	if za.generation <= genA || len(za.parts) == 0 || z.commitsAfter(za.line) == 0 || !openBatch(z.snapshot()) {
		t.Fatalf("z stopped with assignment %+v, %d batches committed since, batch open %v: want partitions of a generation after %d, "+
			"committed batches and a batch planned; log %s", za, z.commitsAfter(za.line), openBatch(z.snapshot()), genA, z.logPath)
	}
	before := gs.next(t, job, topic)

	// a takes z's partitions over after z's session times out, and commits
	// on them while z sleeps.
	var takeover assignment
	for found, deadline := false, time.Now().Add(groupWait); !found; time.Sleep(20 * time.Millisecond) {
		a.requireRunning(t)
		for _, as := range a.assignments() {
			if as.generation > za.generation && containsAll(as.parts, za.parts) && a.commitsAfter(as.line) >= zombieCommits {
				takeover, found = as, true
				break
			}
		}
		if !found && time.Now().After(deadline) {
			t.Fatalf("waited %s for a to be assigned z's partitions %v and commit %d batches on them%s",
				groupWait, za.parts, zombieCommits, blockedBy(t, gs, a, job))
		}
	}
	tookOver := time.Since(stoppedAt)
	if !z.stopped() {
		t.Fatal("z is not stopped any more")
	}
	after := gs.next(t, job, topic)
	for _, p := range za.parts {
		if after[p] <= before[p] {
			t.Errorf("partition %d did not advance while z slept (%d, then %d): the others must keep committing", p, before[p], after[p])
		}
	}
	committedByA := a.commitsAfter(takeover.line)

	// z goes on with the batch it planned: its commit must be refused.
	from := len(z.snapshot())
	z.signal(t, syscall.SIGCONT)
	z.waitLine(t, from, groupWait, "z's commit to be fenced", func(l string) bool {
		return strings.Contains(l, `msg="commit fenced: another instance owns the partition now; dropping it"`)
	})
	genBack := waitSettled(t, "z rejoins the group", takeover.generation, a, z)

	produced, expAmount := finishFeeder(t, feed)
	waitDrained(t, gs, brokers, topic, job, a, z)
	fencedA, fencedZ := stopGroupProc(t, a), stopGroupProc(t, z)
	if fencedZ < 1 {
		t.Errorf("z's run finished with fenced=%d, want at least 1", fencedZ)
	}
	if fencedA != 0 {
		t.Errorf("a's run finished with fenced=%d: nobody took a's partitions", fencedA)
	}
	got := checkGroupSink(t, gs, brokers, topic, job, strategy, logDir, produced, expAmount)
	zombieFenced := 0
	for _, l := range z.snapshot() {
		if strings.Contains(l, `msg="commit fenced:`) {
			zombieFenced++
		}
	}
	t.Logf("%s: z held %v of generation %d and stopped after planning its batch %d; a took them over in generation %d %s later "+
		"and committed %d batches while z slept; z's commit was fenced (%d WARN lines, fenced=%d), z rejoined in generation %d; "+
		"%d events (amount %d), sink %d events, %d keys; %s in all",
		strategy, za.parts, za.generation, zombieReach, takeover.generation, tookOver.Round(time.Millisecond),
		committedByA, zombieFenced, fencedZ, genBack, produced, expAmount, got.Events, got.Keys, time.Since(began).Round(time.Millisecond))
}

// blockedBy tells whether a's commits wait for a lock — which only the
// stopped zombie can hold, if it was paused inside a transaction instead of
// before its batch.
func blockedBy(t *testing.T, gs *groupSink, a *groupProc, job string) string {
	busy := 0
	for _, l := range a.snapshot() {
		if strings.Contains(l, "msg=retrying") && strings.Contains(l, "SQLITE_BUSY") {
			busy++
		}
	}
	if busy > 0 {
		return fmt.Sprintf(": a's commit got SQLITE_BUSY %d times, so a stopped process holds the database's write lock", busy)
	}
	if gs.sql == nil || gs.sql.Dialect() != offsets.MySQL {
		return ""
	}
	var waits int
	if err := gs.sql.DB().QueryRowContext(t.Context(),
		`SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?`,
		"%"+job+"%").Scan(&waits); err != nil || waits == 0 {
		return ""
	}
	return fmt.Sprintf(": %d of the job's transactions wait for a row lock, so a stopped process holds an open transaction", waits)
}

// produceGroupInput writes count events of the crash sequence, after skip,
// to topic (created with groupPartitions partitions) and returns their totals.
func produceGroupInput(t *testing.T, brokers, topic string, skip, count int64) (events, amount int64) {
	t.Helper()
	r := runBin(t, t.TempDir(), nil, 5*time.Minute, "produce", "--brokers", brokers, "--topic", topic,
		"--partitions", strconv.Itoa(groupPartitions), "--keys", strconv.Itoa(crashKeys), "--seed", strconv.Itoa(crashSeed),
		"--skip", strconv.FormatInt(skip, 10), "--count", strconv.FormatInt(count, 10))
	if r.code != 0 {
		t.Fatalf("microbatch produce: %s", r)
	}
	m := expectedRE.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("microbatch produce printed no expected totals:\n%s", r)
	}
	events, _ = strconv.ParseInt(m[1], 10, 64)
	amount, _ = strconv.ParseInt(m[2], 10, 64)
	return events, amount
}

// startGroupFeeder keeps adding the crash sequence to topic, after the
// events already there, until finishFeeder (or the test's end).
func startGroupFeeder(t *testing.T, brokers, topic string, events, amount int64) *kafkautil.Feeder {
	f := kafkautil.StartFeeder(kafkautil.ProduceOptions{
		Brokers: kafkautil.SplitBrokers(brokers), Topic: topic, Count: groupFeedChunk,
		Keys: crashKeys, Seed: crashSeed, Rate: groupFeedRate,
	}, event.Expected{Events: events, Amount: amount})
	t.Cleanup(func() { _, _ = f.Finish() })
	return f
}

func finishFeeder(t *testing.T, f *kafkautil.Feeder) (events, amount int64) {
	t.Helper()
	total, err := f.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return total.Events, total.Amount
}

// groupSink reads a job's stored offsets and per-key totals from a SQL or
// Redis sink.
type groupSink struct {
	dsn   string
	sql   *writers.SQL
	redis *writers.Redis
}

func openGroupSink(t *testing.T, strategy, dsn string) *groupSink {
	t.Helper()
	gs := &groupSink{dsn: dsn}
	if strategy != string(strategies.StrategyIdempotent) {
		gs.sql = sinktest.OpenSQL(t, dsn)
		return gs
	}
	r, err := writers.OpenRedis(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	gs.redis = r
	return gs
}

// next is where the job resumes on each partition.
func (gs *groupSink) next(t *testing.T, job, topic string) map[int32]int64 {
	t.Helper()
	if gs.sql != nil {
		return sinktest.StoredOffsets(t, gs.sql.DB(), job, topic)
	}
	next, err := gs.redis.Offsets(t.Context(), job, topic)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// checkPerKey compares every key's totals with a replay of the first
// produced events of the crash sequence.
func (gs *groupSink) checkPerKey(t *testing.T, job string, produced int64) {
	t.Helper()
	if gs.sql != nil {
		checkCrashPerKey(t, gs.sql, job, produced)
		return
	}
	ctx := t.Context()
	evs, err := gs.redis.Client().HGetAll(ctx, writers.RedisEventsKey(job)).Result()
	if err != nil {
		t.Fatal(err)
	}
	ams, err := gs.redis.Client().HGetAll(ctx, writers.RedisAmountKey(job)).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]event.Total{}
	g := event.NewGenerator(crashSeed, crashKeys)
	for range produced {
		_, k, a := g.Next()
		tt := want[k]
		tt.Events++
		tt.Amount += a
		want[k] = tt
	}
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for k := range evs {
		if _, ok := ams[k]; !ok {
			ams[k] = "0"
		}
	}
	for k, am := range ams {
		ev, _ := strconv.ParseInt(evs[k], 10, 64)
		a, _ := strconv.ParseInt(am, 10, 64)
		wt := want[k]
		delete(want, k)
		if ev != wt.Events || a != wt.Amount {
			report("key %q: sink events=%d amount=%d, want %d and %d", k, ev, a, wt.Events, wt.Amount)
		}
	}
	for k := range want {
		report("key %q: missing in the sink", k)
	}
	if bad > 10 {
		t.Errorf("%d keys differ in all", bad)
	}
}

// waitDrained waits until the sink's offsets reach the end of every
// partition (the feeder has stopped), while procs keep running.
func waitDrained(t *testing.T, gs *groupSink, brokers, topic, job string, procs ...*groupProc) {
	t.Helper()
	end := testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic)
	// A bound for a busy machine, where the drain of the scale-out test's
	// input takes tens of seconds.
	waitEvery(t, 100*time.Millisecond, 5*time.Minute, "the sink to reach the end of every partition", func() bool {
		for _, p := range procs {
			p.requireRunning(t)
		}
		return fmt.Sprint(gs.next(t, job, topic)) == fmt.Sprint(end)
	})
}

// checkGroupSink checks the job's totals (ReadTotals, then `microbatch
// verify`), every key's totals and the stored offsets against the input.
func checkGroupSink(t *testing.T, gs *groupSink, brokers, topic, job, strategy, dir string, produced, expAmount int64) strategies.SinkTotals {
	t.Helper()
	got, _, err := strategies.ReadTotals(context.Background(), gs.dsn, job)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != produced || !got.AmountIs(expAmount) || got.DeadLetters != 0 {
		t.Errorf("sink totals %+v, want events=%d amount=%d and no dead letters (duplicates %d, losses %d)",
			got, produced, expAmount, max(got.Events-produced, 0), max(produced-got.Events, 0))
	}
	gs.checkPerKey(t, job, produced)
	end, stored := testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic), gs.next(t, job, topic)
	if len(end) != groupPartitions || fmt.Sprint(end) != fmt.Sprint(stored) {
		t.Errorf("stored offsets %v, partition ends %v", stored, end)
	}
	if sum(end) != produced {
		t.Errorf("the topic holds %d records, the feeder reports %d events", sum(end), produced)
	}
	v := runBin(t, dir, nil, time.Minute, "verify", "--sink", gs.dsn, "--job", job, "--strategy", strategy,
		"--expect-events", strconv.FormatInt(produced, 10), "--expect-amount", strconv.FormatInt(expAmount, 10))
	if v.code != 0 || !strings.Contains(v.stdout, "OK: exactly once") {
		t.Errorf("microbatch verify: %s", v)
	}
	return got
}

// groupProc is one `microbatch run` process of a group test; its stderr is
// kept line by line (and copied to logPath with its stdout).
type groupProc struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	mu      sync.Mutex
	lines   []string
	assigns []assignment  // its "partitions assigned" lines
	commits []int         // indexes of its "batch committed" lines
	notify  chan struct{} // a line arrived (1-buffered)
	eof     chan struct{} // stderr closed: the process is gone

	stderr *logPipe
	waited chan struct{} // closed when the process has been waited for
	state  *os.ProcessState
}

// startGroupProc starts `microbatch args...` with env; cleanup kills it if
// it is still running.
func startGroupProc(t *testing.T, name, logDir string, env, args []string) *groupProc {
	t.Helper()
	p := &groupProc{name: name, logPath: filepath.Join(logDir, name+".log"), notify: make(chan struct{}, 1),
		stderr: newLogPipe(t), waited: make(chan struct{})}
	p.eof = p.stderr.done
	f, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(binary(t), args...)
	p.cmd.Env = env
	p.cmd.Stdout = f
	p.cmd.Stderr = p.stderr.w
	if err := p.cmd.Start(); err != nil {
		f.Close()
		p.stderr.closeWrite()
		p.stderr.r.Close()
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.waited)
		p.stderr.closeWrite() // the reader gets EOF
	}()
	go func() {
		defer f.Close()
		p.stderr.read(func(line string) {
			f.WriteString(line + "\n")
			p.mu.Lock()
			if as := parseAssignments([]string{line}); len(as) == 1 {
				as[0].line = len(p.lines)
				p.assigns = append(p.assigns, as[0])
			}
			if strings.Contains(line, committedMarker) {
				p.commits = append(p.commits, len(p.lines))
			}
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			select {
			case p.notify <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		select {
		case <-p.eof:
		default:
			// SIGKILL ends a stopped process too.
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
		p.wait()
		if t.Failed() { // the log directory goes with the test
			t.Logf("%s ended %v; last lines of its log:\n%s", p.name, p.state, tail(p.snapshot(), 30))
		}
	})
	return p
}

func (p *groupProc) wait() *os.ProcessState {
	<-p.eof
	<-p.waited
	return p.state
}

// sync returns once every line the process wrote before the call is in
// p.lines (logPipe.sync): after a stop, its whole log.
func (p *groupProc) sync(t *testing.T) {
	t.Helper()
	if err := p.stderr.sync(groupWait); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
}

func (p *groupProc) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// linesFrom returns the lines from index from on.
func (p *groupProc) linesFrom(from int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines[min(from, len(p.lines)):])
}

func (p *groupProc) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

func (p *groupProc) text() string { return strings.Join(p.snapshot(), "\n") }

// assignments are the process's "partitions assigned" lines so far.
func (p *groupProc) assignments() []assignment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.assigns)
}

// commitsAfter counts the "batch committed" lines after line index line.
func (p *groupProc) commitsAfter(line int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearch(p.commits, line+1)
	return len(p.commits) - i
}

func (p *groupProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: sending %v: %v", p.name, sig, err)
	}
}

func (p *groupProc) exited() bool {
	select {
	case <-p.eof:
		return true
	default:
		return false
	}
}

// requireRunning fails the test if the process ended by itself.
func (p *groupProc) requireRunning(t *testing.T) {
	t.Helper()
	if p.exited() {
		ps := p.wait()
		t.Fatalf("%s exited by itself (%v); log %s:\n%s", p.name, ps, p.logPath, tail(p.snapshot(), 40))
	}
}

// exit waits at most timeout for the process to end.
func (p *groupProc) exit(t *testing.T, timeout time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.eof:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %s; log %s:\n%s", p.name, timeout, p.logPath, tail(p.snapshot(), 40))
	}
	return p.wait()
}

// stopped reports whether the process is stopped (SIGSTOP), every thread.
func (p *groupProc) stopped() bool { return procStopped(p.cmd.Process.Pid) }

// waitLine waits for a line from index from on that matches and returns its
// index. The process ending first fails the test.
func (p *groupProc) waitLine(t *testing.T, from int, timeout time.Duration, what string, match func(string) bool) int {
	t.Helper()
	deadline := time.After(timeout)
	for {
		for i, l := range p.linesFrom(from) {
			if match(l) {
				return from + i
			}
		}
		from = max(from, p.lineCount())
		select {
		case <-p.notify:
		case <-p.eof:
			// Lines read before EOF are in p.lines already.
			if p.lineCount() > from {
				continue
			}
			p.requireRunning(t)
		case <-deadline:
			t.Fatalf("%s: waited %s for %s; log %s:\n%s", p.name, timeout, what, p.logPath, tail(p.snapshot(), 40))
		}
	}
}

// lastAssignment is the process's latest "partitions assigned" line.
func (p *groupProc) lastAssignment() assignment {
	as := p.assignments()
	if len(as) == 0 {
		return assignment{line: -1}
	}
	return as[len(as)-1]
}

// stopGroupProc sends SIGTERM and requires exit 0 and a "run finished"
// line; it returns that line's fenced count.
func stopGroupProc(t *testing.T, p *groupProc) int {
	t.Helper()
	p.requireRunning(t)
	p.signal(t, syscall.SIGTERM)
	if ps := p.exit(t, 30*time.Second); ps.ExitCode() != 0 {
		t.Fatalf("%s after SIGTERM: %v, want exit 0; log %s:\n%s", p.name, ps, p.logPath, tail(p.snapshot(), 40))
	}
	return finishedFenced(t, p)
}

var finishedRE = regexp.MustCompile(`msg="run finished" .*\bfenced=(\d+)`)

// finishedFenced is the fenced count of the process's "run finished" line.
func finishedFenced(t *testing.T, p *groupProc) int {
	t.Helper()
	m := finishedRE.FindStringSubmatch(p.text())
	if m == nil {
		t.Fatalf("%s: no \"run finished\" line with fenced=; log %s:\n%s", p.name, p.logPath, tail(p.snapshot(), 40))
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func killedBy(ps *os.ProcessState, sig syscall.Signal) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// killInBatch SIGKILLs p inside a batch: at the next "batch started" line
// it stops p (SIGSTOP), and kills it if the batch has not committed yet,
// or lets it go on and tries the next batch. It returns the attempts and
// the id of the batch the kill landed in.
func killInBatch(t *testing.T, p *groupProc) (tries int, batchID string) {
	t.Helper()
	for tries = 1; tries <= 20; tries++ {
		p.waitLine(t, p.lineCount(), 10*time.Second, "a batch to start", func(l string) bool {
			return strings.Contains(l, batchStartedMarker)
		})
		p.signal(t, syscall.SIGSTOP)
		waitFor(t, groupWait, p.name+" to stop", p.stopped)
		p.sync(t) // all p wrote before it stopped is read
		if lines := p.snapshot(); openBatch(lines) {
			p.signal(t, syscall.SIGKILL)
			return tries, lastBatchStarted(lines)
		}
		p.signal(t, syscall.SIGCONT)
	}
	t.Fatalf("%s: no batch was still open at 20 stops; log %s", p.name, p.logPath)
	return 0, ""
}

var batchIDRE = regexp.MustCompile(`msg="batch (?:started|committed)" batch=(\d+)`)

func lastBatchStarted(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], batchStartedMarker) {
			if m := batchIDRE.FindStringSubmatch(lines[i]); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// openBatch reports whether the last batch started has no commit line
// after it. (By position, not by id: after a rebalance a process's batch
// ids may repeat.)
func openBatch(lines []string) bool {
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.Contains(lines[i], batchStartedMarker) {
			continue
		}
		id := batchIDRE.FindStringSubmatch(lines[i])
		if id == nil {
			return false
		}
		for _, l := range lines[i+1:] {
			if m := batchIDRE.FindStringSubmatch(l); m != nil && strings.Contains(l, committedMarker) && m[1] == id[1] {
				return false
			}
		}
		return true
	}
	return false
}

// assignment is one "partitions assigned" line of a process's log.
type assignment struct {
	line       int // index in the log
	group      string
	generation int
	member     string
	parts      []int32
	epoch      int64
}

var assignedRE = regexp.MustCompile(`msg="partitions assigned" group=(\S+) generation=(\d+) member=(\S+) partitions="?\[([0-9 ]*)\]"? epoch=(\d+)`)

func parseAssignments(lines []string) []assignment {
	var out []assignment
	for i, l := range lines {
		m := assignedRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := assignment{line: i, group: m[1], member: m[3]}
		a.generation, _ = strconv.Atoi(m[2])
		a.epoch, _ = strconv.ParseInt(m[5], 10, 64)
		for _, f := range strings.Fields(m[4]) {
			n, _ := strconv.ParseInt(f, 10, 32)
			a.parts = append(a.parts, int32(n))
		}
		out = append(out, a)
	}
	return out
}

func generationsOf(as []assignment) []int {
	var gens []int
	for _, a := range as {
		gens = append(gens, a.generation)
	}
	return gens
}

const committedMarker = `msg="batch committed"`

// waitSettled waits until procs agree on one generation newer than after,
// their partitions cover the topic's exactly once, and each process that
// has partitions committed a batch since it was assigned them. It returns
// the generation. A process that ends fails the test.
func waitSettled(t *testing.T, what string, after int, procs ...*groupProc) int {
	t.Helper()
	gen := 0
	waitFor(t, groupWait, what, func() bool {
		gen = 0
		var parts []int32
		for _, p := range procs {
			p.requireRunning(t)
			a := p.lastAssignment()
			if a.line < 0 || a.generation <= after || (gen != 0 && a.generation != gen) {
				return false
			}
			gen = a.generation
			if len(a.parts) > 0 && p.commitsAfter(a.line) == 0 {
				return false
			}
			parts = append(parts, a.parts...)
		}
		slices.Sort(parts)
		return slices.Equal(parts, allPartitions())
	})
	return gen
}

// laterOwner names the process that was assigned part in a generation
// after gen, if any.
func laterOwner(part int32, gen int, procs ...*groupProc) string {
	for _, p := range procs {
		for _, a := range p.assignments() {
			if a.generation > gen && slices.Contains(a.parts, part) {
				return p.name
			}
		}
	}
	return ""
}

func allPartitions() []int32 {
	out := make([]int32, groupPartitions)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

func containsAll(have, want []int32) bool {
	for _, p := range want {
		if !slices.Contains(have, p) {
			return false
		}
	}
	return true
}

// waitFor polls cond every 20ms until it holds, at most timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitEvery(t, 20*time.Millisecond, timeout, what, cond)
}

// waitEvery polls cond every interval until it holds, at most timeout.
func waitEvery(t *testing.T, every, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(every)
	}
}

func tail(lines []string, n int) string {
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
