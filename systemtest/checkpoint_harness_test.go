package systemtest

// End-to-end crash tests of `microbatch run --strategy checkpoint`: real
// SIGKILLs (at random moments, held inside checkpoints, and at each named
// crash point) and restarts against real servers, then a comparison of the
// sink with what was produced, record by record.
//
// While runs are killed a feeder keeps adding events to the input, so
// every run has records in its open sink transactions when it dies. Whether
// a kill landed in an open or pre-committed transaction is read from the
// sink right after the kill (Kafka: last stable offset below the high-water
// mark; files: files in .pending; XA: prepared branches in XA RECOVER;
// write-ahead: checkpointed writes not applied yet), and whether it landed
// inside a checkpoint from the run's log — not assumed.

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// Checkpoint crash test parameters. The input is the crash tests' event
// sequence (crashSeed, crashKeys), so the expected output of every event —
// its key's running count and total — is known without reading the input.
const (
	ckptInterval   = 200 * time.Millisecond
	ckptOperators  = 2
	ckptInitial    = 20_000 // events in the input before the first run
	ckptFeedRate   = 5000   // events/s the feeder adds while runs are killed
	ckptFeedChunk  = 1000   // events per producer of the feeder
	ckptMinDelay   = 150 * time.Millisecond
	ckptMaxDelay   = 1500 * time.Millisecond
	ckptEarlyDelay = 50 * time.Millisecond // early kills: 1 to 10 times this after the start
	// A held kill lets the rest of the run go on for up to ckptMaxHoldLag
	// after one sink task stopped at after-precommit.
	ckptMaxHoldLag = 300 * time.Millisecond
	// ckptHoldTries bounds the runs a held kill takes to leave a
	// transaction with records in the sink (alignInTxn).
	ckptHoldTries = 5
	// ckptAlignTries bounds the checkpoints checkpoint_memory_test tries
	// to stop a run after one completed and committed files.
	ckptAlignTries = 20
	// ckptPointTries bounds the runs a crash point that must leave a
	// transaction with records in the sink (mustLand) takes to do so.
	ckptPointTries = 5
)

const (
	// crashHoldMarker starts the line a crash point held by
	// MICROBATCH_CRASH_SIGNAL=HOLD writes (cmd/microbatch).
	crashHoldMarker     = "crash point reached: holding"
	ckptTriggeredMarker = `msg="checkpoint triggered"`
	ckptCompletedMarker = `msg="checkpoint completed"`
)

// ckptPointN is how often each crash point is reached per checkpoint with
// 4 input partitions and ckptOperators sink subtasks: after-barrier once
// per source, after-precommit once per sink, mid-commit once per sink
// commit. crashPoint arms the point for a random task's reach in the 2nd
// to 4th checkpoint of the run.
var ckptPointN = map[string]int{
	strategies.CrashAfterBarrier:                crashPartitions,
	strategies.CrashAfterPrecommit:              ckptOperators,
	strategies.CrashAfterCheckpointBeforeCommit: 1,
	strategies.CrashMidCommit:                   ckptOperators,
}

// ckptLog is what a run's log says about its checkpoints.
type ckptLog struct {
	started              bool  // recovery done: "job started" logged
	from                 int64 // the checkpoint it resumed from
	triggered, completed int
	last                 int64 // the last checkpoint triggered (0: none)
	open                 bool  // the last checkpoint triggered did not complete
	records              int64 // records of the completed checkpoints
}

var (
	ckptLineRE    = regexp.MustCompile(`msg="checkpoint (triggered|completed)" checkpoint=(\d+)(?: records=(\d+))?`)
	ckptStartedRE = regexp.MustCompile(`msg="job started" .*\bcheckpoint=(\d+)`)
)

func parseCheckpointLog(log string) ckptLog {
	var st ckptLog
	if m := ckptStartedRE.FindStringSubmatch(log); m != nil {
		st.started = true
		st.from, _ = strconv.ParseInt(m[1], 10, 64)
	}
	completed := map[int64]bool{}
	for _, m := range ckptLineRE.FindAllStringSubmatch(log, -1) {
		id, _ := strconv.ParseInt(m[2], 10, 64)
		if m[1] == "triggered" {
			st.triggered++
			st.last = id
			continue
		}
		st.completed++
		completed[id] = true
		n, _ := strconv.ParseInt(m[3], 10, 64)
		st.records += n
	}
	st.open = st.last != 0 && !completed[st.last]
	return st
}

