package redissink

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
)

// The Redis cases of a consumer group: several processes share one job, each
// with its own connection, epoch and partitions of topic "in".

// groupJob starts partitions 0..parts-1 of topic "in" at offset 0.
func groupJob(t *testing.T, w *Sink, parts int) *Job {
	t.Helper()
	job := redisJob(t, w)
	start := make(map[int32]int64)
	for p := range parts {
		start[int32(p)] = 0
	}
	if err := job.InitOffsets(t.Context(), "in", start); err != nil {
		t.Fatalf("InitOffsets: %v", err)
	}
	return job
}

func mustClaimParts(t *testing.T, w *Sink, job *Job, parts []int32, minEpoch int64) int64 {
	t.Helper()
	job = on(w, job)
	e, err := job.ClaimPartitions(t.Context(), "in", parts, minEpoch)
	if err != nil {
		t.Fatalf("ClaimPartitions(%v, %d): %v", parts, minEpoch, err)
	}
	return e
}

func mustBatchID(t *testing.T, w *Sink, job *Job) int64 {
	t.Helper()
	job = on(w, job)
	id, err := job.NextBatchID(t.Context())
	if err != nil {
		t.Fatalf("NextBatchID: %v", err)
	}
	return id
}

func mustLogPlan(t *testing.T, w *Sink, job *Job, epoch, id int64, ranges []record.Range) {
	t.Helper()
	job = on(w, job)
	if err := job.LogPlan(t.Context(), epoch, id, ranges); err != nil {
		t.Fatalf("LogPlan batch %d %v: %v", id, ranges, err)
	}
}

func inRange(p int32, from, to int64) record.Range {
	return record.Range{Topic: "in", Partition: p, From: from, To: to}
}

// partTotal is the contribution used below: one event per offset under the
// partition's own key, so totals tell which ranges were counted how often.
func partTotal(r record.Range) []Total {
	return []Total{{Key: rangeField(r), Events: r.To - r.From, Amount: r.From}}
}

// Two members each fold their own partitions; at a rebalance one partition
// moves, and its old holder is fenced on it alone.
func TestRedisGroupRebalanceFencesMovedPartition(t *testing.T) {
	a, b := openRedisSink(t), openRedisSink(t)
	ctx := t.Context()
	job := groupJob(t, a, 4)
	eA := mustClaimParts(t, a, job, []int32{0, 1}, 1)
	eB := mustClaimParts(t, b, job, []int32{2, 3}, 1)
	if eB <= eA {
		t.Fatalf("second claim took epoch %d, not above the first's %d", eB, eA)
	}
	// A's epoch is older than the job's now, and still good for its own
	// partitions.
	idA := mustBatchID(t, a, job)
	first := []record.Range{inRange(0, 0, 10), inRange(1, 0, 10)}
	mustLogPlan(t, a, job, eA, idA, first)
	for _, r := range first {
		mustWrite(t, a, job, eA, r, partTotal(r), nil)
	}
	mustFold(t, a, job, eA, idA, first, 2)
	idB := mustBatchID(t, b, job)
	theirs := []record.Range{inRange(2, 0, 10), inRange(3, 0, 10)}
	mustLogPlan(t, b, job, eB, idB, theirs)
	for _, r := range theirs {
		mustWrite(t, b, job, eB, r, partTotal(r), nil)
	}
	mustFold(t, b, job, eB, idB, theirs, 2)
	// A member can't touch the other's partitions.
	if err := on(a, job).LogPlan(ctx, eA, mustBatchID(t, a, job), []record.Range{inRange(2, 10, 20)}); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("A logging B's partition = %v, want ErrFenced", err)
	}

	// A plans and writes its next batch; then B is given partition 0.
	idA2 := mustBatchID(t, a, job)
	second := []record.Range{inRange(0, 10, 20), inRange(1, 10, 20)}
	mustLogPlan(t, a, job, eA, idA2, second)
	for _, r := range second {
		mustWrite(t, a, job, eA, r, partTotal(r), nil)
	}
	eB2 := mustClaimParts(t, b, job, []int32{0, 2, 3}, 2)
	before := snapshot(t, a, job)
	err := on(a, job).WriteContribution(ctx, eA, second[0], []Total{{Key: "zombie", Events: 1}}, nil)
	if !errors.Is(err, offsets.ErrFenced) || IsRetryable(err) {
		t.Fatalf("A's write of a moved partition = %v, want ErrFenced, not retryable", err)
	}
	if _, err := on(a, job).Fold(ctx, eA, idA2, second); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("A's fold including a moved partition = %v, want ErrFenced", err)
	}
	if _, err := on(a, job).Fold(ctx, eA, idA2, second[:1]); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("A's fold of a moved partition = %v, want ErrFenced", err)
	}
	if err := on(a, job).LogPlan(ctx, eA, mustBatchID(t, a, job), []record.Range{inRange(0, 10, 30)}); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("A's plan for a moved partition = %v, want ErrFenced", err)
	}
	after := snapshot(t, a, job)
	delete(before, job.keys.batch()) // the ids taken above
	delete(after, job.keys.batch())
	sameSnapshot(t, "fenced calls of the partition's old holder", before, after)

	// Partition 1 is still A's.
	mustFold(t, a, job, eA, idA2, second[1:], 1)
	// B finishes what A left on partition 0: the same range, A's batch id.
	pend, err := on(b, job).PendingRanges(ctx, "in", []int32{0, 2, 3})
	if want := []PlannedRange{{BatchID: idA2, Range: second[0]}}; err != nil || !reflect.DeepEqual(pend, want) {
		t.Fatalf("PendingRanges = %v, %v; want %v", pend, err, want)
	}
	mustWrite(t, b, job, eB2, second[0], partTotal(second[0]), nil)
	mustFold(t, b, job, eB2, idA2, second[:1], 1)

	wantOffsets(t, a, job, map[int32]int64{0: 20, 1: 20, 2: 10, 3: 10})
	wantTotals(t, a, job, map[string]total{
		"in/0": {20, 10}, "in/1": {20, 10}, "in/2": {10, 0}, "in/3": {10, 0},
	})
}

