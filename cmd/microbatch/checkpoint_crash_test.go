package main_test

// End-to-end crash tests of `microbatch run --strategy checkpoint`: real
// SIGKILLs (at random moments, aligned on checkpoints, and at each named
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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// Checkpoint crash test parameters. The input is the crash tests' event
// sequence (crashSeed, crashKeys), so the expected output of every event —
// its key's running count and total — is known without reading the input.
const (
	ckptInterval    = 200 * time.Millisecond
	ckptOperators   = 2
	ckptInitial     = 20_000 // events in the input before the first run
	ckptFeedRate    = 5000   // events/s the feeder adds while runs are killed
	ckptFeedChunk   = 1000   // events per producer of the feeder
	ckptMinDelay    = 150 * time.Millisecond
	ckptMaxDelay    = 1500 * time.Millisecond
	ckptMaxAlignLag = 10 * time.Millisecond
	ckptEarlyDelay  = 50 * time.Millisecond // early kills: 1 to 10 times this after the start
	// ckptAlignTries bounds the checkpoints an aligned kill tries before
	// it kills where it is. A checkpoint into SQLite through the
	// write-ahead sink is over in a few milliseconds, and on a busy
	// machine the test reads its first line later than that in most
	// checkpoints: each try costs one checkpoint interval.
	ckptAlignTries = 20
	// ckptPointTries bounds the runs a crash point that must leave a
	// transaction with records in the sink (mustLand) takes to do so.
	ckptPointTries = 5
)

const (
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
	how    string        // aligned[, try n], random, early, or <crash point>:<reach>
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
	// alignInTxn: an aligned kill lands only where inspect finds a
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
		t: t, bin: binary(t), brokers: brokers, topic: uniqueName(t, "ckpt-in"), job: job, sink: sink, extra: extra,
		stateDir: filepath.Join(t.TempDir(), "state"), logDir: t.TempDir(), rng: ckptRNG(t),
		inspect: func() (bool, string) { return false, "" },
	}
	h.produced, h.amount = produceCLI(t, brokers, h.topic, crashSeed, 0, ckptInitial)
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

// randomKill runs the job and SIGKILLs it after a random delay; three of
// four kills then wait for the next "checkpoint triggered" line and a few
// milliseconds more, stop the run there and kill it if it is inside that
// checkpoint (and, with alignInTxn, holds a transaction with records in
// the sink) — else they let it go on to the next checkpoint,
// ckptAlignTries times at most — so that they land inside a checkpoint by
// construction. Every other of the rest comes early, most often during
// start-up and recovery (which commits the pending transactions of the
// latest checkpoint), so that a recovery is itself interrupted and must be
// redone.
func (h *ckptHarness) randomKill() ckptKill {
	n := len(h.kills) + 1
	delay := ckptMinDelay + time.Duration(h.rng.Int64N(int64(ckptMaxDelay-ckptMinDelay)+1))
	lag := time.Duration(h.rng.Int64N(int64(ckptMaxAlignLag) + 1))
	switch {
	case n%4 != 0:
		return h.killAfter("aligned", stopPlan{delay: delay, marker: ckptTriggeredMarker, lag: lag, inside: h.landed, tries: ckptAlignTries})
	case n%8 == 4:
		return h.killAfter("early", stopPlan{delay: ckptEarlyDelay + time.Duration(h.rng.Int64N(int64(ckptEarlyDelay)*9))})
	}
	return h.killAfter("random", stopPlan{delay: delay})
}

