package redissink

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
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

func TestRedisIsRetryable(t *testing.T) {
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