// TestCheckpointParseLog makes sure the mid-checkpoint detector can say yes
// and no.
func TestCheckpointParseLog(t *testing.T) {
	const (
		started = `time=2026-01-01T00:00:00.000Z level=INFO msg="job started" job=j strategy=checkpoint guarantee=exactly-once topic=t partitions=4 operators=2 checkpoint=41 state=s sink="files in /x (temp file + rename)"` + "\n"
		trig42  = `time=2026-01-01T00:00:00.200Z level=DEBUG msg="checkpoint triggered" checkpoint=42` + "\n"
		done42  = `time=2026-01-01T00:00:00.230Z level=INFO msg="checkpoint completed" checkpoint=42 records=977 dead_letters=0 records_per_sec=4885 lag=3 duration=30ms save=2ms` + "\n"
		trig43  = `time=2026-01-01T00:00:00.400Z level=DEBUG msg="checkpoint triggered" checkpoint=43` + "\n"
		cut     = `time=2026-01-01T00:00:00.430Z level=INFO msg="checkpoint compl`
	)
	for _, c := range []struct {
		name string
		log  string
		want ckptLog
	}{
		{"killed in recovery", "", ckptLog{}},
		{"killed before the first checkpoint", started, ckptLog{started: true, from: 41}},
		{"killed inside a checkpoint", started + trig42, ckptLog{started: true, from: 41, triggered: 1, last: 42, open: true}},
		{"killed between checkpoints", started + trig42 + done42, ckptLog{started: true, from: 41, triggered: 1, completed: 1, last: 42, records: 977}},
		{"killed while logging the completion", started + trig42 + done42 + trig43 + cut, ckptLog{started: true, from: 41, triggered: 2, completed: 1, last: 43, open: true, records: 977}},
	} {
		if got := parseCheckpointLog(c.log); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

// ckptWant is what the output record of one event must say.
type ckptWant struct {
	key                  string
	amount, count, total int64
}

// ckptExpected replays the first n events of the crash sequence: event i's
// key, amount, and its key's running count and total after it. Each key
// lives on one input partition, where its events are in id order, so this
// is the order in which the keyed operator sees them.
func ckptExpected(n int64) []ckptWant {
	g := event.NewGenerator(crashSeed, crashKeys)
	run := map[string][2]int64{}
	out := make([]ckptWant, n)
	for range n {
		id, k, a := g.Next()
		r := run[k]
		r[0]++
		r[1] += a
		run[k] = r
		out[id] = ckptWant{k, a, r[0], r[1]}
	}
	return out
}

// outputCheck is how a sink's output compares with the input.
type outputCheck struct {
	records, duplicates, losses int64
	wrong                       int64 // key, amount, count or total differ from the replay
	unordered                   int64 // a key's count/total does not continue its previous record
}

// checkOutputs compares output records (in the order a reader of the sink
// sees them: per Kafka partition, or per file) with the replay want: every
// id exactly once, with the right running totals, and each key's records in
// order 1, 2, 3, … with totals that add up.
func checkOutputs(t *testing.T, what string, outs []event.Output, want []ckptWant) outputCheck {
	t.Helper()
	var c outputCheck
	seen := make([]int32, len(want))
	last := map[string][2]int64{}
	report := func(format string, args ...any) {
		if c.wrong+c.unordered <= 10 {
			t.Errorf(what+": "+format, args...)
		}
	}
	for _, o := range outs {
		c.records++
		if o.ID < 0 || o.ID >= int64(len(want)) {
			c.wrong++
			report("record of id %d, which was never produced: %+v", o.ID, o)
			continue
		}
		seen[o.ID]++
		if w := want[o.ID]; o.Key != w.key || o.Amount != w.amount || o.Count != w.count || !o.Total.Equal(exact.New(w.total)) {
			c.wrong++
			report("id %d: got key %s amount %d count %d total %d, want %s %d %d %d", o.ID, o.Key, o.Amount, o.Count, o.Total, w.key, w.amount, w.count, w.total)
		}
		l := last[o.Key]
		if o.Count != l[0]+1 || !o.Total.Equal(exact.New(l[1]+o.Amount)) {
			c.unordered++
			report("key %s: id %d has count %d total %d after count %d total %d", o.Key, o.ID, o.Count, o.Total, l[0], l[1])
		}
		total, _ := o.Total.Int64() // the crash sequence's totals are far inside int64
		last[o.Key] = [2]int64{o.Count, total}
	}
	for id, n := range seen {
		switch {
		case n == 0:
			if c.losses++; c.losses <= 5 {
				t.Errorf("%s: id %d is missing", what, id)
			}
		case n > 1:
			if c.duplicates += int64(n - 1); c.duplicates <= 5 {
				t.Errorf("%s: id %d is there %d times", what, id, n)
			}
		}
	}
	if c.wrong+c.unordered > 10 {
		t.Errorf("%s: %d records with wrong totals, %d out of order in all", what, c.wrong, c.unordered)
	}
	return c
}

// ckptRNG is the kill-timing randomness; MICROBATCH_CRASH_SEED replays it.
func ckptRNG(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MICROBATCH_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("MICROBATCH_CRASH_SEED: %v", err)
		}
	}
	t.Logf("kill timing seed %d (MICROBATCH_CRASH_SEED=%d replays it)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x5eed))
}

// feeder keeps producing the crash sequence to a topic until stopped
// (kafkautil.Feeder).
type feeder struct{ f *kafkautil.Feeder }

func startFeeder(brokers, topic string, events, amount int64) *feeder {
	return &feeder{kafkautil.StartFeeder(kafkautil.ProduceOptions{
		Brokers: kafkautil.SplitBrokers(brokers), Topic: topic, Count: ckptFeedChunk,
		Keys: crashKeys, Seed: crashSeed, Rate: ckptFeedRate,
	}, event.Expected{Events: events, Amount: amount})}
}

// finish stops the feeder and returns the input's totals.
func (f *feeder) finish(t *testing.T) (events, amount int64) {
	t.Helper()
	total, err := f.f.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return total.Events, total.Amount
}

// ckptKill is one killed run.
type ckptKill struct {
	how    string        // held <point>:<reach> +<lag>, random, early, or <crash point>:<reach>
	delay  time.Duration // from the start of the run to its death
	log    ckptLog
	inTxn  bool   // the sink held a transaction of this run with records, open or pre-committed
	detail string // what the sink showed
}

// ckptHarness runs, kills and restarts one checkpoint-mode job.
type ckptHarness struct {
	t                *testing.T
	bin              string
	brokers, topic   string
	job, sink        string
	extra            []string // more run flags (--sink-mode wal, --state-backend memory)
	stateDir, logDir string
	rng              *rand.Rand
	produced, amount int64
	feed             *feeder
	// inspect looks at the sink right after a kill and reports whether it
	// holds an open or pre-committed transaction with records in it.
	// Called only when the run finished recovery, so such a transaction is
	// the killed run's.
	inspect func() (inTxn bool, detail string)
	// alignInTxn: a held kill lands only where inspect finds a
	// transaction with records too, not just inside a checkpoint.
	alignInTxn bool
	// mustLand: crash points that must leave a transaction with records
	// in the sink (requireInTxn); crashPoint runs them again until they do.
	mustLand map[string]bool
	kills    []ckptKill
	base     int64 // the checkpoint the first run started from
}

func newCkptHarness(t *testing.T, brokers, job, sink string, extra ...string) *ckptHarness {
	h := &ckptHarness{
		t: t, bin: Binary(t), brokers: brokers, topic: UniqueName(t, "ckpt-in"), job: job, sink: sink, extra: extra,
		stateDir: filepath.Join(t.TempDir(), "state"), logDir: t.TempDir(), rng: ckptRNG(t),
		inspect: func() (bool, string) { return false, "" },
	}
	h.produced, h.amount = Produce(t, brokers, h.topic, crashSeed, 0, ckptInitial)
	return h
}

func (h *ckptHarness) args(more ...string) []string {
	return slices.Concat([]string{"run", "--strategy", string(strategies.StrategyCheckpoint),
		"--brokers", h.brokers, "--topic", h.topic, "--job", h.job, "--sink", h.sink,
		"--checkpoint-interval", ckptInterval.String(), "--operator-parallelism", strconv.Itoa(ckptOperators),
		"--state-dir", h.stateDir, "--log-level", "debug"}, h.extra, more)
}

func (h *ckptHarness) startFeeder() { h.feed = startFeeder(h.brokers, h.topic, h.produced, h.amount) }

func (h *ckptHarness) stopFeeder() {
	if h.feed != nil {
		h.produced, h.amount = h.feed.finish(h.t)
		h.feed = nil
	}
}

// randomKill runs the job and SIGKILLs it. Three of four kills are held
// (heldKill): they land inside a checkpoint by construction. Every other
// of the rest comes early, most often during start-up and recovery (which
// commits the pending transactions of the latest checkpoint), so that a
// recovery is itself interrupted and must be redone; the others come after
// a random delay, wherever the run is.
func (h *ckptHarness) randomKill() ckptKill {
	n := len(h.kills) + 1
	delay := ckptMinDelay + time.Duration(h.rng.Int64N(int64(ckptMaxDelay-ckptMinDelay)+1))
	switch {
	case n%4 != 0:
		return h.heldKill()
	case n%8 == 4:
		return h.killAfter("early", stopPlan{delay: ckptEarlyDelay + time.Duration(h.rng.Int64N(int64(ckptEarlyDelay)*9))})
	}
	return h.killAfter("random", stopPlan{delay: delay})
}

// heldKill runs the job with one sink task held at after-precommit in the
// 2nd to 4th checkpoint (MICROBATCH_CRASH_SIGNAL=HOLD: that task blocks,
// the rest of the run goes on), and SIGKILLs it a random lag of up to
// ckptMaxHoldLag later. The held checkpoint can't complete, so the kill
// lands inside it by construction — however late a busy machine lets the
// test read the run's log — while the other tasks are wherever the lag
// left them: reading the next records, aligning, pre-committing their own
// part or writing into the next transaction. With alignInTxn a kill whose
// sink holds no transaction with records (none arrived in that
// checkpoint) is run again, ckptHoldTries times at most.
func (h *ckptHarness) heldKill() ckptKill {
	per := ckptPointN[strategies.CrashAfterPrecommit]
	for try := 1; ; try++ {
		reach := per*(1+h.rng.IntN(3)) + 1 + h.rng.IntN(per)
		lag := time.Duration(h.rng.Int64N(int64(ckptMaxHoldLag) + 1))
		k := h.killAfter(fmt.Sprintf("held %s:%d +%dms", strategies.CrashAfterPrecommit, reach, lag.Milliseconds()), stopPlan{
			env:    []string{fmt.Sprintf("MICROBATCH_CRASH_AT=%s:%d", strategies.CrashAfterPrecommit, reach), "MICROBATCH_CRASH_SIGNAL=HOLD"},
			marker: crashHoldMarker, lag: lag,
		})
		if !k.log.open {
			h.t.Errorf("kill %d (%s) did not land inside a checkpoint, though a sink task held it open (log %s)", len(h.kills), k.how, h.logDir)
		}
		if !h.alignInTxn || k.inTxn || try == ckptHoldTries {
			return k
		}
		h.t.Logf("the held kill left no transaction with records in the sink: again")
	}
}

// killAfter runs the job and SIGKILLs it as plan says.
func (h *ckptHarness) killAfter(how string, plan stopPlan) ckptKill {
	t := h.t
	n := len(h.kills) + 1
	logPath := filepath.Join(h.logDir, fmt.Sprintf("run-%02d.log", n))
	start := time.Now()
	ps, tries := stopRunAt(t, h.bin, h.args(), logPath, plan, syscall.SIGKILL)
	if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("run %d ended with %v, not by our SIGKILL (log %s)", n, ps, logPath)
	}
	if tries > 1 {
		how = fmt.Sprintf("%s, try %d", how, tries)
	}
	return h.record(how, time.Since(start), logPath)
}