// landed judges the log of a stopped run for an aligned kill: past
// recovery, inside a checkpoint, and with alignInTxn a transaction with
// records in the sink.
func (h *ckptHarness) landed(log string) bool {
	st := parseCheckpointLog(log)
	if !st.started || !st.open {
		return false
	}
	if h.alignInTxn {
		inTxn, _ := h.inspect()
		return inTxn
	}
	return true
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
	r := runBin(t, h.logDir, cmdEnv(fmt.Sprintf("MICROBATCH_CRASH_AT=%s:%d", point, reach)), 3*time.Minute, h.args()...)
	if err := os.WriteFile(logPath, []byte(r.stderr), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.code != -1 {
		t.Fatalf("run %d was not killed at %s:%d (exit %d): the point was never reached\n%s", n, point, reach, r.code, r)
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
	r := runBin(t, h.logDir, nil, 5*time.Minute, h.args("--until-idle", "2s")...)
	if r.code != 0 {
		t.Fatalf("final run: %s", r)
	}
	st := parseCheckpointLog(r.stderr)
	t.Logf("final run: from checkpoint +%d, %d checkpoints, %d records, %s", st.from-h.base, st.completed, st.records, time.Since(start).Round(time.Millisecond))
	return r.stderr
}

// verify runs `microbatch verify --strategy checkpoint` and returns the
// duplicates and losses it printed; it fails the test unless the sink is
// exact.
func (h *ckptHarness) verify() (dups, losses int64) {
	t := h.t
	v := runBin(t, h.logDir, nil, time.Minute, "verify", "--strategy", string(strategies.StrategyCheckpoint), "--sink", h.sink, "--job", h.job,
		"--expect-events", strconv.FormatInt(h.produced, 10), "--expect-amount", strconv.FormatInt(h.amount, 10))
	dups, losses = count(t, duplicatesRE, v.stdout), count(t, lossesRE, v.stdout)
	if v.code != 0 || dups != 0 || losses != 0 || !strings.Contains(v.stdout, "OK") {
		t.Errorf("microbatch verify: %s", v)
	}
	return dups, losses
}

// ckptKillSummary counts what the kills hit.
type ckptKillSummary struct {
	random, aligned, points  int
	inRecovery               int // killed before recovery finished
	midCheckpoint            int // of the random and aligned kills
	alignedMid               int
	inTxn                    int // of the random and aligned kills
	pointsInTxn, pointsMidCk int
}

func (h *ckptHarness) summary() ckptKillSummary {
	var s ckptKillSummary
	for _, k := range h.kills {
		point := strings.Contains(k.how, ":")
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
		case strings.HasPrefix(k.how, "aligned"):
			s.aligned++
			if k.log.open {
				s.alignedMid++
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
	h.t.Logf("%d random kills (%d aligned on a checkpoint) + %d crash points: %d killed in recovery, %d inside a checkpoint (%d of the aligned), %d with a transaction of theirs open in the sink; crash points: %d in a transaction, %d inside a checkpoint",
		s.random+s.aligned, s.aligned, s.points, s.inRecovery, s.midCheckpoint, s.alignedMid, s.inTxn, s.pointsInTxn, s.pointsMidCk)
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

// --- Kafka ------------------------------------------------------------------

// kafkaOffsets returns each partition's last stable offset (read-committed
// end) and high-water mark.
func kafkaOffsets(t *testing.T, brokers, topic string) (lso, hwm map[int32]int64) {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("ckpt-test-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bounds, err := src.Bounds(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lso, hwm = map[int32]int64{}, map[int32]int64{}
	for p, b := range bounds {
		lso[p] = b.End
		if hwm[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatal(err)
		}
	}
	return lso, hwm
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

// kafkaRecord is one output record and where it is.
type kafkaRecord struct {
	part int32
	off  int64
	out  event.Output
}

func decodeOutput(t *testing.T, value []byte) event.Output {
	t.Helper()
	var o event.Output
	if err := json.Unmarshal(value, &o); err != nil {
		t.Fatalf("output record %q: %v", value, err)
	}
	return o
}

func outputsOf(recs []kafkaRecord) []event.Output {
	outs := make([]event.Output, len(recs))
	for i, r := range recs {
		outs[i] = r.out
	}
	return outs
}

// rawRecord is one record's offset and value.
type rawRecord struct {
	off   int64
	value []byte
}

// readTopicCommitted reads every partition of topic read-committed, from
// the log start to the last stable offset, all partitions at once, and
// returns each partition's records in offset order.
func readTopicCommitted(t *testing.T, brokers, topic string) map[int32][]rawRecord {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("ckpt-test-committed"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bounds, err := src.Bounds(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		out  = map[int32][]rawRecord{}
		errs []error
		wg   sync.WaitGroup
	)
	for _, p := range src.Partitions() {
		r := record.Range{Topic: topic, Partition: p, From: bounds[p].Start, To: bounds[p].End}
		if r.Len() == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var recs []rawRecord
			err := src.Read(t.Context(), r, func(rec *batch.Record) error {
				recs = append(recs, rawRecord{rec.Offset, slices.Clone(rec.Value)})
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			out[p] = recs
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("reading %s read-committed: %v", topic, errs)
	}
	return out
}

// readCommitted reads the output topic read-committed, up to the last
// stable offset, partition after partition.
func readCommitted(t *testing.T, brokers, topic string) []kafkaRecord {
	t.Helper()
	parts := readTopicCommitted(t, brokers, topic)
	var out []kafkaRecord
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		for _, r := range parts[p] {
			out = append(out, kafkaRecord{p, r.off, decodeOutput(t, r.value)})
		}
	}
	return out
}

// readUncommitted reads every data record of topic read-uncommitted, the
// records of aborted and open transactions included, up to the high-water
// mark. The consumer skips transaction markers, so a partition whose log
// ends in markers is done once nothing arrives for a second and at most a
// few offsets (markers) are left.
func readUncommitted(t *testing.T, brokers, topic string) []kafkaRecord {
	t.Helper()
	conf := kafkautil.Config("ckpt-test-uncommitted")
	conf.Consumer.IsolationLevel = sarama.ReadUncommitted
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), conf)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	const maxTailMarkers = 16 // more than the transactions that can be open on a partition at once
	var (
		mu   sync.Mutex
		out  []kafkaRecord
		errs []string
		wg   sync.WaitGroup
	)
	for _, p := range parts {
		hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if hwm == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pc.Close()
			var mine []kafkaRecord
			last := int64(-1)
			quiet := time.NewTimer(time.Second)
			defer quiet.Stop()
			// A bound on a stall, not on the whole read: on a busy
			// machine tens of thousands of records take a while.
			stall := time.NewTimer(time.Minute)
			defer stall.Stop()
			fail := func(format string, args ...any) {
				mu.Lock()
				errs = append(errs, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
		loop:
			for last < hwm-1 {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						fail("%s/%d: consumer closed at %d of %d", topic, p, last, hwm)
						return
					}
					var o event.Output
					if err := json.Unmarshal(m.Value, &o); err != nil {
						fail("%s/%d@%d: %q: %v", topic, p, m.Offset, m.Value, err)
						return
					}
					mine = append(mine, kafkaRecord{p, m.Offset, o})
					last = m.Offset
					quiet.Reset(time.Second)
					stall.Reset(time.Minute)
				case e, ok := <-pc.Errors():
					if ok {
						fail("%s/%d: %v", topic, p, e)
						return
					}
				case <-quiet.C:
					if hwm-1-last <= maxTailMarkers {
						break loop
					}
					quiet.Reset(time.Second)
				case <-stall.C:
					fail("%s/%d: no record for a minute after offset %d of %d", topic, p, last, hwm)
					return
				}
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("reading %s read-uncommitted: %s", topic, strings.Join(errs, "; "))
	}
	return out
}

// liveReader is a read-committed consumer of the output that runs while
// the job is killed and restarted, as a downstream application would, and
// counts every id it is given twice.
type liveReader struct {
	client   sarama.Client
	consumer sarama.Consumer
	stopc    chan struct{}
	wg       sync.WaitGroup

	mu       sync.Mutex
	seen     map[int64]bool
	records  int64
	dups     int64
	firstDup string
	errs     []string
}

func startLiveReader(t *testing.T, brokers, topic string) *liveReader {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("ckpt-test-live"))
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	l := &liveReader{client: client, consumer: consumer, stopc: make(chan struct{}), seen: map[int64]bool{}}
	parts, err := client.Partitions(topic)
	if err != nil {
		l.stop()
		t.Fatal(err)
	}
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			l.stop()
			t.Fatal(err)
		}
		l.wg.Add(1)
		go l.read(pc)
	}
	return l
}

func (l *liveReader) read(pc sarama.PartitionConsumer) {
	defer l.wg.Done()
	defer pc.Close()
	for {
		select {
		case <-l.stopc:
			return
		case m, ok := <-pc.Messages():
			if !ok {
				return
			}
			var o event.Output
			err := json.Unmarshal(m.Value, &o)
			l.mu.Lock()
			if err != nil {
				l.errs = append(l.errs, fmt.Sprintf("%s/%d@%d: %q: %v", m.Topic, m.Partition, m.Offset, m.Value, err))
			} else {
				l.records++
				if l.seen[o.ID] {
					if l.dups++; l.dups == 1 {
						l.firstDup = fmt.Sprintf("id %d again at %s/%d@%d", o.ID, m.Topic, m.Partition, m.Offset)
					}
				}
				l.seen[o.ID] = true
			}
			l.mu.Unlock()
		case e, ok := <-pc.Errors():
			if !ok {
				return
			}
			// sarama retries by itself; keep the message for the report.
			l.mu.Lock()
			l.errs = append(l.errs, e.Error())
			l.mu.Unlock()
		}
	}
}

// count is how many records the reader has been given so far.
func (l *liveReader) count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records
}

// waitFor waits until the reader has seen n distinct ids, or timeout.
func (l *liveReader) waitFor(n int64, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		have := int64(len(l.seen))
		l.mu.Unlock()
		if have >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *liveReader) stop() {
	select {
	case <-l.stopc:
		return
	default:
	}
	close(l.stopc)
	l.wg.Wait()
	l.consumer.Close()
	l.client.Close()
}

// TestCheckpointCrashKafka: Apache Kafka in, Apache Kafka out. The job is
// SIGKILLed at random (three of four kills just after a checkpoint was
// triggered) while a feeder keeps the input flowing, then at each crash
// point once, then drained. A read-committed reader of the output must see
// every input id exactly once, each key's records with counts 1, 2, 3, …
// and totals that add up; a read-uncommitted reader must see more records
// than that — the aborted transactions of the killed runs, proof that the
// kills hit open transactions; and a read-committed reader that consumed
// the output during all the kills must never have been given an id twice.
func TestCheckpointCrashKafka(t *testing.T) {
	t.Parallel()
	brokers := testutil.NeedServer(t, testutil.EnvKafka)
	start := time.Now()
	out := uniqueName(t, "ckpt-out")
	h := newCkptHarness(t, brokers, uniqueName(t, "ckpt-job"), "kafka://"+brokers+"/"+out)
	// The reader below needs the output topic before the first run makes it.
	if err := kafkautil.EnsureTopic(kafkautil.SplitBrokers(brokers), out, crashPartitions); err != nil {
		t.Fatal(err)
	}
	live := startLiveReader(t, brokers, out)
	defer live.stop()
	h.inspect = kafkaInspect(t, brokers, out)
	h.alignInTxn = true
	h.requireLanding(strategies.CrashAfterBarrier, strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit)

	h.startFeeder()
	for range crashMinKills {
		h.randomKill()
	}
	for _, p := range strategies.CheckpointCrashPoints {
		h.crashPoint(p)
	}
	liveDuring := live.count()
	h.drain()
	loopDone := time.Since(start)

	live.waitFor(h.produced, time.Minute)
	live.stop()
	committed := readCommitted(t, brokers, out)
	c := checkOutputs(t, "read-committed output", outputsOf(committed), ckptExpected(h.produced))
	uncommitted := readUncommitted(t, brokers, out)
	dups, losses := h.verify()
	s := h.summary()
	t.Logf("produced %d events (amount %d); read-committed output: %d records, %d duplicates, %d losses, %d wrong totals, %d out of order; verify: %d duplicates, %d losses",
		h.produced, h.amount, c.records, c.duplicates, c.losses, c.wrong, c.unordered, dups, losses)
	t.Logf("read-uncommitted output: %d records, %d more than read-committed (records of aborted transactions)", len(uncommitted), int64(len(uncommitted))-c.records)
	t.Logf("live read-committed reader: %d records before the drain, %d in all, %d distinct ids, %d given twice; kill loop and drain took %s",
		liveDuring, live.records, len(live.seen), live.dups, loopDone.Round(time.Millisecond))

	if live.dups != 0 {
		t.Errorf("the read-committed reader running during the kills was given %d ids twice (first: %s)", live.dups, live.firstDup)
	}
	if int64(len(live.seen)) != h.produced {
		t.Errorf("the read-committed reader running during the kills saw %d distinct ids of %d produced (errors: %v)", len(live.seen), h.produced, live.errs)
	}
	if int64(len(uncommitted)) <= c.records {
		t.Errorf("read-uncommitted sees %d records, read-committed %d: no aborted transaction, so no kill hit an open one (logs in %s)", len(uncommitted), c.records, h.logDir)
	}
	if s.inTxn == 0 {
		t.Errorf("no random kill left a transaction with records open (logs in %s)", h.logDir)
	}
	if s.midCheckpoint == 0 {
		t.Errorf("no random kill landed inside a checkpoint (logs in %s)", h.logDir)
	}
	h.requireInTxn()
	if lso, hwm := kafkaOffsets(t, brokers, out); fmt.Sprint(lso) != fmt.Sprint(hwm) {
		t.Errorf("after the drain the output still has open transactions: last stable offsets %v, high-water marks %v", lso, hwm)
	}
}

// TestCheckpointRecoveryCommitsPrecommitted: a crash after checkpoint n is
// saved but before any sink commits it leaves checkpoint n's transactions
// pre-committed in Apache Kafka. The restart must commit them, not abort
// and not rewrite them: before the restart the read-committed output is
// exactly the input before checkpoint n-1's offsets and the records between
// n-1's and n's offsets are in the log but invisible; after it, every id is
// there once and each of those records is in the log exactly once (it was
// committed where it lay, not written again).
func TestCheckpointRecoveryCommitsPrecommitted(t *testing.T) {
	t.Parallel()
	brokers := testutil.NeedServer(t, testutil.EnvKafka)
	out := uniqueName(t, "ckpt-out")
	h := newCkptHarness(t, brokers, uniqueName(t, "ckpt-job"), "kafka://"+brokers+"/"+out)

	// Where checkpoints put the input.
	chkOf := func(id int64) *offsets.Checkpoint {
		b, err := os.ReadFile(filepath.Join(h.stateDir, h.job, fmt.Sprintf("chk-%012d.json", id)))
		if err != nil {
			t.Fatal(err)
		}
		var c offsets.Checkpoint
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	store, err := offsets.NewFileCheckpoints(h.stateDir, 0)
	if err != nil {
		t.Fatal(err)
	}

	h.startFeeder() // records in (nearly) every checkpoint
	// Killed after the run's third checkpoint was saved. A checkpoint into
	// which no record arrived (the feeder is slow on a busy machine)
	// proves nothing: then the job is run again — its recovery commits
	// that checkpoint — and killed at its own third, ckptPointTries times
	// at most.
	var (
		latest, prev *offsets.Checkpoint
		data         struct {
			Pending []writers.Pending `json:"pending"`
		}
	)
	for try := 1; ; try++ {
		r := runBin(t, h.logDir, cmdEnv("MICROBATCH_CRASH_AT="+strategies.CrashAfterCheckpointBeforeCommit+":3"), 3*time.Minute, h.args()...)
		if r.code != -1 {
			t.Fatalf("the run was not killed at %s (exit %d)\n%s", strategies.CrashAfterCheckpointBeforeCommit, r.code, r)
		}
		if latest, err = store.Latest(t.Context(), h.job); err != nil || latest == nil {
			t.Fatalf("no latest checkpoint (err %v)", err)
		}
		// Checkpoint n is the one the crash left uncommitted (saved, its
		// completion not logged yet); ids go up by one.
		if st := parseCheckpointLog(r.stderr); st.completed != 2 || st.last != latest.ID || !st.open {
			t.Fatalf("the run's log has %d checkpoints completed, the last triggered %d; the latest saved is %d\n%s", st.completed, st.last, latest.ID, r.stderr)
		}
		if err := json.Unmarshal(latest.Data, &data); err != nil {
			t.Fatal(err)
		}
		prev = chkOf(latest.ID - 1)
		records := sum(latest.Offsets) - sum(prev.Offsets)
		if records > 0 && len(data.Pending) > 0 {
			break
		}
		if try == ckptPointTries {
			t.Fatalf("checkpoint %d holds no records (pending %v) at all %d tries: the crash proves nothing", latest.ID, data.Pending, try)
		}
		t.Logf("checkpoint %d holds %d records (pending %v): again", latest.ID, records, data.Pending)
	}
	h.stopFeeder()
	n := latest.ID
	// The input's ids by position.
	idAt := map[int32]map[int64]int64{}
	for _, rec := range readInput(t, brokers, h.topic) {
		if idAt[rec.part] == nil {
			idAt[rec.part] = map[int64]int64{}
		}
		idAt[rec.part][rec.off] = rec.id
	}
	before, pending := map[int64]bool{}, map[int64]bool{}
	for p, ids := range idAt {
		for off, id := range ids {
			switch {
			case off < prev.Offsets[p]:
				before[id] = true
			case off < latest.Offsets[p]:
				pending[id] = true
			}
		}
	}
	t.Logf("checkpoint %d lists %d pending transactions; %d records before checkpoint %d's offsets, %d between its and checkpoint %d's",
		n, len(data.Pending), len(before), n-1, len(pending), n)
	if len(pending) == 0 || len(data.Pending) == 0 {
		t.Fatalf("checkpoint %d holds no records (pending %v): the crash proves nothing", n, data.Pending)
	}

	// Before the restart: committed = before, exactly; pending in the log, invisible.
	visible := map[int64]int{}
	for _, rec := range readCommitted(t, brokers, out) {
		visible[rec.out.ID]++
	}
	// A reader stops at the last stable offset, the first record of the
	// oldest open transaction, so committed records of checkpoint n-1 that
	// lie behind checkpoint n's in a partition are held back: the visible
	// ids are a subset of those before checkpoint n-1's offsets.
	var extra, twice, early int
	for id, c := range visible {
		if !before[id] {
			extra++
		}
		if pending[id] {
			early++
		}
		if c > 1 {
			twice++
		}
	}
	if extra != 0 || twice != 0 {
		t.Errorf("before the restart the read-committed output holds %d ids: %d not before checkpoint %d's offsets (%d of them pre-committed in checkpoint %d), %d twice",
			len(visible), extra, n-1, early, n, twice)
	}
	inLog := map[int64]int{}
	for _, rec := range readUncommitted(t, brokers, out) {
		if pending[rec.out.ID] {
			inLog[rec.out.ID]++
		}
	}
	if len(inLog) != len(pending) {
		t.Errorf("before the restart the log holds %d of checkpoint %d's %d pre-committed records", len(inLog), n, len(pending))
	}
	lso, hwm := kafkaOffsets(t, brokers, out)
	t.Logf("before the restart: %d records visible (%d of those before checkpoint %d's offsets held back behind the last stable offset); output last stable offsets %v, high-water marks %v",
		len(visible), len(before)-(len(visible)-extra), n-1, lso, hwm)
	if fmt.Sprint(lso) == fmt.Sprint(hwm) {
		t.Errorf("before the restart no transaction is open in the output: checkpoint %d's were not left pre-committed", n)
	}

	// Restarts killed early, most during the recovery that commits
	// checkpoint n's transactions: a recovery cut short must be redone,
	// committing (again) what it may already have committed.
	h.inspect = kafkaInspect(t, brokers, out)
	inRecovery := 0
	for range 3 {
		if k := h.killAfter("early", stopPlan{delay: ckptEarlyDelay + time.Duration(h.rng.Int64N(int64(ckptEarlyDelay)*7))}); !k.log.started {
			inRecovery++
		}
	}
	t.Logf("%d of 3 restarts killed before their recovery finished", inRecovery)
	// The restart commits checkpoint n's transactions and goes on from n
	// (or from a later checkpoint, if one of the killed restarts got
	// that far).
	final := h.drain()
	if st := parseCheckpointLog(final); st.from < n {
		t.Errorf("the restart resumed from checkpoint %d, before %d", st.from, n)
	}
	committed := readCommitted(t, brokers, out)
	c := checkOutputs(t, "read-committed output", outputsOf(committed), ckptExpected(h.produced))
	inLog = map[int64]int{}
	for _, rec := range readUncommitted(t, brokers, out) {
		if pending[rec.out.ID] {
			inLog[rec.out.ID]++
		}
	}
	var rewritten int
	for id := range pending {
		if inLog[id] != 1 {
			rewritten++
		}
	}
	t.Logf("after the restart: %d records of %d produced, %d duplicates, %d losses; of the %d pre-committed records %d are in the log other than once",
		c.records, h.produced, c.duplicates, c.losses, len(pending), rewritten)
	if rewritten != 0 {
		t.Errorf("%d of checkpoint %d's pre-committed records are not in the log exactly once: recovery rewrote or lost them instead of committing them", rewritten, n)
	}
	h.verify()
}

// inputRecord is one input event and where it is.
type inputRecord struct {
	part int32
	off  int64
	id   int64
}

func readInput(t *testing.T, brokers, topic string) []inputRecord {
	t.Helper()
	var out []inputRecord
	var ev event.Event
	for p, recs := range readTopicCommitted(t, brokers, topic) {
		for _, r := range recs {
			if err := event.Decode(r.value, &ev); err != nil {
				t.Fatalf("input %s/%d@%d: %v", topic, p, r.off, err)
			}
			out = append(out, inputRecord{p, r.off, ev.ID})
		}
	}
	return out
}

// --- files ------------------------------------------------------------------

// fileInspect: a transaction with records is a file in .pending (created
// by its first write; until the pre-commit flushes it, the records may
// still be in the writer's buffer, so the file can be empty on disk). It
// also checks that every committed file that appeared since the last call
// is whole: lines of output JSON, ending in a newline.
func fileInspect(t *testing.T, dir string, checked map[string]bool) func() (bool, string) {
	return func() (bool, string) {
		checkCommittedFiles(t, dir, checked)
		entries, err := os.ReadDir(filepath.Join(dir, ".pending"))
		if err != nil {
			t.Fatal(err)
		}
		var files, bytes int64
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			files++
			bytes += info.Size()
		}
		return files > 0, fmt.Sprintf("(.pending: %d files, %d bytes on disk)", files, bytes)
	}
}

func checkCommittedFiles(t *testing.T, dir string, checked map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".jsonl") || checked[name] {
			continue
		}
		checked[name] = true
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Errorf("committed file %s is empty or does not end in a newline: partial", name)
			continue
		}
		for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var o event.Output
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Errorf("committed file %s line %d: %q: %v", name, i+1, line, err)
				break
			}
		}
	}
}

