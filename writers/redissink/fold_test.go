package redissink

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
)

// The fold: contributions into the users' totals, atomically or not at
// all, exactly past int64.

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