// crashPoint runs the job with MICROBATCH_CRASH_AT armed for a reach of
// point by a random task of the 2nd to 4th checkpoint of the run, and
// waits for the run to kill itself there. A point in mustLand whose crash
// left no transaction with records in the sink (no record arrived in that
// checkpoint in time) missed its window: it is run again, ckptPointTries
// times at most.
func (h *ckptHarness) crashPoint(point string) ckptKill {
	for try := 1; ; try++ {
		k := h.crashPointOnce(point)
		if !h.mustLand[point] || k.inTxn || try == ckptPointTries {
			return k
		}
		h.t.Logf("the crash at %s left no transaction with records in the sink: again", k.how)
	}
}

// requireLanding makes crashPoint run each of points until its crash
// leaves a transaction with records in the sink, and checks at the end
// (requireInTxn) that one did.
func (h *ckptHarness) requireLanding(points ...string) {
	if h.mustLand == nil {
		h.mustLand = map[string]bool{}
	}
	for _, p := range points {
		h.mustLand[p] = true
	}
}

func (h *ckptHarness) crashPointOnce(point string) ckptKill {
	t := h.t
	per := ckptPointN[point]
	reach := per*(1+h.rng.IntN(3)) + 1 + h.rng.IntN(per)
	if point == strategies.CrashAfterCheckpointBeforeCommit {
		reach = 2 + h.rng.IntN(3)
	}
	n := len(h.kills) + 1
	logPath := filepath.Join(h.logDir, fmt.Sprintf("run-%02d-%s.log", n, point))
	start := time.Now()
	r := Run(t, h.logDir, Env(fmt.Sprintf("MICROBATCH_CRASH_AT=%s:%d", point, reach)), 3*time.Minute, h.args()...)
	if err := os.WriteFile(logPath, []byte(r.Stderr), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.Code != -1 {
		t.Fatalf("run %d was not killed at %s:%d (exit %d): the point was never reached\n%s", n, point, reach, r.Code, r)
	}
	return h.record(fmt.Sprintf("%s:%d", point, reach), time.Since(start), logPath)
}

func (h *ckptHarness) record(how string, delay time.Duration, logPath string) ckptKill {
	t := h.t
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	k := ckptKill{how: how, delay: delay, log: parseCheckpointLog(string(log))}
	where := "killed in start-up/recovery"
	if k.log.started {
		k.inTxn, k.detail = h.inspect()
		// Checkpoint ids start at the clock: show them relative to the
		// first run's.
		if h.base == 0 {
			h.base = k.log.from
		}
		where = fmt.Sprintf("from checkpoint +%d, triggered %d, completed %d (%d records)", k.log.from-h.base, k.log.triggered, k.log.completed, k.log.records)
		if k.log.open {
			where += fmt.Sprintf(", killed inside checkpoint +%d", k.log.last-h.base)
		}
	}
	h.kills = append(h.kills, k)
	t.Logf("kill %2d %-34s after %4dms: %s; in txn=%v %s", len(h.kills), how, delay.Milliseconds(), where, k.inTxn, k.detail)
	return k
}

// drain stops the feeder and runs the job until idle; it returns the
// final run's log.
func (h *ckptHarness) drain() string {
	t := h.t
	h.stopFeeder()
	start := time.Now()
	r := Run(t, h.logDir, nil, 5*time.Minute, h.args("--until-idle", "2s")...)
	if r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	st := parseCheckpointLog(r.Stderr)
	t.Logf("final run: from checkpoint +%d, %d checkpoints, %d records, %s", st.from-h.base, st.completed, st.records, time.Since(start).Round(time.Millisecond))
	return r.Stderr
}

// verify runs `microbatch verify --strategy checkpoint` and returns the
// duplicates and losses it printed; it fails the test unless the sink is
// exact.
func (h *ckptHarness) verify() (dups, losses int64) {
	t := h.t
	v := Run(t, h.logDir, nil, time.Minute, "verify", "--strategy", string(strategies.StrategyCheckpoint), "--sink", h.sink, "--job", h.job,
		"--expect-events", strconv.FormatInt(h.produced, 10), "--expect-amount", strconv.FormatInt(h.amount, 10))
	dups, losses = count(t, duplicatesRE, v.Stdout), count(t, lossesRE, v.Stdout)
	if v.Code != 0 || dups != 0 || losses != 0 || !strings.Contains(v.Stdout, "OK") {
		t.Errorf("microbatch verify: %s", v)
	}
	return dups, losses
}

// ckptKillSummary counts what the kills hit.
type ckptKillSummary struct {
	random, held, points     int
	inRecovery               int // killed before recovery finished
	midCheckpoint            int // of the random and held kills
	heldMid                  int
	inTxn                    int // of the random and held kills
	pointsInTxn, pointsMidCk int
}

func (h *ckptHarness) summary() ckptKillSummary {
	var s ckptKillSummary
	for _, k := range h.kills {
		point := strings.Contains(k.how, ":") && !strings.HasPrefix(k.how, "held")
		switch {
		case point:
			s.points++
			if k.inTxn {
				s.pointsInTxn++
			}
			if k.log.open {
				s.pointsMidCk++
			}
			continue
		case strings.HasPrefix(k.how, "held"):
			s.held++
			if k.log.open {
				s.heldMid++
			}
		default: // random, early
			s.random++
		}
		if !k.log.started {
			s.inRecovery++
		}
		if k.log.open {
			s.midCheckpoint++
		}
		if k.inTxn {
			s.inTxn++
		}
	}
	h.t.Logf("%d random kills (%d held in a checkpoint) + %d crash points: %d killed in recovery, %d inside a checkpoint (%d of the held), %d with a transaction of theirs open in the sink; crash points: %d in a transaction, %d inside a checkpoint",
		s.random+s.held, s.held, s.points, s.inRecovery, s.midCheckpoint, s.heldMid, s.inTxn, s.pointsInTxn, s.pointsMidCk)
	return s
}

// requireInTxn fails the test if no crash at one of the points (see
// requireLanding) left a transaction with records in the sink: the crash
// missed its window every time.
func (h *ckptHarness) requireInTxn() {
	for _, p := range slices.Sorted(maps.Keys(h.mustLand)) {
		var missed []string
		landed := false
		for _, k := range h.kills {
			if strings.HasPrefix(k.how, p+":") {
				if k.inTxn {
					landed = true
				} else {
					missed = append(missed, k.how+" "+k.detail)
				}
			}
		}
		if !landed {
			h.t.Errorf("no crash at %s left a transaction with records in the sink: %v missed their window (logs in %s)", p, missed, h.logDir)
		}
	}
}

// kafkaInspect: a transaction left open (or pre-committed) with records
// holds a partition's last stable offset below its high-water mark.
func kafkaInspect(t *testing.T, brokers, topic string) func() (bool, string) {
	return func() (bool, string) {
		lso, hwm := kafkaOffsets(t, brokers, topic)
		var behind, parts int64
		for p := range hwm {
			if d := hwm[p] - lso[p]; d > 0 {
				behind += d
				parts++
			}
		}
		return behind > 0, fmt.Sprintf("(output: %d offsets above the last stable offset in %d partitions)", behind, parts)
	}
}

// xaInspect: XA RECOVER lists the job's prepared branches.
func xaInspect(t *testing.T, w *sqlsink.Writer, job string) func() (bool, string) {
	return func() (bool, string) {
		rows, err := w.DB().QueryContext(t.Context(), "XA RECOVER")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var mine []string
		for rows.Next() {
			var format, glen, blen int64
			var data []byte
			if err := rows.Scan(&format, &glen, &blen, &data); err != nil {
				t.Fatal(err)
			}
			if glen >= 0 && glen+blen == int64(len(data)) && string(data[glen:]) == job {
				mine = append(mine, string(data[:glen]))
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(mine)
		return len(mine) > 0, fmt.Sprintf("(XA RECOVER: %d prepared %v)", len(mine), mine)
	}
}

// walInspect: the write-ahead sink's open work after a crash is the
// latest checkpoint's buffered writes that mb_wal_commits says were not
// applied yet (recovery must apply them).
func walInspect(t *testing.T, w *sqlsink.Writer, stateDir, job string) func() (bool, string) {
	return func() (bool, string) {
		store, err := offsets.NewFileCheckpoints(stateDir, 0)
		if err != nil {
			t.Fatal(err)
		}
		chk, err := store.Latest(t.Context(), job)
		if err != nil {
			t.Fatal(err)
		}
		if chk == nil {
			return false, "(no checkpoint yet)"
		}
		var data struct {
			Pending []writers.Pending `json:"pending"`
		}
		if err := json.Unmarshal(chk.Data, &data); err != nil {
			t.Fatal(err)
		}
		var unapplied, bytes int
		for _, p := range data.Pending {
			var done int64
			err := w.DB().QueryRowContext(t.Context(), `SELECT checkpoint_id FROM `+sqlsink.WALTable+` WHERE job = ? AND subtask = ?`, job, p.Subtask).Scan(&done)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				t.Fatal(err)
			}
			if p.Txn > done {
				unapplied++
				bytes += len(p.Data)
			}
		}
		return unapplied > 0, fmt.Sprintf("(checkpoint %d: %d of %d write-ahead entries not applied, %d bytes)", chk.ID, unapplied, len(data.Pending), bytes)
	}
}

// shortJob is a job name short enough for an XA branch qualifier.
func shortJob(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, nameSeq.Add(1))
}