// fileWatcher reads the file sink's directory while the job is killed and
// restarted, as a downstream reader would: every committed file it finds
// must be whole (JSON lines ending in a newline) and stay as it was, and no
// id may be in two of them.
type fileWatcher struct {
	dir         string
	stopc, done chan struct{}

	files                          map[string]int64 // name → size when first read
	ids                            map[int64]bool
	polls, records, dups           int64
	partial, changed               int64
	firstDup, firstPartial, change string
}

func startFileWatcher(dir string) *fileWatcher {
	w := &fileWatcher{dir: dir, stopc: make(chan struct{}), done: make(chan struct{}), files: map[string]int64{}, ids: map[int64]bool{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll()
			select {
			case <-w.stopc:
				w.poll()
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *fileWatcher) poll() {
	w.polls++
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return // not made yet
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".jsonl") {
			continue
		}
		path := filepath.Join(w.dir, name)
		if size, seen := w.files[name]; seen {
			if info, err := os.Stat(path); err != nil || info.Size() != size {
				if w.changed++; w.changed == 1 {
					w.change = fmt.Sprintf("%s: %d bytes when first read, now %v (err %v)", name, size, info, err)
				}
			}
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if w.changed++; w.changed == 1 {
				w.change = fmt.Sprintf("%s: listed, then unreadable: %v", name, err)
			}
			continue
		}
		w.files[name] = int64(len(b))
		bad := func(why string) {
			if w.partial++; w.partial == 1 {
				w.firstPartial = name + ": " + why
			}
		}
		if len(b) == 0 || b[len(b)-1] != '\n' {
			bad(fmt.Sprintf("%d bytes, not ending in a newline", len(b)))
		}
		for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
			var o event.Output
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				bad(fmt.Sprintf("line %q: %v", line, err))
				break
			}
			w.records++
			if w.ids[o.ID] {
				if w.dups++; w.dups == 1 {
					w.firstDup = fmt.Sprintf("id %d again in %s", o.ID, name)
				}
			}
			w.ids[o.ID] = true
		}
	}
}

