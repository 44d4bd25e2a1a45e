package redissink

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// The Redis cases run against a real server named by MICROBATCH_TEST_REDIS
// (not in -short mode). The server is shared between tests and runs, so
// every case uses its own job name and deletes its keys afterwards.

func redisTestDSN(t *testing.T) string {
	t.Helper()
	return testutil.NeedServer(t, testutil.EnvRedis)
}

func openRedisSink(t *testing.T) *Sink {
	t.Helper()
	w, err := Open(t.Context(), redisTestDSN(t))
	if err != nil {
		t.Fatalf("OpenRedis: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// uniqueJob is a job name no other test or run uses.
func uniqueJob(t testing.TB) string {
	n, err := crand.Int(crand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	name := nonJobChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return fmt.Sprintf("%s-%x", name, n)
}

var nonJobChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// redisJob is a unique job on w whose keys are deleted when the test ends.
func redisJob(t *testing.T, w *Sink) *Job {
	t.Helper()
	job, err := w.Job(uniqueJob(t))
	if err != nil {
		t.Fatal(err)
	}
	c := w.Client()
	t.Cleanup(func() {
		ctx := t.Context()
		if ctx.Err() != nil {
			return
		}
		keys, _ := c.Keys(ctx, "mb:{"+job.Name()+"}:*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return job
}

// on is job on sink w: another process's view of the same job.
func on(w *Sink, job *Job) *Job { return &Job{s: w, name: job.name, keys: job.keys} }

// total is a key's events and amount in the users' view.
type total struct{ events, amount int64 }

// bigSum is the exact sum of vs in decimal.
func bigSum(vs ...int64) string {
	s := new(big.Int)
	for _, v := range vs {
		s.Add(s, big.NewInt(v))
	}
	return s.String()
}

// snapshot is every key of the job with its content, to check that a failed
// call changed nothing.
func snapshot(t *testing.T, w *Sink, job *Job) map[string]any {
	t.Helper()
	job = on(w, job)
	ctx := t.Context()
	keys, err := w.Client().Keys(ctx, "mb:{"+job.Name()+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		switch typ := w.Client().Type(ctx, k).Val(); typ {
		case "string":
			out[k] = w.Client().Get(ctx, k).Val()
		case "hash":
			out[k] = w.Client().HGetAll(ctx, k).Val()
		default:
			t.Fatalf("key %s has unexpected type %s", k, typ)
		}
	}
	return out
}

func sameSnapshot(t *testing.T, what string, before, after map[string]any) {
	t.Helper()
	if !reflect.DeepEqual(before, after) {
		t.Errorf("%s changed Redis:\nbefore %v\nafter  %v", what, before, after)
	}
}

// jobSetup claims job, starts topic "in" partitions 0..parts-1 at offset 0
// and logs batch 1 with ranges [0, to) for each.
func jobSetup(t *testing.T, w *Sink, job *Job, parts int, to int64) (epoch int64, ranges []record.Range) {
	t.Helper()
	job = on(w, job)
	ctx := t.Context()
	epoch, err := job.Claim(ctx)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	start := make(map[int32]int64)
	for p := range parts {
		start[int32(p)] = 0
		ranges = append(ranges, record.Range{Topic: "in", Partition: int32(p), From: 0, To: to})
	}
	if err := job.InitOffsets(ctx, "in", start); err != nil {
		t.Fatalf("InitOffsets: %v", err)
	}
	if err := job.LogPlan(ctx, epoch, 1, ranges); err != nil {
		t.Fatalf("LogPlan: %v", err)
	}
	return epoch, ranges
}

func mustWrite(t *testing.T, w *Sink, job *Job, epoch int64, r record.Range, totals []Total, dls []record.DeadLetter) {
	t.Helper()
	job = on(w, job)
	if err := job.WriteContribution(t.Context(), epoch, r, totals, dls); err != nil {
		t.Fatalf("WriteContribution %v: %v", r, err)
	}
}

func mustFold(t *testing.T, w *Sink, job *Job, epoch, batch int64, ranges []record.Range, want int) {
	t.Helper()
	job = on(w, job)
	n, err := job.Fold(t.Context(), epoch, batch, ranges)
	if err != nil {
		t.Fatalf("Fold: %v", err)
	}
	if n != want {
		t.Fatalf("Fold folded %d ranges, want %d", n, want)
	}
}

// readRedisTotals returns the users' view: key -> {events, amount}.
func readRedisTotals(t *testing.T, w *Sink, job *Job) map[string]total {
	t.Helper()
	job = on(w, job)
	ctx := t.Context()
	ev, err := w.Client().HGetAll(ctx, EventsKey(job.Name())).Result()
	if err != nil {
		t.Fatal(err)
	}
	am, err := w.Client().HGetAll(ctx, AmountKey(job.Name())).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]total, len(ev))
	for k, v := range ev {
		var tot total
		fmt.Sscan(v, &tot.events)
		a, ok := am[k]
		if !ok {
			t.Fatalf("key %q has events but no amount", k)
		}
		fmt.Sscan(a, &tot.amount)
		out[k] = tot
	}
	if len(am) != len(ev) {
		t.Fatalf("%d keys in events, %d in amount", len(ev), len(am))
	}
	return out
}

func wantTotals(t *testing.T, w *Sink, job *Job, want map[string]total) {
	t.Helper()
	job = on(w, job)
	got := readRedisTotals(t, w, job)
	if len(want) == 0 && len(got) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("totals = %v, want %v", got, want)
	}
}

func wantOffsets(t *testing.T, w *Sink, job *Job, want map[int32]int64) {
	t.Helper()
	job = on(w, job)
	got, err := job.Offsets(t.Context(), "in")
	if err != nil {
		t.Fatalf("Offsets: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("offsets = %v, want %v", got, want)
	}
}

func TestRedisCloseTwiceAndString(t *testing.T) {
	w, err := Open(t.Context(), redisTestDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if s := w.String(); !strings.HasPrefix(s, "redis") || strings.Contains(s, "@") && !strings.Contains(s, "xxxxx") {
		t.Errorf("String() = %q", s)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	job, err := w.Job("closed")
	if err != nil {
		t.Fatal(err)
	}
	_, err = job.Claim(t.Context())
	if err == nil || IsRetryable(err) {
		t.Fatalf("Claim after Close = %v, want a non-retryable error", err)
	}
}

func TestRedisClaimIncrements(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	for want := int64(1); want <= 3; want++ {
		got, err := job.Claim(t.Context())
		if err != nil || got != want {
			t.Fatalf("Claim = %d, %v; want %d", got, err, want)
		}
	}
	for _, bad := range []string{"", "a}b", "{a}"} {
		if _, err := w.Job(bad); err == nil {
			t.Errorf("Job(%q) accepted a name that breaks the hash tag", bad)
		}
	}
}

func TestRedisInitOffsetsNeverMoves(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	if err := job.InitOffsets(ctx, "in", map[int32]int64{0: 5, 1: 7}); err != nil {
		t.Fatal(err)
	}
	if err := job.InitOffsets(ctx, "in", map[int32]int64{0: 100, 1: 100, 2: 3}); err != nil {
		t.Fatal(err)
	}
	if err := job.InitOffsets(ctx, "other", map[int32]int64{0: 9}); err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, w, job, map[int32]int64{0: 5, 1: 7, 2: 3})
}

func TestRedisPlanRoundTrip(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	if _, _, ok, err := job.LastPlan(ctx); ok || err != nil {
		t.Fatalf("LastPlan of a new job = ok %v, %v; want none", ok, err)
	}
	epoch, err := job.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan := []record.Range{{Topic: "in", Partition: 0, From: 10, To: 20}, {Topic: "in", Partition: 3, From: 1 << 50, To: 1<<50 + 7}}
	if err := job.LogPlan(ctx, epoch, 7, plan); err != nil {
		t.Fatalf("LogPlan: %v", err)
	}
	id, got, ok, err := job.LastPlan(ctx)
	if err != nil || !ok || id != 7 || !reflect.DeepEqual(got, plan) {
		t.Fatalf("LastPlan = %d %v ok %v, %v; want 7 %v", id, got, ok, err, plan)
	}
	// A replay logs the same plan again: fine.
	if err := job.LogPlan(ctx, epoch, 7, plan); err != nil {
		t.Fatalf("logging the same plan again: %v", err)
	}
	// Another plan for a logged batch: refused.
	other := []record.Range{{Topic: "in", Partition: 1, From: 10, To: 25}}
	if err := job.LogPlan(ctx, epoch, 7, other); !errors.Is(err, offsets.ErrConflict) {
		t.Fatalf("logging another plan for batch 7 = %v, want ErrConflict", err)
	}
	// An older batch id is fine (the processes of a group log theirs out of
	// order), and the last plan stays the highest id.
	if err := job.LogPlan(ctx, epoch, 6, other); err != nil {
		t.Fatalf("logging batch 6 after 7: %v", err)
	}
	if id, _, _, err := job.LastPlan(ctx); err != nil || id != 7 {
		t.Fatalf("LastPlan after logging 7 and 6 = %d, %v; want 7", id, err)
	}
	// Invalid ranges never reach Redis.
	for _, bad := range [][]record.Range{
		nil,
		{{Topic: "in", Partition: 0, From: 5, To: 5}},
		{{Topic: "in:x", Partition: 0, From: 0, To: 5}},
		{{Topic: "in", Partition: 0, From: 0, To: 5}, {Topic: "in", Partition: 0, From: 5, To: 9}},
	} {
		if err := job.LogPlan(ctx, epoch, 8, bad); err == nil {
			t.Errorf("LogPlan accepted %v", bad)
		}
	}
	// Old plans are pruned.
	for id := int64(8); id <= 8+plansKept; id++ {
		if err := job.LogPlan(ctx, epoch, id, plan); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.Client().Exists(ctx, job.keys.plan(7)).Val(); n != 0 {
		t.Errorf("plan 7 still kept after %d newer plans", plansKept+1)
	}
	if n := w.Client().Exists(ctx, job.keys.plan(9)).Val(); n != 1 {
		t.Errorf("plan 9 pruned too early")
	}
	// A stale epoch can't log.
	if _, err := job.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if err := job.LogPlan(ctx, epoch, 200, plan); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("LogPlan with a stale epoch = %v, want ErrFenced", err)
	}
}

func TestRedisContributionOverwriteIsIdempotent(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	r := ranges[0]
	// A first attempt with other content (say, an older code version) is
	// replaced, not merged.
	mustWrite(t, w, job, epoch, r, []Total{{Key: "stale", Events: 99, Amount: 99}}, nil)
	want := []Total{{Key: "a", Events: 3, Amount: 30}, {Key: "b", Events: 6, Amount: -5}, {Key: "a", Events: 1, Amount: 1}}
	mustWrite(t, w, job, epoch, r, want, nil)
	mustWrite(t, w, job, epoch, r, want, nil)
	if n := w.Client().HLen(t.Context(), job.keys.contrib(r)).Val(); n != 3 {
		t.Fatalf("contribution has %d fields, want 3 (a, b and the marker)", n)
	}
	// Nothing is visible before the fold.
	wantTotals(t, w, job, nil)
	mustFold(t, w, job, epoch, 1, ranges, 1)
	wantTotals(t, w, job, map[string]total{"a": {4, 31}, "b": {6, -5}})
	wantOffsets(t, w, job, map[int32]int64{0: 10})
	if n := w.Client().Exists(t.Context(), job.keys.contrib(r)).Val(); n != 0 {
		t.Errorf("contribution left after the fold")
	}
	// A late write of the folded range (a retried task) writes nothing.
	mustWrite(t, w, job, epoch, r, want, nil)
	if n := w.Client().Exists(t.Context(), job.keys.contrib(r)).Val(); n != 0 {
		t.Errorf("a write after the fold left a contribution no fold will take")
	}
	wantTotals(t, w, job, map[string]total{"a": {4, 31}, "b": {6, -5}})
}

func TestRedisEmptyContributionFolds(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	mustWrite(t, w, job, epoch, ranges[0], nil, nil) // e.g. only control records
	mustFold(t, w, job, epoch, 1, ranges, 1)
	wantOffsets(t, w, job, map[int32]int64{0: 10})
	wantTotals(t, w, job, nil)
}

func TestRedisFoldTwice(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 2, 5)
	mustWrite(t, w, job, epoch, ranges[0], []Total{{Key: "k", Events: 2, Amount: 20}}, nil)
	mustWrite(t, w, job, epoch, ranges[1], []Total{{Key: "k", Events: 3, Amount: 30}}, nil)
	mustFold(t, w, job, epoch, 1, ranges, 2)
	before := snapshot(t, w, job)
	mustFold(t, w, job, epoch, 1, ranges, 0)
	sameSnapshot(t, "a second fold", before, snapshot(t, w, job))
	wantTotals(t, w, job, map[string]total{"k": {5, 50}})
	ev, am, keys, err := job.Totals(t.Context())
	if err != nil || ev != 5 || am.Cmp(big.NewInt(50)) != 0 || keys != 1 {
		t.Fatalf("Totals = %d %d %d, %v; want 5 50 1", ev, am, keys, err)
	}
}

func TestRedisFoldFenced(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	old, ranges := jobSetup(t, w, job, 1, 5)
	mustWrite(t, w, job, old, ranges[0], []Total{{Key: "k", Events: 1, Amount: 1}}, nil)
	if _, err := job.Claim(ctx); err != nil { // another instance takes over
		t.Fatal(err)
	}
	before := snapshot(t, w, job)
	if _, err := job.Fold(ctx, old, 1, ranges); !errors.Is(err, offsets.ErrFenced) || IsRetryable(err) {
		t.Fatalf("Fold with a stale epoch = %v, want ErrFenced, not retryable", err)
	}
	err := job.WriteContribution(ctx, old, ranges[0], []Total{{Key: "zombie", Events: 1}}, nil)
	if !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("WriteContribution with a stale epoch = %v, want ErrFenced", err)
	}
	sameSnapshot(t, "a fenced fold and write", before, snapshot(t, w, job))
}

func TestRedisFoldConflictIsAtomic(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 3, 10)
	for _, r := range ranges {
		mustWrite(t, w, job, epoch, r, []Total{{Key: "k", Events: 1, Amount: 10}},
			[]record.DeadLetter{{Topic: r.Topic, Partition: r.Partition, Offset: r.From, Reason: "bad"}})
	}
	// Partition 2's offset was moved elsewhere (by hand, or by a bug).
	if err := w.Client().HSet(ctx, job.keys.offsets(), "in/2", 4).Err(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, w, job)
	if _, err := job.Fold(ctx, epoch, 1, ranges); !errors.Is(err, offsets.ErrConflict) || IsRetryable(err) {
		t.Fatalf("Fold over a moved offset = %v, want ErrConflict, not retryable", err)
	}
	sameSnapshot(t, "a conflicting fold", before, snapshot(t, w, job))

	// The same for a range that is not in the logged plan…
	if err := w.Client().HSet(ctx, job.keys.offsets(), "in/2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, w, job)
	other := append(ranges[:2:2], record.Range{Topic: "in", Partition: 2, From: 0, To: 9})
	if _, err := job.Fold(ctx, epoch, 1, other); !errors.Is(err, offsets.ErrConflict) {
		t.Fatalf("Fold of an unplanned range = %v, want ErrConflict", err)
	}
	// …a batch that did not log these ranges…
	if _, err := job.Fold(ctx, epoch, 2, ranges); !errors.Is(err, offsets.ErrConflict) {
		t.Fatalf("Fold of an unlogged batch = %v, want ErrConflict", err)
	}
	// …a partition nothing was logged for…
	never := append(ranges[:3:3], record.Range{Topic: "in", Partition: 5, From: 0, To: 10})
	if _, err := job.Fold(ctx, epoch, 1, never); !errors.Is(err, ErrMissing) {
		t.Fatalf("Fold of a partition without a logged range = %v, want ErrMissing", err)
	}
	sameSnapshot(t, "folds of unplanned ranges", before, snapshot(t, w, job))
	// …a partition without an offset…
	if err := w.Client().HDel(ctx, job.keys.offsets(), "in/1").Err(); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, w, job)
	if _, err := job.Fold(ctx, epoch, 1, ranges); !errors.Is(err, offsets.ErrNoRow) {
		t.Fatalf("Fold without an offset = %v, want ErrNoRow", err)
	}
	sameSnapshot(t, "a fold without an offset row", before, snapshot(t, w, job))
	if err := w.Client().HSet(ctx, job.keys.offsets(), "in/1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// …and a missing contribution.
	if err := w.Client().Del(ctx, job.keys.contrib(ranges[2])).Err(); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, w, job)
	if _, err := job.Fold(ctx, epoch, 1, ranges); !errors.Is(err, ErrMissing) {
		t.Fatalf("Fold without a contribution = %v, want ErrMissing", err)
	}
	sameSnapshot(t, "a fold with a missing contribution", before, snapshot(t, w, job))

	// Written again, the batch folds whole.
	mustWrite(t, w, job, epoch, ranges[2], []Total{{Key: "k", Events: 1, Amount: 10}}, nil)
	mustFold(t, w, job, epoch, 1, ranges, 3)
	wantTotals(t, w, job, map[string]total{"k": {3, 30}})
	if n, err := job.DeadLetterCount(ctx); err != nil || n != 2 {
		t.Fatalf("DeadLetterCount = %d, %v; want 2", n, err)
	}
}

// TestRedisFoldPastInt64: a fold whose sums leave int64 (the stored total
// near the bound, increments from several ranges, and one range's own sum
// past int64) stores them exactly as decimal text, and a total that comes
// back into int64 is one HINCRBY takes again.
func TestRedisFoldPastInt64(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)
	const max, min = math.MaxInt64, math.MinInt64
	mustWrite(t, w, job, epoch, ranges[0], []Total{{Key: "a", Events: 1, Amount: 1}, {Key: "z", Events: 1, Amount: 1 << 40},
		{Key: "n", Events: 1, Amount: -5}, {Key: "w", Events: 1, Amount: max}, {Key: "w", Events: 1, Amount: max}}, nil)
	mustWrite(t, w, job, epoch, ranges[1], []Total{{Key: "z", Events: 2, Amount: max}, {Key: "n", Events: 1, Amount: min},
		{Key: "back", Events: 1, Amount: -10}}, nil)
	for k, v := range map[string]string{"z": fmt.Sprint(int64(max - (1 << 30))), "n": fmt.Sprint(int64(min + 3)), "back": "9223372036854775808"} {
		if err := w.Client().HSet(ctx, AmountKey(job.Name()), k, v).Err(); err != nil {
			t.Fatal(err)
		}
		if err := w.Client().HSet(ctx, EventsKey(job.Name()), k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mustFold(t, w, job, epoch, 1, ranges, 2)
	want := map[string]string{
		"a":    "1",
		"z":    bigSum(max-(1<<30), 1<<40, max),
		"n":    bigSum(min+3, -5, min),
		"w":    bigSum(max, max),
		"back": "9223372036854775798",
	}
	got, err := w.Client().HGetAll(ctx, AmountKey(job.Name())).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("amounts = %v, want %v", got, want)
	}
	if ev := w.Client().HGet(ctx, EventsKey(job.Name()), "z").Val(); ev != "3" {
		t.Fatalf("events of z = %s, want 3", ev)
	}
	// A plain HINCRBY works on the total that came back into int64.
	if n, err := w.Client().HIncrBy(ctx, AmountKey(job.Name()), "back", 1).Result(); err != nil || n != max-8 {
		t.Fatalf("HINCRBY back = %d, %v", n, err)
	}
	ev, am, keys, err := job.Totals(ctx)
	wantSum, _ := new(big.Int).SetString(bigSum(1, max-(1<<30), 1<<40, max, min+3, -5, min, max, max, max-8), 10)
	if err != nil || ev != 9 || am.Cmp(wantSum) != 0 || keys != 5 {
		t.Fatalf("Totals = %d %s %d, %v; want 9 %s 5", ev, am, keys, err, wantSum)
	}
}

// TestRedisFoldPastInt64ChangesNothingOnError: a fold that fails (a stored
// value that is no integer) after it computed exact sums past int64 writes
// none of them.
func TestRedisFoldPastInt64ChangesNothingOnError(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)
	mustWrite(t, w, job, epoch, ranges[0], []Total{{Key: "z", Events: 1, Amount: math.MaxInt64}}, nil)
	mustWrite(t, w, job, epoch, ranges[1], []Total{{Key: "zz", Events: 1, Amount: 1}}, nil)
	if err := w.Client().HSet(ctx, AmountKey(job.Name()), "z", "9223372036854775807", "zz", "007").Err(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, w, job)
	if _, err := job.Fold(ctx, epoch, 1, ranges); err == nil || !strings.Contains(err.Error(), "not an integer") || IsRetryable(err) {
		t.Fatalf("Fold onto a stored 007 = %v, want a non-retryable not-an-integer error", err)
	}
	sameSnapshot(t, "a failed fold", before, snapshot(t, w, job))
}

// TestRedisBigAdd checks the fold's Lua arithmetic against math/big on
// Redis itself: random integers of up to 40 digits and the int64 edges.
func TestRedisBigAdd(t *testing.T) {
	w := openRedisSink(t)
	script := redis.NewScript(exactLua + `
local out = {}
for i = 1, #ARGV, 2 do
  if not isint(ARGV[i]) or not isint(ARGV[i + 1]) then
    return redis.error_reply('not canonical: ' .. ARGV[i] .. ' ' .. ARGV[i + 1])
  end
  out[#out + 1] = bigadd(ARGV[i], ARGV[i + 1])
end
return out
`)
	rng := rand.New(rand.NewPCG(1, 2))
	edges := []string{"0", "1", "-1", "9", "-10", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
		"99999999999999999999", "-100000000000000000000"}
	randInt := func() *big.Int {
		if rng.IntN(4) == 0 {
			b, _ := new(big.Int).SetString(edges[rng.IntN(len(edges))], 10)
			return b
		}
		d := make([]byte, 1+rng.IntN(40))
		for i := range d {
			d[i] = byte('0' + rng.IntN(10))
		}
		b, _ := new(big.Int).SetString(string(d), 10)
		if rng.IntN(2) == 0 {
			b.Neg(b)
		}
		return b
	}
	var args []any
	var want []string
	for range 2000 {
		a, b := randInt(), randInt()
		args = append(args, a.String(), b.String())
		want = append(want, new(big.Int).Add(a, b).String())
	}
	for _, e := range edges { // x + -x
		neg := new(big.Int)
		neg.SetString(e, 10)
		args = append(args, e, neg.Neg(neg).String())
		want = append(want, "0")
	}
	got, err := script.Run(t.Context(), w.Client(), nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bigadd(%s, %s) = %s, want %s", args[2*i], args[2*i+1], got[i], want[i])
		}
	}
}

func TestRedisDeadLettersMoveWithTheFold(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	r := ranges[0]
	payload := []byte{0, 1, 2, 0xff, '"', '\n'}
	dls := []record.DeadLetter{
		{Topic: "in", Partition: 0, Offset: 3, Reason: "bad json", Payload: payload},
		{Topic: "in", Partition: 0, Offset: 9, Reason: strings.Repeat("é", writers.MaxReasonBytes), Payload: nil},
	}
	if err := job.WriteContribution(ctx, epoch, r, nil, append(dls, record.DeadLetter{Topic: "in", Partition: 0, Offset: 10})); err == nil {
		t.Fatal("a dead letter outside the range was accepted")
	}
	mustWrite(t, w, job, epoch, r, []Total{{Key: "k", Events: 8, Amount: 80}}, dls)
	if n, _ := job.DeadLetterCount(ctx); n != 0 {
		t.Fatalf("%d dead letters visible before the fold", n)
	}
	mustFold(t, w, job, epoch, 1, ranges, 1)
	if n, err := job.DeadLetterCount(ctx); err != nil || n != 2 {
		t.Fatalf("DeadLetterCount = %d, %v; want 2", n, err)
	}
	raw, err := w.Client().HGet(ctx, job.keys.dead("in", "0"), "3").Result()
	if err != nil {
		t.Fatal(err)
	}
	var d deadLetterJSON
	if err := json.Unmarshal([]byte(raw), &d); err != nil || d.Reason != "bad json" || string(d.Payload) != string(payload) {
		t.Fatalf("dead letter 3 = %s (%v)", raw, err)
	}
	raw = w.Client().HGet(ctx, job.keys.dead("in", "0"), "9").Val()
	if err := json.Unmarshal([]byte(raw), &d); err != nil || len(d.Reason) > writers.MaxReasonBytes {
		t.Fatalf("dead letter 9's reason not cut to %d bytes: %d (%v)", writers.MaxReasonBytes, len(d.Reason), err)
	}
}

// TestRedisDeadLetterReasonsNotUTF8: a dead letter's value in Redis is
// JSON, where a reason that is not UTF-8 would come back with U+FFFD in
// place of its bad bytes: they are stored escaped (\xff), cut at a
// character boundary, and the payload stays exact.
func TestRedisDeadLetterReasonsNotUTF8(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	r := ranges[0]
	long := strings.Repeat("é", 509) + "x\xff" + strings.Repeat("\xfe", 10)
	cases := map[int64][2]string{ // offset: reason, stored reason
		1: {"decode: invalid key \"page-\xff\"", `decode: invalid key "page-\xff"`},
		2: {long, strings.Repeat("é", 509) + `x\xff`},
	}
	var dls []record.DeadLetter
	for off, c := range cases {
		dls = append(dls, record.DeadLetter{Topic: "in", Partition: 0, Offset: off, Reason: c[0], Payload: []byte(c[0])})
	}
	mustWrite(t, w, job, epoch, r, nil, dls)
	mustFold(t, w, job, epoch, 1, ranges, 1)
	for off, c := range cases {
		raw, err := w.Client().HGet(ctx, job.keys.dead("in", "0"), strconv.FormatInt(off, 10)).Result()
		if err != nil {
			t.Fatal(err)
		}
		var d deadLetterJSON
		if err := json.Unmarshal([]byte(raw), &d); err != nil {
			t.Fatal(err)
		}
		if d.Reason != c[1] || string(d.Payload) != c[0] {
			t.Errorf("dead letter %d: reason %q, payload %q; want reason %q, payload %q", off, d.Reason, d.Payload, c[1], c[0])
		}
	}
}

// A crash after the contributions were written and before the fold: a new
// instance claims the job, re-runs the logged plan (not a new one, although
// more records may have arrived) and folds. The old instance can't fold
// any more.
func TestRedisCrashRecovery(t *testing.T) {
	dsn := redisTestDSN(t)
	ctx := t.Context()
	first, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	job := redisJob(t, first)
	epoch1, ranges := jobSetup(t, first, job, 2, 100)
	// The batch's result is a function of its records, so a replay writes
	// the same contributions.
	contrib := func(r record.Range) []Total {
		var ts []Total
		for off := r.From; off < r.To; off++ {
			ts = append(ts, Total{Key: fmt.Sprintf("k%d", off%7), Events: 1, Amount: off})
		}
		return ts
	}
	mustWrite(t, first, job, epoch1, ranges[0], contrib(ranges[0]), nil)
	mustWrite(t, first, job, epoch1, ranges[1], contrib(ranges[1]), nil)
	first.Close() // the crash: no fold

	second := openRedisSink(t)
	epoch2, err := on(second, job).Claim(ctx)
	if err != nil || epoch2 <= epoch1 {
		t.Fatalf("Claim = %d, %v; want > %d", epoch2, err, epoch1)
	}
	// A reader during recovery sees the batch not at all, never twice.
	wantTotals(t, second, job, nil)
	id, plan, ok, err := on(second, job).LastPlan(ctx)
	if err != nil || !ok || id != 1 || !reflect.DeepEqual(plan, ranges) {
		t.Fatalf("LastPlan = %d %v %v, %v; want batch 1 %v", id, plan, ok, err, ranges)
	}
	for _, r := range plan {
		mustWrite(t, second, job, epoch2, r, contrib(r), nil)
	}
	mustFold(t, second, job, epoch2, id, plan, 2)

	want := make(map[string]total)
	for _, r := range ranges {
		for off := r.From; off < r.To; off++ {
			k := fmt.Sprintf("k%d", off%7)
			want[k] = total{want[k].events + 1, want[k].amount + off}
		}
	}
	wantTotals(t, second, job, want)
	wantOffsets(t, second, job, map[int32]int64{0: 100, 1: 100})

	// The old instance, back from the dead, is fenced.
	zombie := openRedisSink(t)
	if _, err := on(zombie, job).Fold(ctx, epoch1, 1, ranges); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("zombie Fold = %v, want ErrFenced", err)
	}
	wantTotals(t, second, job, want)
}

