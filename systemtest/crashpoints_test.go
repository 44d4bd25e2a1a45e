package systemtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// What a targeted crash must leave behind, judged after a restart drains.
type crashOutcome int

const (
	stayExact     crashOutcome = iota // exactly-once strategies, everywhere
	keepPromise                       // a control where its gap isn't open
	mustDuplicate                     // at-least-once inside its gap
	mustLose                          // at-most-once inside its gap
)

// TestCrashPoints kills `microbatch run` at each named crash point of each
// strategy (MICROBATCH_CRASH_AT), restarts it until idle, and judges the
// sink. The controls prove the crash landed: at-least-once must show
// duplicates and at-most-once a loss at their gap; if they come out clean,
// the kill missed its window and the test fails.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	type tc struct {
		strategy, point string
		want            crashOutcome
	}
	var cases []tc
	for _, s := range []string{string(strategies.StrategyTxn), string(strategies.StrategySingle)} {
		for _, p := range strategies.CrashPoints {
			cases = append(cases, tc{s, p, stayExact})
		}
	}
	for _, p := range []string{strategies.CrashAfterPlan, strategies.CrashMidWrite, strategies.CrashAfterWriteBeforeOffsets} {
		cases = append(cases, tc{string(strategies.StrategyIdempotent), p, stayExact})
	}
	cases = append(cases,
		tc{string(strategies.StrategyAtLeastOnce), strategies.CrashAfterPlan, keepPromise},
		tc{string(strategies.StrategyAtLeastOnce), strategies.CrashMidWrite, mustDuplicate},
		tc{string(strategies.StrategyAtLeastOnce), strategies.CrashAfterWriteBeforeOffsets, mustDuplicate},
		tc{string(strategies.StrategyAtMostOnce), strategies.CrashAfterPlan, keepPromise},
		tc{string(strategies.StrategyAtMostOnce), strategies.CrashMidWrite, mustLose},
		tc{string(strategies.StrategyAtMostOnce), strategies.CrashAfterOffsetsBeforeWrite, mustLose},
	)
	kfakeBroker := StartBroker(t, "--partitions", "4").Addr
	for _, c := range cases {
		t.Run("kfake/"+c.strategy+"/"+c.point, func(t *testing.T) {
			t.Parallel()
			sink := "sqlite://" + t.TempDir() + "/sink.db"
			if c.strategy == string(strategies.StrategyIdempotent) {
				sink = testutil.NeedServer(t, testutil.EnvRedis)
			}
			crashAt(t, kfakeBroker, sink, c.strategy, c.point, c.want)
		})
	}
	// Against the real servers: the gap of each control, and the
	// exactly-once strategies where a crash hurts most.
	for _, c := range []tc{
		{string(strategies.StrategyTxn), strategies.CrashMidWrite, stayExact},
		{string(strategies.StrategySingle), strategies.CrashAfterOffsetsBeforeWrite, stayExact},
		{string(strategies.StrategyIdempotent), strategies.CrashAfterWriteBeforeOffsets, stayExact},
		{string(strategies.StrategyAtLeastOnce), strategies.CrashAfterWriteBeforeOffsets, mustDuplicate},
		{string(strategies.StrategyAtMostOnce), strategies.CrashAfterOffsetsBeforeWrite, mustLose},
	} {
		t.Run("kafka-mariadb/"+c.strategy+"/"+c.point, func(t *testing.T) {
			t.Parallel()
			sink := testutil.EnvMySQL
			if c.strategy == string(strategies.StrategyIdempotent) {
				sink = testutil.EnvRedis
			}
			crashAt(t, testutil.NeedServer(t, testutil.EnvKafka), testutil.NeedServer(t, sink), c.strategy, c.point, c.want)
		})
	}
	// PostgreSQL: every crash point of the exactly-once strategies, and
	// the controls' gaps (to show the kills land), each in a database of
	// its own.
	var pgCases []tc
	for _, s := range []string{string(strategies.StrategyTxn), string(strategies.StrategySingle)} {
		for _, p := range strategies.CrashPoints {
			pgCases = append(pgCases, tc{s, p, stayExact})
		}
	}
	pgCases = append(pgCases,
		tc{string(strategies.StrategyAtLeastOnce), strategies.CrashAfterWriteBeforeOffsets, mustDuplicate},
		tc{string(strategies.StrategyAtMostOnce), strategies.CrashAfterOffsetsBeforeWrite, mustLose},
	)
	for _, c := range pgCases {
		t.Run("kafka-postgres/"+c.strategy+"/"+c.point, func(t *testing.T) {
			t.Parallel()
			brokers := testutil.NeedServer(t, testutil.EnvKafka)
			sink := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
			crashAt(t, brokers, sink, c.strategy, c.point, c.want)
		})
	}
}

func crashAt(t *testing.T, brokers, sink, strategy, point string, want crashOutcome) {
	topic := UniqueName(t, "cp")
	job := UniqueName(t, "cp-job")
	events, amount := Produce(t, brokers, topic, 5, 0, 20_000)
	dir := t.TempDir()
	args := []string{"run", "--brokers", brokers, "--topic", topic, "--job", job, "--sink", sink, "--strategy", strategy,
		"--interval", "100ms", "--max-batch-records", "3000", "--until-idle", "1s", "--instance-id", job}
	// The second time the point is reached: one partition of the first
	// batch got through it, so the crash lands in a batch in progress.
	crashed := Run(t, dir, Env("MICROBATCH_CRASH_AT="+point+":2"), 5*time.Minute, args...)
	if crashed.Code != -1 {
		t.Fatalf("the run was not killed at %s (exit %d): the point was never reached\n%s", point, crashed.Code, crashed)
	}
	// More records arrive before the restart: a replay of the interrupted
	// batch must read exactly its planned ranges, not these.
	more, moreAmount := Produce(t, brokers, topic, 5, events, 5_000)
	events += more
	amount += moreAmount
	if r := Run(t, dir, nil, 5*time.Minute, args...); r.Code != 0 {
		t.Fatalf("restart after the crash: %s", r)
	}
	v := Run(t, dir, nil, time.Minute, "verify", "--sink", sink, "--job", job, "--strategy", strategy,
		"--expect-events", strconv.FormatInt(events, 10), "--expect-amount", strconv.FormatInt(amount, 10))
	dups, losses := count(t, duplicatesRE, v.Stdout), count(t, lossesRE, v.Stdout)
	t.Logf("%s crashed at %s: %d duplicates, %d losses", strategy, point, dups, losses)
	if v.Code != 0 {
		t.Fatalf("verify: the sink breaks %s's promise\n%s", strategy, v)
	}
	switch want {
	case stayExact:
		if dups != 0 || losses != 0 {
			t.Fatalf("not exact\n%s", v)
		}
	case mustDuplicate:
		if dups == 0 {
			t.Fatalf("at-least-once came out clean after a crash at %s: the crash missed its window\n%s", point, v)
		}
	case mustLose:
		if losses == 0 {
			t.Fatalf("at-most-once came out clean after a crash at %s: the crash missed its window\n%s", point, v)
		}
	}
}