// A whole-job Claim fences every older epoch on every partition, those with
// an epoch of their own and those without.
func TestRedisClaimAfterClaimPartitionsFencesAll(t *testing.T) {
	a, b, c := openRedisSink(t), openRedisSink(t), openRedisSink(t)
	ctx := t.Context()
	job := groupJob(t, a, 4)
	eA := mustClaimParts(t, a, job, []int32{0, 1}, 0)
	eB := mustClaimParts(t, b, job, []int32{2}, 0)
	all := []record.Range{inRange(0, 0, 5), inRange(1, 0, 5), inRange(2, 0, 5), inRange(3, 0, 5)}
	id := mustBatchID(t, a, job)
	mustLogPlan(t, a, job, eA, id, all[:2])
	mustLogPlan(t, b, job, eB, mustBatchID(t, b, job), all[2:3])
	mustWrite(t, a, job, eA, all[0], partTotal(all[0]), nil)

	eC, err := on(c, job).Claim(ctx)
	if err != nil || eC <= eB {
		t.Fatalf("Claim = %d, %v; want above %d", eC, err, eB)
	}
	before := snapshot(t, a, job)
	for _, m := range []struct {
		w     *Sink
		epoch int64
	}{{a, eA}, {b, eB}} {
		for _, r := range all {
			if err := on(m.w, job).WriteContribution(ctx, m.epoch, r, nil, nil); !errors.Is(err, offsets.ErrFenced) {
				t.Errorf("write of %v with epoch %d after Claim = %v, want ErrFenced", r, m.epoch, err)
			}
			if _, err := on(m.w, job).Fold(ctx, m.epoch, id, []record.Range{r}); !errors.Is(err, offsets.ErrFenced) {
				t.Errorf("fold of %v with epoch %d after Claim = %v, want ErrFenced", r, m.epoch, err)
			}
			if err := on(m.w, job).LogPlan(ctx, m.epoch, 1000, []record.Range{r}); !errors.Is(err, offsets.ErrFenced) {
				t.Errorf("plan of %v with epoch %d after Claim = %v, want ErrFenced", r, m.epoch, err)
			}
		}
	}
	sameSnapshot(t, "fenced calls after a whole-job claim", before, snapshot(t, a, job))

	// The new holder has every partition, A's logged range included.
	mustWrite(t, c, job, eC, all[1], partTotal(all[1]), nil)
	mustFold(t, c, job, eC, id, all[:2], 2)
	id2 := mustBatchID(t, c, job)
	mustLogPlan(t, c, job, eC, id2, all[3:])
	mustWrite(t, c, job, eC, all[3], partTotal(all[3]), nil)
	mustFold(t, c, job, eC, id2, all[3:], 1)
	wantTotals(t, c, job, map[string]total{"in/0": {5, 0}, "in/1": {5, 0}, "in/3": {5, 0}})

	// A group member claiming after it takes over from it in turn.
	if e := mustClaimParts(t, a, job, []int32{0}, 0); e != eC+1 {
		t.Fatalf("ClaimPartitions after Claim = %d, want %d", e, eC+1)
	}
	if err := on(c, job).WriteContribution(ctx, eC, inRange(0, 5, 10), nil, nil); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("the whole-job holder's write of a claimed partition = %v, want ErrFenced", err)
	}
}

