package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// Crash test parameters. A batch holds at most crashMaxBatch offsets per
// partition, so a run consumes at most one batch per interval (a batch
// that overruns the interval took longer than it): that bounds the lag a
// run needs to stay busy until it is killed.
const (
	crashSeed        = 11 // event sequence
	crashKeys        = 1000
	crashPartitions  = 4
	crashInitial     = 200_000
	crashMinKills    = 20
	crashInterval    = 200 * time.Millisecond
	crashMaxBatch    = 5000
	crashMinDelay    = 300 * time.Millisecond
	crashMaxDelay    = 1500 * time.Millisecond
	crashMaxAlignLag = 15 * time.Millisecond
	// crashAlignTries bounds the batches an aligned kill tries before it
	// kills where it is (each try lets one batch go by).
	crashAlignTries = 5
)

// TestCrashRecovery SIGKILLs `microbatch run` of each strategy at random
// moments, restarts it, and checks that the sink ends up with every event
// exactly once (or, for the controls, that it keeps their promise: no loss
// for at-least-once, no duplicate for at-most-once). Every fourth kill
// comes after a purely random delay; the others wait, after the random
// delay, for the next "batch started" line and crashMaxAlignLag at most,
// stop the run there (SIGSTOP) and kill it if that batch is still open —
// else they let it go on to the next batch, crashAlignTries times at most
// — so that most kills hit an open batch by construction (a batch takes a
// few tens of milliseconds of each 200 ms interval, so purely random kills
// mostly land between batches, and on a busy machine the test may read
// the line too late). Whether a kill landed inside a batch is read from
// that run's log, not assumed.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	apache := func(t *testing.T) (string, string) {
		return testutil.NeedServer(t, testutil.EnvKafka), testutil.NeedServer(t, testutil.EnvMySQL)
	}
	postgres := func(t *testing.T) (string, string) {
		return testutil.NeedServer(t, testutil.EnvKafka), testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	}
	kfake := func(t *testing.T) (string, string) {
		b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
		return b.Addr, "sqlite://" + t.TempDir() + "/sink.db"
	}
	for _, c := range []struct {
		name     string
		strategy string
		setup    func(t *testing.T) (brokers, sink string)
	}{
		{"ApacheKafkaToMariaDB", string(strategies.StrategyTxn), apache},
		{"kfakeToSQLite", string(strategies.StrategyTxn), kfake},
		{"single/kfakeToSQLite", string(strategies.StrategySingle), kfake},
		{"idempotent/kfakeToRedis", string(strategies.StrategyIdempotent), func(t *testing.T) (string, string) {
			redis := testutil.NeedServer(t, testutil.EnvRedis)
			b := StartBroker(t, "--partitions", strconv.Itoa(crashPartitions))
			return b.Addr, redis
		}},
		{"at-least-once/ApacheKafkaToMariaDB", string(strategies.StrategyAtLeastOnce), apache},
		{"at-most-once/ApacheKafkaToMariaDB", string(strategies.StrategyAtMostOnce), apache},
		{"ApacheKafkaToPostgreSQL", string(strategies.StrategyTxn), postgres},
		{"single/ApacheKafkaToPostgreSQL", string(strategies.StrategySingle), postgres},
		{"at-least-once/ApacheKafkaToPostgreSQL", string(strategies.StrategyAtLeastOnce), postgres},
		{"at-most-once/ApacheKafkaToPostgreSQL", string(strategies.StrategyAtMostOnce), postgres},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, sink := c.setup(t)
			testCrashRecovery(t, c.strategy, brokers, sink)
		})
	}
}

func testCrashRecovery(t *testing.T, strategy, brokers, sink string) {
	c := newCrashRun(t, strategy, brokers, sink)
	for c.kills < crashMinKills {
		c.kill()
	}

	// Let it drain.
	final := Run(t, c.logDir, nil, 5*time.Minute, append(c.args, "--until-idle", "2s")...)
	if final.Code != 0 {
		t.Fatalf("final run: %s", final)
	}
	c.checkSink()

	// A crash test whose kills all miss the batches proves nothing, and a
	// detector that never fires would hide that.
	if c.mid == 0 {
		t.Fatalf("no kill landed inside a batch: the test did not exercise recovery (logs in %s)", c.logDir)
	}
	if c.mid*4 < c.kills {
		t.Errorf("only %d of %d kills landed inside a batch, want at least 25%%", c.mid, c.kills)
	}
}

// crashRun is one job of testCrashRecovery: its input, its run's
// arguments and what its kills hit so far.
type crashRun struct {
	t                       *testing.T
	bin                     string
	strategy, brokers, sink string
	topic, job              string
	args                    []string
	logDir                  string
	rng                     *rand.Rand
	produced, expAmount     int64
	kills, mid, aligned     int
	alignedMid, toppedUp    int
}

