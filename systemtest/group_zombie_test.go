package systemtest

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
)

// TestGroupZombieFenced stops a process (SIGSTOP) right after it planned a
// batch, waits until the group gave its partitions to another process and
// that one committed on them, then lets the zombie go on with its planned
// batch: the sink must refuse the zombie's commit (ErrFenced), the zombie
// must say so and rejoin, and the totals stay exact.
func TestGroupZombieFenced(t *testing.T) {
	t.Parallel()
	cases := append(groupCases(), groupCase{"txn/ApacheKafkaToPostgreSQL", string(strategies.StrategyTxn), func(t *testing.T) (string, string) {
		return testutil.NeedServer(t, testutil.EnvKafka), testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, sink := c.setup(t)
			testGroupZombie(t, c.strategy, brokers, sink)
		})
	}
}

func testGroupZombie(t *testing.T, strategy, brokers, sink string) {
	began := time.Now()
	topic := UniqueName(t, "zombie")
	job := UniqueName(t, "zombie-job")
	events, amount := produceGroupInput(t, brokers, topic, 0, 20_000)
	feed := startGroupFeeder(t, brokers, topic, events, amount)
	gs := openGroupSink(t, strategy, sink)
	logDir := t.TempDir()
	args := groupArgs(brokers, topic, job, sink, strategy)

	a := startGroupProc(t, "a", logDir, Env(), args)
	genA := waitSettled(t, "a holds every partition", 0, a)
	z := startGroupProc(t, "z", logDir, Env(
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
