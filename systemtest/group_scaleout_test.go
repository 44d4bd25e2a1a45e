package systemtest

import (
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
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

func testGroupScaleOut(t *testing.T, strategy, brokers, sink string) {
	began := time.Now()
	topic := UniqueName(t, "group")
	job := UniqueName(t, "group-job")
	events, amount := produceGroupInput(t, brokers, topic, 0, groupInitial)
	feed := startGroupFeeder(t, brokers, topic, events, amount)
	gs := openGroupSink(t, strategy, sink)
	logDir := t.TempDir()
	args := groupArgs(brokers, topic, job, sink, strategy)
	start := func(name string) *groupProc { return startGroupProc(t, name, logDir, Env(), args) }

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

	gens, batches := checkRebalanced(t, victim, p1, p2, p3, p4)
	t.Logf("%s: %d events (amount %d) produced, %d at the start; sink holds %d events, %d keys, %d dead letters; "+
		"generations %v; %d batches committed; fenced p3=%d p4=%d p1=%d; drained in %s; %s in all",
		strategy, produced, expAmount, groupInitial, got.Events, got.Keys, got.DeadLetters,
		gens, batches, fenced[0], fenced[1], fenced[2], drained.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond))
}

// checkRebalanced checks from the logs of the scale-out's processes p1,
// p2 (killed), p3 and p4 that the run really rebalanced and p2's
// partitions (victim) went to others. It returns the generations seen and
// the batches committed.
func checkRebalanced(t *testing.T, victim assignment, p1, p2, p3, p4 *groupProc) (generations []int, batches int) {
	t.Helper()
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
	for _, p := range all {
		batches += p.commitsAfter(-1)
	}
	return slices.Sorted(maps.Keys(gens)), batches
}