// stop ends the watcher after a last poll.
func (w *fileWatcher) stop() {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	<-w.done
}

func readFileOutputs(t *testing.T, dir, job string) []event.Output {
	t.Helper()
	var outs []event.Output
	err := writers.ReadFileSink(dir, job, func(line []byte) error {
		var o event.Output
		if err := json.Unmarshal(line, &o); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		outs = append(outs, o)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// TestCheckpointCrashFile: kfake in, file sink out; random kills and every
// crash point, with the input flowing. Every id exactly once across the
// committed files, with consistent running totals; a reader polling the
// directory during all the kills never sees a partial or changing file or
// an id twice; nothing is left in .pending after the drain.
func TestCheckpointCrashFile(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	dir := filepath.Join(t.TempDir(), "out")
	h := newCkptHarness(t, b.addr, uniqueName(t, "ckpt-job"), "file://"+dir)
	checked := map[string]bool{}
	h.inspect = fileInspect(t, dir, checked)
	h.alignInTxn = true
	h.requireLanding(strategies.CrashAfterBarrier, strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit)
	watch := startFileWatcher(dir)
	defer watch.stop()
	h.startFeeder()
	for range 8 {
		h.randomKill()
	}
	for _, p := range strategies.CheckpointCrashPoints {
		h.crashPoint(p)
	}
	h.drain()
	watch.stop()
	checkCommittedFiles(t, dir, checked)
	c := checkOutputs(t, "committed files", readFileOutputs(t, dir, h.job), ckptExpected(h.produced))
	dups, losses := h.verify()
	s := h.summary()
	t.Logf("produced %d events; committed files (%d): %d records, %d duplicates, %d losses, %d wrong totals, %d out of order; verify: %d duplicates, %d losses",
		h.produced, len(checked), c.records, c.duplicates, c.losses, c.wrong, c.unordered, dups, losses)
	t.Logf("reader polling the directory during the kills: %d polls, %d files, %d records, %d ids twice, %d partial files, %d files changed after they appeared",
		watch.polls, len(watch.files), watch.records, watch.dups, watch.partial, watch.changed)
	if watch.dups != 0 || watch.partial != 0 || watch.changed != 0 {
		t.Errorf("the reader polling during the kills saw %d ids twice (%s), %d partial files (%s), %d changed files (%s)",
			watch.dups, watch.firstDup, watch.partial, watch.firstPartial, watch.changed, watch.change)
	}
	if int64(len(watch.ids)) != h.produced {
		t.Errorf("the reader polling during the kills saw %d distinct ids of %d produced", len(watch.ids), h.produced)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, ".pending")); len(left) != 0 {
		t.Errorf("after the drain .pending still holds %d files", len(left))
	}
	if s.inTxn == 0 {
		t.Errorf("no random kill left a pending file with records (logs in %s)", h.logDir)
	}
	h.requireInTxn()
}

// --- SQL --------------------------------------------------------------------

// xaInspect: XA RECOVER lists the job's prepared branches.
func xaInspect(t *testing.T, w *writers.SQL, job string) func() (bool, string) {
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

// shortJob is a job name short enough for an XA branch qualifier.
func shortJob(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

// TestCheckpointCrashXA: kfake in, MariaDB out through XA transactions;
// random kills and every crash point (after-precommit lies between XA
// PREPARE and XA COMMIT) with the input flowing. Every key's total exact.
func TestCheckpointCrashXA(t *testing.T) {
	t.Parallel()
	dsn := testutil.NeedServer(t, testutil.EnvMySQL)
	b := startBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	h := newCkptHarness(t, b.addr, shortJob("ckx"), dsn)
	w := sinktest.OpenSQL(t, dsn)
	h.inspect = xaInspect(t, w, h.job)
	// Prepared and not committed at these two, whatever the timing.
	h.requireLanding(strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit)
	h.startFeeder()
	for range 8 {
		h.randomKill()
	}
	for _, p := range strategies.CheckpointCrashPoints {
		h.crashPoint(p)
	}
	h.drain()
	dups, losses := h.verify()
	checkCrashPerKey(t, w, h.job, h.produced)
	s := h.summary()
	t.Logf("produced %d events; verify: %d duplicates, %d losses", h.produced, dups, losses)
	if prepared, detail := h.inspect(); prepared {
		t.Errorf("after the drain the job still has prepared XA branches %s", detail)
	}
	if s.inTxn+s.midCheckpoint == 0 {
		t.Errorf("no random kill landed inside a checkpoint or left a prepared branch (logs in %s)", h.logDir)
	}
	h.requireInTxn()
}

// walInspect: the write-ahead sink's open work after a crash is the
// latest checkpoint's buffered writes that mb_wal_commits says were not
// applied yet (recovery must apply them).
func walInspect(t *testing.T, w *writers.SQL, stateDir, job string) func() (bool, string) {
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
			err := w.DB().QueryRowContext(t.Context(), `SELECT checkpoint_id FROM `+writers.WALTable+` WHERE job = ? AND subtask = ?`, job, p.Subtask).Scan(&done)
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

// TestCheckpointCrashWAL: the write-ahead sink (--sink-mode wal) into
// SQLite; a few kills and every crash point. Every key's total exact.
func TestCheckpointCrashWAL(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	sink := "sqlite://" + t.TempDir() + "/sink.db"
	h := newCkptHarness(t, b.addr, uniqueName(t, "ckpt-job"), sink, "--sink-mode", string(strategies.SinkModeWAL))
	w := sinktest.OpenSQL(t, sink)
	h.inspect = walInspect(t, w, h.stateDir, h.job)
	// Checkpoint saved, its buffered writes not applied: recovery applies them.
	h.requireLanding(strategies.CrashAfterCheckpointBeforeCommit)
	h.startFeeder()
	for range 4 {
		h.randomKill()
	}
	for _, p := range strategies.CheckpointCrashPoints {
		h.crashPoint(p)
	}
	h.drain()
	dups, losses := h.verify()
	checkCrashPerKey(t, w, h.job, h.produced)
	s := h.summary()
	t.Logf("produced %d events; verify: %d duplicates, %d losses", h.produced, dups, losses)
	if s.midCheckpoint == 0 {
		t.Errorf("no random kill landed inside a checkpoint (logs in %s)", h.logDir)
	}
	h.requireInTxn()
}

// --- negative control and configuration -------------------------------------

// TestCheckpointMemoryBackendDuplicates is the negative control: with
// --state-backend memory a killed run's checkpoints die with it, so the
// restart begins again at the start of the input while the committed
// files of the killed run stay. The output must show exactly those
// records twice; if it is clean, the kill missed or the backend kept
// state, and the crash tests above would prove nothing.
func TestCheckpointMemoryBackendDuplicates(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--partitions", strconv.Itoa(crashPartitions))
	dir := filepath.Join(t.TempDir(), "out")
	h := newCkptHarness(t, b.addr, uniqueName(t, "ckpt-job"), "file://"+dir, "--state-backend", string(strategies.StateBackendMemory))
	h.startFeeder()
	// Killed a little after a checkpoint completed, once its files are
	// committed: the sinks commit after the coordinator logs the
	// completion, so the run is stopped and the directory read before the
	// kill (a later checkpoint's completion is tried if none is there yet).
	logPath := filepath.Join(h.logDir, "run-01.log")
	ps, tries := stopRunAt(t, h.bin, h.args(), logPath, stopPlan{
		delay: 3 * ckptInterval, marker: ckptCompletedMarker, lag: ckptInterval / 2, tries: ckptAlignTries,
		inside: func(string) bool { return len(readFileOutputs(t, dir, h.job)) > 0 },
	}, syscall.SIGKILL)
	if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("run ended with %v, not by our SIGKILL", ps)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	st := parseCheckpointLog(string(log))
	committedBefore := int64(len(readFileOutputs(t, dir, h.job)))
	t.Logf("killed after %d completed checkpoints (%d records), try %d; %d records committed before the restart", st.completed, st.records, tries, committedBefore)
	if st.completed == 0 || committedBefore == 0 {
		t.Fatalf("the killed run committed nothing: the control proves nothing (log %s)", logPath)
	}
	h.drain()
	outs := readFileOutputs(t, dir, h.job)
	seen := map[int64]int{}
	for _, o := range outs {
		seen[o.ID]++
	}
	var dups, losses int64
	for id := range h.produced {
		switch n := seen[id]; {
		case n == 0:
			losses++
		case n > 1:
			dups += int64(n - 1)
		}
	}
	t.Logf("memory backend: produced %d, output %d records: %d duplicates, %d losses", h.produced, len(outs), dups, losses)
	if dups == 0 {
		t.Fatalf("the memory backend came out without duplicates after a kill: the kill missed, or the state survived the process")
	}
	if dups != committedBefore || losses != 0 {
		t.Errorf("want exactly the %d records committed before the kill twice and no loss, got %d duplicates, %d losses", committedBefore, dups, losses)
	}
	v := runBin(t, h.logDir, nil, time.Minute, "verify", "--strategy", string(strategies.StrategyCheckpoint), "--sink", h.sink, "--job", h.job,
		"--expect-events", strconv.FormatInt(h.produced, 10), "--expect-amount", strconv.FormatInt(h.amount, 10))
	if v.code == 0 || count(t, duplicatesRE, v.stdout) != dups {
		t.Errorf("verify should fail and show %d duplicates: %s", dups, v)
	}
}

// TestCheckpointKafkaTxnTimeoutConfig: a Kafka transaction timeout the
// broker could hit while a pre-committed transaction waits for its commit
// (checkpoint interval + checkpoint timeout + restart time) is refused at
// start-up, as a configuration error.
func TestCheckpointKafkaTxnTimeoutConfig(t *testing.T) {
	binary(t)
	base := []string{"run", "--strategy", string(strategies.StrategyCheckpoint), "--brokers", unreachable, "--sink", "kafka://" + unreachable + "/out"}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"1s with the defaults", []string{"--kafka-txn-timeout", "1s"}, []string{"transaction timeout", "1s"}},
		// Interval 500ms + checkpoint timeout 300ms + restart 200ms: a
		// pre-committed transaction may wait 1s; equal is not enough.
		{"1s for a 1s wait", []string{"--kafka-txn-timeout", "1s", "--checkpoint-interval", "500ms", "--checkpoint-timeout", "300ms", "--max-restart-time", "200ms"},
			[]string{"transaction timeout", "1s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBin(t, t.TempDir(), nil, time.Minute, slices.Concat(base, c.args)...)
			checkConfigError(t, r, c.want...)
		})
	}
	// Just above the need, the same settings pass validation and the run
	// fails only on the unreachable broker.
	r := runBin(t, t.TempDir(), nil, time.Minute, slices.Concat(base,
		[]string{"--kafka-txn-timeout", "1001ms", "--checkpoint-interval", "500ms", "--checkpoint-timeout", "300ms", "--max-restart-time", "200ms",
			"--connect-timeout", "1s"})...)
	if r.code != 3 || strings.Contains(r.stderr, "transaction timeout") {
		t.Errorf("a transaction timeout above the need: want exit 3 on the unreachable broker, not a timeout complaint\n%s", r)
	}
}