func TestRedisClaimPartitionsEpochs(t *testing.T) {
	w := openRedisSink(t)
	ctx := t.Context()
	job := redisJob(t, w)
	steps := []struct {
		parts    []int32
		minEpoch int64
		want     int64
	}{
		{[]int32{0, 1}, 0, 1},   // a new job
		{[]int32{2}, 5, 5},      // a group generation above the stored epoch
		{[]int32{0}, 3, 6},      // below it: stored + 1
		{[]int32{1}, 6, 7},      // equal to it: stored + 1
		{nil, 0, 8},             // a member without partitions still takes a new epoch
		{[]int32{3, 3}, 20, 20}, // a partition twice: harmless
	}
	for _, s := range steps {
		if got := mustClaimParts(t, w, job, s.parts, s.minEpoch); got != s.want {
			t.Fatalf("ClaimPartitions(%v, %d) = %d, want %d", s.parts, s.minEpoch, got, s.want)
		}
	}
	got := w.Client().HGetAll(ctx, job.keys.epochs()).Val()
	want := map[string]string{"in/0": "6", "in/1": "7", "in/2": "5", "in/3": "20"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("epochs = %v, want %v", got, want)
	}
	if e := w.Client().Get(ctx, job.keys.epoch()).Val(); e != "20" {
		t.Fatalf("job epoch = %s, want 20", e)
	}
	if e, err := job.Claim(ctx); err != nil || e != 21 {
		t.Fatalf("Claim = %d, %v; want 21", e, err)
	}
	if n := w.Client().Exists(ctx, job.keys.epochs()).Val(); n != 0 {
		t.Fatalf("Claim left the partitions' epochs")
	}
	for _, bad := range []struct {
		topic string
		parts []int32
	}{{"in:x", []int32{0}}, {"in", []int32{-1}}} {
		if _, err := job.ClaimPartitions(ctx, bad.topic, bad.parts, 0); err == nil {
			t.Errorf("ClaimPartitions(%q, %v) accepted", bad.topic, bad.parts)
		}
	}
	if _, err := w.Job("a}b"); err == nil {
		t.Error(`Job("a}b") accepted a name that breaks the hash tag`)
	}
}

// A member logs and writes a batch and dies before the fold; the member
// given its partitions finishes the logged ranges with the same batch id.
func TestRedisPendingRangesAfterMemberDies(t *testing.T) {
	a, b := openRedisSink(t), openRedisSink(t)
	ctx := t.Context()
	job := groupJob(t, a, 4)
	eA := mustClaimParts(t, a, job, []int32{0, 1, 2}, 0)
	// Partition 2 is folded, partition 3 never planned.
	id0 := mustBatchID(t, a, job)
	mustLogPlan(t, a, job, eA, id0, []record.Range{inRange(2, 0, 7)})
	mustWrite(t, a, job, eA, inRange(2, 0, 7), partTotal(inRange(2, 0, 7)), nil)
	mustFold(t, a, job, eA, id0, []record.Range{inRange(2, 0, 7)}, 1)
	id := mustBatchID(t, a, job)
	plan := []record.Range{inRange(1, 0, 30), inRange(0, 0, 20)} // not in partition order
	mustLogPlan(t, a, job, eA, id, plan)
	for _, r := range plan {
		mustWrite(t, a, job, eA, r, partTotal(r), nil)
	}
	a.Close() // dies before the fold
	// The batch's plan:{id} key is for inspection only: the fold must not
	// need it.
	if err := b.Client().Del(ctx, job.keys.plan(id)).Err(); err != nil {
		t.Fatal(err)
	}

	eB := mustClaimParts(t, b, job, []int32{0, 1, 2, 3}, 0)
	pend, err := on(b, job).PendingRanges(ctx, "in", []int32{3, 2, 1, 0, 1})
	want := []PlannedRange{{BatchID: id, Range: inRange(0, 0, 20)}, {BatchID: id, Range: inRange(1, 0, 30)}}
	if err != nil || !reflect.DeepEqual(pend, want) {
		t.Fatalf("PendingRanges = %v, %v; want %v", pend, err, want)
	}
	// Until they are folded, the partitions take no other range.
	if err := on(b, job).LogPlan(ctx, eB, mustBatchID(t, b, job), []record.Range{inRange(0, 0, 25)}); !errors.Is(err, offsets.ErrConflict) {
		t.Fatalf("a new plan over a pending range = %v, want ErrConflict", err)
	}
	var ranges []record.Range
	for _, p := range pend {
		mustWrite(t, b, job, eB, p.Range, partTotal(p.Range), nil)
		ranges = append(ranges, p.Range)
	}
	mustFold(t, b, job, eB, pend[0].BatchID, ranges, 2)
	wantTotals(t, b, job, map[string]total{"in/0": {20, 0}, "in/1": {30, 0}, "in/2": {7, 0}})
	before := snapshot(t, b, job)
	mustFold(t, b, job, eB, id, ranges, 0)
	sameSnapshot(t, "a second fold", before, snapshot(t, b, job))
	if pend, err := on(b, job).PendingRanges(ctx, "in", []int32{0, 1, 2, 3}); err != nil || len(pend) != 0 {
		t.Fatalf("PendingRanges after the fold = %v, %v; want none", pend, err)
	}
	if keys := b.Client().Keys(ctx, job.keys.key("contrib", "*")).Val(); len(keys) != 0 {
		t.Fatalf("contributions left: %v", keys)
	}
	wantOffsets(t, b, job, map[int32]int64{0: 20, 1: 30, 2: 7, 3: 0})
}

