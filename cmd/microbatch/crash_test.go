package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
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
	kfake := func(t *testing.T) (string, string) {
		b := startBroker(t, "--partitions", strconv.Itoa(crashPartitions))
		return b.addr, "sqlite://" + t.TempDir() + "/sink.db"
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
			b := startBroker(t, "--partitions", strconv.Itoa(crashPartitions))
			return b.addr, redis
		}},
		{"at-least-once/ApacheKafkaToMariaDB", string(strategies.StrategyAtLeastOnce), apache},
		{"at-most-once/ApacheKafkaToMariaDB", string(strategies.StrategyAtMostOnce), apache},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, sink := c.setup(t)
			testCrashRecovery(t, c.strategy, brokers, sink)
		})
	}
}

// storedNext is where the job will resume: mb_offsets for the exactly-once
// strategies, the consumer group for the controls.
func storedNext(t *testing.T, strategy, sink, brokers, job, topic string) map[int32]int64 {
	switch strategies.Strategy(strategy) {
	case strategies.StrategyIdempotent:
		r, err := writers.OpenRedis(t.Context(), sink)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		next, err := r.Offsets(t.Context(), job, topic)
		if err != nil {
			t.Fatal(err)
		}
		return next
	case strategies.StrategyTxn, strategies.StrategySingle:
		w := sinktest.OpenSQL(t, sink)
		return sinktest.StoredOffsets(t, w.DB(), job, topic)
	}
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("crash-test-group"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	next, err := offsets.NewKafkaGroup(client, job, topic).Load(t.Context(), []int32{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func testCrashRecovery(t *testing.T, strategy, brokers, sink string) {
	bin := binary(t)
	topic := uniqueName(t, "crash")
	job := uniqueName(t, "crash-job")
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MICROBATCH_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("MICROBATCH_CRASH_SEED: %v", err)
		}
	}
	t.Logf("kill timing seed %d (MICROBATCH_CRASH_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))

	produced, expAmount := produceCLI(t, brokers, topic, crashSeed, 0, crashInitial)
	logDir := t.TempDir()
	// A static group member: each restart takes the killed process's
	// partitions back at once instead of waiting out its session.
	args := []string{"run", "--brokers", brokers, "--topic", topic, "--job", job, "--sink", sink, "--strategy", strategy,
		"--interval", crashInterval.String(), "--max-batch-records", strconv.Itoa(crashMaxBatch), "--log-level", "debug",
		"--instance-id", job}

	var kills, mid, aligned, alignedMid, toppedUp int
	for kills < crashMinKills {
		delay := crashMinDelay + time.Duration(rng.Int64N(int64(crashMaxDelay-crashMinDelay)+1))
		align := kills%4 != 0
		// Give the run more work than it can finish before the kill.
		maxBatches := int64(delay/crashInterval) + 3 + crashAlignTries
		need := maxBatches * crashMaxBatch * crashPartitions
		if lag := sum(testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic)) - sum(storedNext(t, strategy, sink, brokers, job, topic)); lag < need {
			ev, am := produceCLI(t, brokers, topic, crashSeed, produced, need-lag)
			produced += ev
			expAmount += am
			toppedUp++
		}
		kills++
		logPath := filepath.Join(logDir, fmt.Sprintf("run-%02d.log", kills))
		plan := stopPlan{delay: delay}
		if align {
			plan.marker, plan.lag = batchStartedMarker, time.Duration(rng.Int64N(int64(crashMaxAlignLag)+1))
			plan.inside = func(log string) bool { return parseBatchLog(log).open }
			plan.tries = crashAlignTries
		}
		ps, tries := stopRunAt(t, bin, args, logPath, plan, syscall.SIGKILL)
		if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("run ended with %v, not by our SIGKILL", ps)
		}
		log, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		st := parseBatchLog(string(log))
		if st.open {
			mid++
			if align {
				alignedMid++
			}
		}
		if align {
			aligned++
		}
		how := "random"
		if align {
			how = fmt.Sprintf("aligned, try %d", tries)
		}
		t.Logf("kill %2d after %4dms (%s): batches started %d, committed %d, last %d open=%v",
			kills, delay.Milliseconds(), how, st.started, st.committed, st.last, st.open)
	}

	// Let it drain.
	final := runBin(t, logDir, nil, 5*time.Minute, append(args, "--until-idle", "2s")...)
	if final.code != 0 {
		t.Fatalf("final run: %s", final)
	}

	got, _, err := strategies.ReadTotals(context.Background(), sink, job)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kills, %d landed inside a batch (%d of %d random, %d of %d aligned); topped up %d times",
		kills, mid, mid-alignedMid, kills-aligned, alignedMid, aligned, toppedUp)
	t.Logf("produced %d events (amount %d); sink holds %d events (amount %d), %d keys, %d dead letters; duplicates %d, losses %d",
		produced, expAmount, got.Events, got.Amount, got.Keys, got.DeadLetters, max(got.Events-produced, 0), max(produced-got.Events, 0))
	switch strategies.GuaranteeOf(strategies.Strategy(strategy)) {
	case strategies.ExactlyOnce:
		if got.Events != produced || !got.AmountIs(expAmount) || got.DeadLetters != 0 {
			t.Errorf("sink totals %+v, want events=%d amount=%d and no dead letters", got, produced, expAmount)
		}
		if strategy != string(strategies.StrategyIdempotent) {
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
	end, stored := testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic), storedNext(t, strategy, sink, brokers, job, topic)
	if fmt.Sprint(end) != fmt.Sprint(stored) {
		t.Errorf("stored offsets %v, partition ends %v", stored, end)
	}
	v := runBin(t, logDir, nil, time.Minute, "verify", "--sink", sink, "--job", job, "--strategy", strategy,
		"--expect-events", strconv.FormatInt(produced, 10), "--expect-amount", strconv.FormatInt(expAmount, 10))
	if v.code != 0 || !strings.Contains(v.stdout, "OK") {
		t.Errorf("microbatch verify: %s", v)
	}

	// A crash test whose kills all miss the batches proves nothing, and a
	// detector that never fires would hide that.
	if mid == 0 {
		t.Fatalf("no kill landed inside a batch: the test did not exercise recovery (logs in %s)", logDir)
	}
	if mid*4 < kills {
		t.Errorf("only %d of %d kills landed inside a batch, want at least 25%%", mid, kills)
	}
}

// batchStartedMarker is the log line stopRun aligns its kills on.
const batchStartedMarker = `msg="batch started"`

// stopRun starts one run, lets it work for delay (then, if align, until
// the next batch starts plus alignLag), sends it sig and returns how it
// ended. Its stderr goes to logPath. A run that exits before the signal
// fails the test.
func stopRun(t *testing.T, bin string, args []string, logPath string, delay time.Duration, align bool, alignLag time.Duration, sig syscall.Signal) *os.ProcessState {
	t.Helper()
	marker := ""
	if align {
		marker = batchStartedMarker
	}
	return stopRunOn(t, bin, args, logPath, delay, marker, alignLag, sig)
}

// stopRunOn is stopRun aligned on any log line: after delay it waits for
// the next line containing marker plus alignLag before it sends sig. An
// empty marker sends sig right after delay.
func stopRunOn(t *testing.T, bin string, args []string, logPath string, delay time.Duration, marker string, alignLag time.Duration, sig syscall.Signal) *os.ProcessState {
	t.Helper()
	ps, _ := stopRunAt(t, bin, args, logPath, stopPlan{delay: delay, marker: marker, lag: alignLag}, sig)
	return ps
}

// stopPlan says when stopRunAt signals a run.
type stopPlan struct {
	delay  time.Duration // the run works at least this long,
	marker string        // then (if set) until the next line containing marker,
	lag    time.Duration // and this much longer.
	// inside, if set, judges whether the signal would land where it must:
	// the run is stopped (SIGSTOP) at the moment the plan chose, its whole
	// log read, and inside called with it; only if it says yes is sig
	// sent. Otherwise the run goes on (SIGCONT) to the next marker line,
	// up to tries times; the last try signals it wherever it is. So a kill
	// lands where the test reads that it landed, not because the test read
	// the log in time.
	inside func(log string) bool
	tries  int
}

const (
	// markerWait bounds the wait for the next marker line.
	markerWait = time.Minute
	// stopWait bounds the wait for a run to stop after SIGSTOP.
	stopWait = 30 * time.Second
)

// stopRunAt runs bin with args until plan says to send sig, and returns
// how the run ended and how many tries plan.inside took (0 without one).
// Its stderr goes to logPath. A run that exits before the signal fails the
// test.
func stopRunAt(t *testing.T, bin string, args []string, logPath string, plan stopPlan, sig syscall.Signal) (ps *os.ProcessState, tries int) {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stderr := newLogPipe(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = cmdEnv()
	cmd.Stdout = f
	cmd.Stderr = stderr.w
	if err := cmd.Start(); err != nil {
		stderr.closeWrite()
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
		stderr.closeWrite() // the reader gets EOF
	}()
	var (
		mu      sync.Mutex
		log     strings.Builder
		markers int // marker lines read
	)
	marked := make(chan struct{}, 1)
	go stderr.read(func(line string) {
		f.WriteString(line + "\n")
		mu.Lock()
		log.WriteString(line + "\n")
		if plan.marker != "" && strings.Contains(line, plan.marker) {
			markers++
			select {
			case marked <- struct{}{}:
			default:
			}
		}
		mu.Unlock()
	})
	eof := stderr.done
	// On every way out, a failed test's too, the run is gone.
	defer func() {
		select {
		case <-eof:
		default:
			_ = cmd.Process.Kill()
			<-eof
		}
		<-waited
	}()
	exitedEarly := func() {
		<-eof
		<-waited
		log, _ := os.ReadFile(logPath)
		t.Fatalf("run exited by itself (%v) before it was signalled; log %s:\n%s", cmd.ProcessState, logPath, log)
	}
	// nextMarker waits for a marker line after the seen-th.
	nextMarker := func(seen int) {
		deadline := time.After(markerWait)
		for {
			mu.Lock()
			n := markers
			mu.Unlock()
			if n > seen {
				return
			}
			select {
			case <-marked:
			case <-eof:
				exitedEarly()
			case <-deadline:
				mu.Lock()
				text := log.String()
				mu.Unlock()
				t.Fatalf("no line %s within %s (after %s and %d such lines); log %s:\n%s", plan.marker, markerWait, plan.delay, seen, logPath, text)
			}
		}
	}
	signal := func(sig syscall.Signal) {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatalf("sending %v to the run: %v", sig, err)
		}
	}

	select {
	case <-eof:
		exitedEarly()
	case <-time.After(plan.delay):
	}
	for {
		if plan.marker != "" {
			mu.Lock()
			seen := markers
			mu.Unlock()
			nextMarker(seen)
			time.Sleep(plan.lag)
		}
		if plan.inside == nil {
			break
		}
		tries++
		signal(syscall.SIGSTOP)
		for deadline := time.Now().Add(stopWait); !procStopped(cmd.Process.Pid); time.Sleep(5 * time.Millisecond) {
			select {
			case <-eof:
				exitedEarly()
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run did not stop within %s of SIGSTOP", stopWait)
			}
		}
		if err := stderr.sync(stopWait); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		text := log.String()
		mu.Unlock()
		if plan.inside(text) || tries >= plan.tries {
			break
		}
		signal(syscall.SIGCONT)
	}
	signal(sig)
	if plan.inside != nil && sig != syscall.SIGKILL {
		signal(syscall.SIGCONT) // a stopped process acts on other signals once continued
	}
	select {
	case <-eof:
	case <-time.After(time.Minute):
		t.Fatalf("run still running a minute after %v", sig)
	}
	<-waited
	return cmd.ProcessState, tries
}

// TestGracefulStop sends SIGTERM to `microbatch run` just after a batch
// started: the batch in flight must commit, the run must exit 0, and after
// a final drain the sink holds every event exactly once.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	bin := binary(t)
	topic := uniqueName(t, "term")
	job := uniqueName(t, "term-job")
	sink := "sqlite://" + t.TempDir() + "/sink.db"
	produced, expAmount := produceCLI(t, b.addr, topic, crashSeed, 0, crashInitial)
	w := sinktest.OpenSQL(t, sink)
	logDir := t.TempDir()
	args := []string{"run", "--brokers", b.addr, "--topic", topic, "--job", job, "--sink", sink,
		"--interval", crashInterval.String(), "--max-batch-records", strconv.Itoa(crashMaxBatch), "--log-level", "debug"}
	for i := 1; i <= 3; i++ {
		logPath := filepath.Join(logDir, fmt.Sprintf("run-%d.log", i))
		ps := stopRun(t, bin, args, logPath, crashMinDelay, true, 0, syscall.SIGTERM)
		log, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		st := parseBatchLog(string(log))
		if ps.ExitCode() != 0 || st.started == 0 || st.open || !strings.Contains(string(log), `msg="run finished"`) {
			t.Fatalf("SIGTERM %d: want exit 0 after committing the batch in flight, got %v, %+v; log:\n%s", i, ps, st, log)
		}
	}
	final := runBin(t, logDir, nil, 5*time.Minute, append(args, "--until-idle", "2s")...)
	if final.code != 0 {
		t.Fatalf("final run: %s", final)
	}
	got, err := strategies.ReadSinkTotals(context.Background(), w, job)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != produced || !got.AmountIs(expAmount) {
		t.Errorf("sink totals %+v, want events=%d amount=%d", got, produced, expAmount)
	}
}

