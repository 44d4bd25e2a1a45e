package systemtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// TestGroupSharedRefusesNewcomer: `run --job other --group demo` while
// job demo runs in group demo. Only the newcomer is refused (exit 2,
// naming the job that holds the group) and it claims nothing; the running
// job goes on — it reads the input produced after the newcomer left, and
// its totals end exact — keeps all its partitions through the newcomer's
// join, and logs a warning naming the newcomer. A dry run
// of the newcomer says the same, exit 2, without joining.
func TestGroupSharedRefusesNewcomer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) (brokers, sink string)
	}{
		{"ApacheKafkaToMariaDB", func(t *testing.T) (string, string) {
			return testutil.NeedServer(t, testutil.EnvKafka), testutil.NeedServer(t, testutil.EnvMySQL)
		}},
		{"kfakeToSQLite", func(t *testing.T) (string, string) {
			b := StartBroker(t, "--partitions", strconv.Itoa(groupPartitions))
			return b.Addr, "sqlite://" + t.TempDir() + "/sink.db"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, sink := c.setup(t)
			testGroupSharedNewcomer(t, brokers, sink)
		})
	}
}

func testGroupSharedNewcomer(t *testing.T, brokers, sink string) {
	topic := UniqueName(t, "shared")
	jobA, jobB := UniqueName(t, "holder"), UniqueName(t, "newcomer")
	events, amount := produceGroupInput(t, brokers, topic, 0, 20_000)
	logDir := t.TempDir()
	gs := openGroupSink(t, string(strategies.StrategyTxn), sink)

	a := startGroupProc(t, "a", logDir, Env(), groupArgs(brokers, topic, jobA, sink, string(strategies.StrategyTxn)))
	a.waitLine(t, 0, groupWait, "job A's first commit", func(l string) bool { return strings.Contains(l, committedMarker) })

	argsB := append(groupArgs(brokers, topic, jobB, sink, string(strategies.StrategyTxn)), "--group", jobA)
	// The dry run says so too, without joining.
	want := fmt.Sprintf("consumer group %q is used by job %q", jobA, jobA)
	if dry := Run(t, t.TempDir(), nil, groupWait, append(argsB, "--dry-run")...); dry.Code != 2 || !strings.Contains(dry.Stderr, want) {
		t.Errorf("run --dry-run of job B in job A's group: %s\nwant exit 2 and %q", dry, want)
	}
	began := time.Now()
	b := Run(t, t.TempDir(), nil, groupWait, argsB...)
	refused := time.Since(began)
	if group, holder := fmt.Sprintf("consumer group %q", jobA), fmt.Sprintf("job %q", jobA); b.Code != 2 ||
		!strings.Contains(b.Stderr, group) || !strings.Contains(b.Stderr, holder) {
		t.Fatalf("job B in job A's group: %s\nwant exit 2 naming the group and the job that holds it (%s)", b, holder)
	}
	a.requireRunning(t)
	if rows := gs.next(t, jobB, topic); len(rows) != 0 {
		t.Errorf("the refused job B claimed partitions: %v", rows)
	}

	// A goes on with input that arrives after B is gone.
	ev, am := produceGroupInput(t, brokers, topic, events, 10_000)
	events, amount = events+ev, amount+am
	waitDrained(t, gs, brokers, topic, jobA, a)
	warning := fmt.Sprintf(`joined="job \"%s\" (instance %s-`, jobB, jobB)
	if !strings.Contains(a.text(), "another job tried to join this job's consumer group") || !strings.Contains(a.text(), warning) {
		t.Errorf("job A logged no warning naming job B (%s); log %s:\n%s", warning, a.logPath, tail(a.snapshot(), 40))
	}
	// B's join was a rebalance, in which A, the group's leader, kept
	// every partition: B was assigned none.
	as := a.assignments()
	if len(as) < 2 {
		t.Errorf("job A was assigned partitions %d times, want a rebalance when B joined", len(as))
	}
	for _, x := range as {
		if !slices.Equal(x.parts, allPartitions()) {
			t.Errorf("job A was assigned %v in generation %d, want all %d partitions", x.parts, x.generation, groupPartitions)
		}
	}
	stopGroupProc(t, a)
	got := checkGroupSink(t, gs, brokers, topic, jobA, string(strategies.StrategyTxn), logDir, events, amount)
	t.Logf("job B refused (exit 2) after %s; job A went on: %d events, amount %d, exact", refused.Round(time.Millisecond), got.Events, amount)
}