// newCrashRun produces the job's initial input and picks the kill timing
// seed (MICROBATCH_CRASH_SEED replays one).
func newCrashRun(t *testing.T, strategy, brokers, sink string) *crashRun {
	c := &crashRun{t: t, bin: Binary(t), strategy: strategy, brokers: brokers, sink: sink,
		topic: UniqueName(t, "crash"), job: UniqueName(t, "crash-job")}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MICROBATCH_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("MICROBATCH_CRASH_SEED: %v", err)
		}
	}
	t.Logf("kill timing seed %d (MICROBATCH_CRASH_SEED=%d replays it)", seed, seed)
	c.rng = rand.New(rand.NewPCG(seed, seed^0x5eed))

	c.produced, c.expAmount = Produce(t, brokers, c.topic, crashSeed, 0, crashInitial)
	c.logDir = t.TempDir()
	// A static group member: each restart takes the killed process's
	// partitions back at once instead of waiting out its session.
	c.args = []string{"run", "--brokers", brokers, "--topic", c.topic, "--job", c.job, "--sink", sink, "--strategy", strategy,
		"--interval", crashInterval.String(), "--max-batch-records", strconv.Itoa(crashMaxBatch), "--log-level", "debug",
		"--instance-id", c.job}
	return c
}

// kill runs the job once and SIGKILLs it: after a random delay, and for
// three kills of four then at the next batch start if that batch is still
// open when the run is stopped there.
func (c *crashRun) kill() {
	t := c.t
	delay := crashMinDelay + time.Duration(c.rng.Int64N(int64(crashMaxDelay-crashMinDelay)+1))
	align := c.kills%4 != 0
	c.topUp(delay)
	c.kills++
	logPath := filepath.Join(c.logDir, fmt.Sprintf("run-%02d.log", c.kills))
	plan := stopPlan{delay: delay}
	if align {
		plan.marker, plan.lag = batchStartedMarker, time.Duration(c.rng.Int64N(int64(crashMaxAlignLag)+1))
		plan.inside = func(log string) bool { return parseBatchLog(log).open }
		plan.tries = crashAlignTries
	}
	ps, tries := stopRunAt(t, c.bin, c.args, logPath, plan, syscall.SIGKILL)
	if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("run ended with %v, not by our SIGKILL", ps)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	st := parseBatchLog(string(log))
	if st.open {
		c.mid++
		if align {
			c.alignedMid++
		}
	}
	if align {
		c.aligned++
	}
	how := "random"
	if align {
		how = fmt.Sprintf("aligned, try %d", tries)
	}
	t.Logf("kill %2d after %4dms (%s): batches started %d, committed %d, last %d open=%v",
		c.kills, delay.Milliseconds(), how, st.started, st.committed, st.last, st.open)
}

// topUp gives the run more work than it can finish before a kill after
// delay.
func (c *crashRun) topUp(delay time.Duration) {
	t := c.t
	maxBatches := int64(delay/crashInterval) + 3 + crashAlignTries
	need := maxBatches * crashMaxBatch * crashPartitions
	if lag := sum(testutil.EndOffsets(t, kafkautil.SplitBrokers(c.brokers), c.topic)) - sum(storedNext(t, c.strategy, c.sink, c.brokers, c.job, c.topic)); lag < need {
		ev, am := Produce(t, c.brokers, c.topic, crashSeed, c.produced, need-lag)
		c.produced += ev
		c.expAmount += am
		c.toppedUp++
	}
}

// checkSink compares the drained sink with the input: totals as the
// strategy's guarantee promises, stored offsets at the partition ends,
// and microbatch verify agreeing.
func (c *crashRun) checkSink() {
	t, strategy, sink, job, produced, expAmount := c.t, c.strategy, c.sink, c.job, c.produced, c.expAmount
	got, _, err := strategies.ReadTotals(context.Background(), sink, job)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kills, %d landed inside a batch (%d of %d random, %d of %d aligned); topped up %d times",
		c.kills, c.mid, c.mid-c.alignedMid, c.kills-c.aligned, c.alignedMid, c.aligned, c.toppedUp)
	t.Logf("produced %d events (amount %d); sink holds %d events (amount %d), %d keys, %d dead letters; duplicates %d, losses %d",
		produced, expAmount, got.Events, got.Amount, got.Keys, got.DeadLetters, max(got.Events-produced, 0), max(produced-got.Events, 0))
	switch strategies.GuaranteeOf(strategies.Strategy(strategy)) {
	case strategies.ExactlyOnce:
		if got.Events != produced || !got.AmountIs(expAmount) || got.DeadLetters != 0 {
			t.Errorf("sink totals %+v, want events=%d amount=%d and no dead letters", got, produced, expAmount)
		}
		if strategies.Strategy(strategy) != strategies.StrategyIdempotent {
			checkCrashPerKey(t, sinktest.OpenSQL(t, sink), job, produced)
		}
	case strategies.AtLeastOnce:
		if got.Events < produced {
			t.Errorf("at-least-once lost %d events", produced-got.Events)
		}
	case strategies.AtMostOnce:
		if got.Events > produced {
			t.Errorf("at-most-once duplicated %d events", got.Events-produced)
		}
	}
	end, stored := testutil.EndOffsets(t, kafkautil.SplitBrokers(c.brokers), c.topic), storedNext(t, strategy, sink, c.brokers, job, c.topic)
	if fmt.Sprint(end) != fmt.Sprint(stored) {
		t.Errorf("stored offsets %v, partition ends %v", stored, end)
	}
	v := Run(t, c.logDir, nil, time.Minute, "verify", "--sink", sink, "--job", job, "--strategy", strategy,
		"--expect-events", strconv.FormatInt(produced, 10), "--expect-amount", strconv.FormatInt(expAmount, 10))
	if v.Code != 0 || !strings.Contains(v.Stdout, "OK") {
		t.Errorf("microbatch verify: %s", v)
	}
}