// A partition's logged range that is not folded yet is the only one LogPlan
// accepts for it: a replay must read the same records.
func TestRedisLogPlanDeterminismGuard(t *testing.T) {
	w := openRedisSink(t)
	ctx := t.Context()
	job := groupJob(t, w, 2)
	e := mustClaimParts(t, w, job, []int32{0, 1}, 0)
	mustLogPlan(t, w, job, e, 1, []record.Range{inRange(0, 0, 10)})
	before := snapshot(t, w, job)
	for _, r := range []record.Range{inRange(0, 0, 15), inRange(0, 0, 5), inRange(0, 10, 20)} {
		if err := job.LogPlan(ctx, e, 2, []record.Range{inRange(1, 0, 3), r}); !errors.Is(err, offsets.ErrConflict) {
			t.Fatalf("LogPlan of %v over the pending 0-10 = %v, want ErrConflict", r, err)
		}
	}
	sameSnapshot(t, "refused plans", before, snapshot(t, w, job))
	// The same range again (a replay) is fine, and so is any range of a
	// partition with nothing pending.
	mustLogPlan(t, w, job, e, 1, []record.Range{inRange(0, 0, 10)})
	mustLogPlan(t, w, job, e, 2, []record.Range{inRange(1, 0, 3)})
	mustWrite(t, w, job, e, inRange(0, 0, 10), nil, nil)
	mustFold(t, w, job, e, 1, []record.Range{inRange(0, 0, 10)}, 1)
	// Folded, the partition takes its next range, from the folded To.
	mustLogPlan(t, w, job, e, 4, []record.Range{inRange(0, 10, 25)})
	if err := job.LogPlan(ctx, e, 5, []record.Range{inRange(0, 10, 30)}); !errors.Is(err, offsets.ErrConflict) {
		t.Fatalf("LogPlan over the pending 10-25 = %v, want ErrConflict", err)
	}
}

func TestRedisNextBatchID(t *testing.T) {
	w := openRedisSink(t)
	ctx := t.Context()
	job := groupJob(t, w, 1)
	e, err := job.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A job that counted its own ids before.
	mustLogPlan(t, w, job, e, 41, []record.Range{inRange(0, 0, 10)})
	prev := int64(41)
	for range 3 {
		id := mustBatchID(t, w, job)
		if id <= prev {
			t.Fatalf("NextBatchID = %d after %d", id, prev)
		}
		prev = id
	}
	if prev != 44 {
		t.Fatalf("third id after plan 41 = %d, want 44", prev)
	}
	// An id logged past the counter (a single instance counting its own)
	// moves it too.
	mustLogPlan(t, w, job, e, 100, []record.Range{inRange(0, 0, 10)})
	if id := mustBatchID(t, w, job); id != 101 {
		t.Fatalf("NextBatchID after plan 100 = %d, want 101", id)
	}
	// Processes drawing at once never get the same id.
	const procs, each = 4, 25
	ids := make(chan int64, procs*each)
	var wg sync.WaitGroup
	for range procs {
		p := openRedisSink(t)
		wg.Go(func() {
			for range each {
				id, err := on(p, job).NextBatchID(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := make(map[int64]bool)
	for id := range ids {
		if seen[id] || id <= 101 {
			t.Fatalf("id %d handed out twice or not above 101", id)
		}
		seen[id] = true
	}
	if len(seen) != procs*each {
		t.Fatalf("%d ids, want %d", len(seen), procs*each)
	}
}
