package systemtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

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
	out := UniqueName(t, "ckpt-out")
	h := newCkptHarness(t, brokers, UniqueName(t, "ckpt-job"), "kafka://"+brokers+"/"+out)
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
	out := UniqueName(t, "ckpt-out")
	h := newCkptHarness(t, brokers, UniqueName(t, "ckpt-job"), "kafka://"+brokers+"/"+out)

	h.startFeeder() // records in (nearly) every checkpoint
	latest, prev, txns := crashBeforeCommit(t, h)
	h.stopFeeder()
	n := latest.ID
	before, pending := inputBetween(t, brokers, h.topic, prev, latest)
	t.Logf("checkpoint %d lists %d pending transactions; %d records before checkpoint %d's offsets, %d between its and checkpoint %d's",
		n, len(txns), len(before), n-1, len(pending), n)
	if len(pending) == 0 || len(txns) == 0 {
		t.Fatalf("checkpoint %d holds no records (pending %v): the crash proves nothing", n, txns)
	}
	checkPrecommittedInvisible(t, brokers, out, n, before, pending)

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
	inLog := pendingInLog(t, brokers, out, pending)
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

// crashBeforeCommit runs the job until it is killed after the run's third
// checkpoint was saved, and returns that checkpoint (n), the one before it
// and the pending transactions n lists. A checkpoint into which no record
// arrived (the feeder is slow on a busy machine) proves nothing: then the
// job is run again — its recovery commits that checkpoint — and killed at
// its own third, ckptPointTries times at most.
func crashBeforeCommit(t *testing.T, h *ckptHarness) (latest, prev *offsets.Checkpoint, pending []writers.Pending) {
	t.Helper()
	store, err := offsets.NewFileCheckpoints(h.stateDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Pending []writers.Pending `json:"pending"`
	}
	for try := 1; ; try++ {
		r := Run(t, h.logDir, Env("MICROBATCH_CRASH_AT="+strategies.CrashAfterCheckpointBeforeCommit+":3"), 3*time.Minute, h.args()...)
		if r.Code != -1 {
			t.Fatalf("the run was not killed at %s (exit %d)\n%s", strategies.CrashAfterCheckpointBeforeCommit, r.Code, r)
		}
		if latest, err = store.Latest(t.Context(), h.job); err != nil || latest == nil {
			t.Fatalf("no latest checkpoint (err %v)", err)
		}
		// Checkpoint n is the one the crash left uncommitted (saved, its
		// completion not logged yet); ids go up by one.
		if st := parseCheckpointLog(r.Stderr); st.completed != 2 || st.last != latest.ID || !st.open {
			t.Fatalf("the run's log has %d checkpoints completed, the last triggered %d; the latest saved is %d\n%s", st.completed, st.last, latest.ID, r.Stderr)
		}
		if err := json.Unmarshal(latest.Data, &data); err != nil {
			t.Fatal(err)
		}
		prev = readCheckpointFile(t, h, latest.ID-1)
		records := sum(latest.Offsets) - sum(prev.Offsets)
		if records > 0 && len(data.Pending) > 0 {
			return latest, prev, data.Pending
		}
		if try == ckptPointTries {
			t.Fatalf("checkpoint %d holds no records (pending %v) at all %d tries: the crash proves nothing", latest.ID, data.Pending, try)
		}
		t.Logf("checkpoint %d holds %d records (pending %v): again", latest.ID, records, data.Pending)
	}
}

// readCheckpointFile reads checkpoint id of h's job from its state dir:
// where that checkpoint put the input.
func readCheckpointFile(t *testing.T, h *ckptHarness, id int64) *offsets.Checkpoint {
	t.Helper()
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

// inputBetween returns the ids of the input records before prev's offsets
// and of those between prev's and latest's.
func inputBetween(t *testing.T, brokers, topic string, prev, latest *offsets.Checkpoint) (before, pending map[int64]bool) {
	t.Helper()
	// The input's ids by position.
	idAt := map[int32]map[int64]int64{}
	for _, rec := range readInput(t, brokers, topic) {
		if idAt[rec.part] == nil {
			idAt[rec.part] = map[int64]int64{}
		}
		idAt[rec.part][rec.off] = rec.id
	}
	before, pending = map[int64]bool{}, map[int64]bool{}
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
	return before, pending
}

// checkPrecommittedInvisible checks the output before the restart:
// committed = before, exactly; pending (checkpoint n's records) in the
// log, invisible.
func checkPrecommittedInvisible(t *testing.T, brokers, out string, n int64, before, pending map[int64]bool) {
	t.Helper()
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
	if inLog := pendingInLog(t, brokers, out, pending); len(inLog) != len(pending) {
		t.Errorf("before the restart the log holds %d of checkpoint %d's %d pre-committed records", len(inLog), n, len(pending))
	}
	lso, hwm := kafkaOffsets(t, brokers, out)
	t.Logf("before the restart: %d records visible (%d of those before checkpoint %d's offsets held back behind the last stable offset); output last stable offsets %v, high-water marks %v",
		len(visible), len(before)-(len(visible)-extra), n-1, lso, hwm)
	if fmt.Sprint(lso) == fmt.Sprint(hwm) {
		t.Errorf("before the restart no transaction is open in the output: checkpoint %d's were not left pre-committed", n)
	}
}

// pendingInLog counts how often each id of pending is in out's log, read
// uncommitted.
func pendingInLog(t *testing.T, brokers, out string, pending map[int64]bool) map[int64]int {
	t.Helper()
	inLog := map[int64]int{}
	for _, rec := range readUncommitted(t, brokers, out) {
		if pending[rec.out.ID] {
			inLog[rec.out.ID]++
		}
	}
	return inLog
}