func TestRedisManyKeys(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 2, 20000)
	const keys = 10000
	for i, r := range ranges {
		ts := make([]Total, keys)
		for k := range ts {
			ts[k] = Total{Key: fmt.Sprintf("key-%05d", k), Events: int64(i + 1), Amount: int64(k)}
		}
		mustWrite(t, w, job, epoch, r, ts, nil)
	}
	mustFold(t, w, job, epoch, 1, ranges, 2)
	got := readRedisTotals(t, w, job)
	if len(got) != keys {
		t.Fatalf("%d keys, want %d", len(got), keys)
	}
	for k := range keys {
		name := fmt.Sprintf("key-%05d", k)
		if got[name] != (total{3, 2 * int64(k)}) {
			t.Fatalf("%s = %v, want {3 %d}", name, got[name], 2*k)
		}
	}
	ev, am, n, err := job.Totals(t.Context())
	if err != nil || ev != 3*keys || am.Cmp(big.NewInt(keys*(keys-1))) != 0 || n != keys {
		t.Fatalf("Totals = %d %d %d, %v", ev, am, n, err)
	}
}

func TestRedisConnectionCut(t *testing.T) {
	direct := openRedisSink(t)
	opts, _, err := ParseDSN(redisTestDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	p := testutil.StartCutProxy(t, opts.Addr)
	opts.Addr = p.Addr()
	opts.PoolSize = 1
	w := New(redis.NewClient(opts))
	defer w.Close()
	ctx := t.Context()
	job := redisJob(t, direct)
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	mustWrite(t, w, job, epoch, ranges[0], []Total{{Key: "k", Events: 10, Amount: 100}}, nil)

	// The fold runs, its reply is lost: outcome unknown, retryable.
	p.DropReplies(true)
	_, err = on(w, job).Fold(ctx, epoch, 1, ranges)
	if err == nil {
		t.Fatal("Fold succeeded although its reply was dropped")
	}
	if !IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false for a cut connection", err)
	}
	wantOffsets(t, direct, job, map[int32]int64{0: 10}) // it did land
	p.DropReplies(false)
	// The retry is harmless.
	mustFold(t, w, job, epoch, 1, ranges, 0)
	wantTotals(t, direct, job, map[string]total{"k": {10, 100}})

	// Redis gone: connection refused, retryable.
	p.Close()
	_, err = on(w, job).Claim(ctx)
	if err == nil || !IsRetryable(err) {
		t.Fatalf("Claim with Redis gone = %v, want a retryable error", err)
	}
}

