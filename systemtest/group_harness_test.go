package systemtest

// Scale-out over a Kafka consumer group (issue #6): several `microbatch
// run` processes of one job share the topic's partitions. The tests kill,
// add, stop and pause processes while input keeps flowing, and require the
// sink to end with every event exactly once and every partition's offset
// at its log end — and the logs to show that the group really rebalanced.

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
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
			b := StartBroker(t, "--partitions", strconv.Itoa(groupPartitions))
			return b.Addr, "sqlite://" + t.TempDir() + "/sink.db"
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

// produceGroupInput writes count events of the crash sequence, after skip,
// to topic (created with groupPartitions partitions) and returns their totals.
func produceGroupInput(t *testing.T, brokers, topic string, skip, count int64) (events, amount int64) {
	t.Helper()
	r := Run(t, t.TempDir(), nil, 5*time.Minute, "produce", "--brokers", brokers, "--topic", topic,
		"--partitions", strconv.Itoa(groupPartitions), "--keys", strconv.Itoa(crashKeys), "--seed", strconv.Itoa(crashSeed),
		"--skip", strconv.FormatInt(skip, 10), "--count", strconv.FormatInt(count, 10))
	if r.Code != 0 {
		t.Fatalf("microbatch produce: %s", r)
	}
	m := ExpectedRE.FindStringSubmatch(r.Stdout)
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