// batchLog is what a run's log says about its batches.
type batchLog struct {
	started, committed int
	last               int64 // id of the last batch started (0: none)
	open               bool  // the last batch started has no commit line
}

var batchLineRE = regexp.MustCompile(`msg="batch (started|committed)" batch=(\d+)`)

// parseBatchLog reads the slog text lines `msg="batch started" batch=N` and
// `msg="batch committed" batch=N`.
func parseBatchLog(log string) batchLog {
	var st batchLog
	committed := map[int64]bool{}
	for _, m := range batchLineRE.FindAllStringSubmatch(log, -1) {
		id, _ := strconv.ParseInt(m[2], 10, 64)
		if m[1] == "started" {
			st.started++
			st.last = id
		} else {
			st.committed++
			committed[id] = true
		}
	}
	st.open = st.last != 0 && !committed[st.last]
	return st
}

// TestParseBatchLog makes sure the mid-batch detector can say yes and no.
func TestParseBatchLog(t *testing.T) {
	const (
		claimed = `time=2026-01-01T00:00:00.000Z level=INFO msg="job claimed" job=j epoch=3` + "\n"
		start1  = `time=2026-01-01T00:00:00.001Z level=DEBUG msg="batch started" batch=11 partitions=4 offsets=20000` + "\n"
		commit1 = `time=2026-01-01T00:00:00.030Z level=INFO msg="batch committed" batch=11 partitions=4 records=20000` + "\n"
		start2  = `time=2026-01-01T00:00:00.201Z level=DEBUG msg="batch started" batch=12 partitions=4 offsets=20000` + "\n"
		cut     = `time=2026-01-01T00:00:00.230Z level=INFO msg="batch comm`
	)
	for _, c := range []struct {
		name string
		log  string
		want batchLog
	}{
		{"killed at start-up", claimed, batchLog{}},
		{"killed inside the first batch", claimed + start1, batchLog{started: 1, last: 11, open: true}},
		{"killed between batches", claimed + start1 + commit1, batchLog{started: 1, committed: 1, last: 11}},
		{"killed inside the second batch", claimed + start1 + commit1 + start2, batchLog{started: 2, committed: 1, last: 12, open: true}},
		{"killed while logging the commit", claimed + start1 + commit1 + start2 + cut, batchLog{started: 2, committed: 1, last: 12, open: true}},
	} {
		if got := parseBatchLog(c.log); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// checkCrashPerKey compares every key's totals with a replay of the first
// produced events of the sequence.
func checkCrashPerKey(t *testing.T, w *writers.SQL, job string, produced int64) {
	t.Helper()
	want := map[string]event.Total{}
	g := event.NewGenerator(crashSeed, crashKeys)
	for range produced {
		_, k, a := g.Next()
		tt := want[k]
		tt.Events++
		tt.Amount += a
		want[k] = tt
	}
	rows, err := w.DB().Query(`SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	bad := 0
	for rows.Next() {
		var got event.Total
		if err := rows.Scan(&got.Key, &got.Events, &got.Amount); err != nil {
			t.Fatal(err)
		}
		wt := want[got.Key]
		delete(want, got.Key)
		if got.Events != wt.Events || got.Amount != wt.Amount {
			if bad++; bad <= 10 {
				t.Errorf("key %q: sink events=%d amount=%d, want %d and %d", got.Key, got.Events, got.Amount, wt.Events, wt.Amount)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if bad++; bad <= 10 {
			t.Errorf("key %q: missing in the sink", k)
		}
	}
	if bad > 10 {
		t.Errorf("%d keys differ in all", bad)
	}
}