func TestIsRetryable(t *testing.T) {
	w := openRedisSink(t)
	ctx := t.Context()
	// Real error replies from the server, with the codes Redis uses.
	reply := func(msg string) error {
		return w.Client().Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
	job := redisJob(t, w)
	if _, err := job.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	_, fenceErr := job.Fold(ctx, 0, 1, []record.Range{{Topic: "in", From: 0, To: 1}})
	scriptErr := w.Client().Eval(ctx, "return redis.call('NOSUCHCOMMAND')", nil).Err()
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"LOADING", reply("LOADING Redis is loading the dataset in memory"), true},
		{"TRYAGAIN", reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"BUSY", reply("BUSY Redis is busy running a script"), true},
		{"READONLY", reply("READONLY You can't write against a read only replica."), true},
		{"CLUSTERDOWN", reply("CLUSTERDOWN The cluster is down"), true},
		{"OOM", reply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{"WRONGTYPE", reply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{"script error", scriptErr, false},
		{"fenced", fenceErr, false},
		{"conflict", fmt.Errorf("folding: %w", offsets.ErrConflict), false},
		{"missing", fmt.Errorf("folding: %w", ErrMissing), false},
		{"EOF", fmt.Errorf("folding: %w", io.EOF), true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"net error", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("reset")}, true},
		{"pool timeout", redis.ErrPoolTimeout, true},
		{"closed client", redis.ErrClosed, false},
		{"canceled", fmt.Errorf("x: %w", errors.Join(io.EOF, context.Canceled)), false},
	}
	if !errors.Is(fenceErr, offsets.ErrFenced) {
		t.Fatalf("setup: Fold with epoch 0 after a claim = %v, want ErrFenced", fenceErr)
	}
	for _, c := range cases {
		if c.err == nil && c.name != "nil" {
			t.Fatalf("%s: setup produced no error", c.name)
		}
		if got := IsRetryable(c.err); got != c.want {
			t.Errorf("%s: IsRetryable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
