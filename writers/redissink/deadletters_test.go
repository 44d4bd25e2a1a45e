package redissink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// bigDead is the dead letter at offset off with a payload of size bytes
// that differs per offset.
func bigDead(off int64, size int) record.DeadLetter {
	p := bytes.Repeat([]byte{byte('a' + off%26)}, size)
	copy(p, fmt.Sprintf("<%d>", off))
	return record.DeadLetter{Topic: "in", Partition: 0, Offset: off, Reason: fmt.Sprintf("bad %d", off), Payload: p}
}

// wantDead checks that the folded dead letters of partition 0 are exactly
// those of offs, whole.
func wantDead(t *testing.T, w *Sink, job *Job, size int, offs ...int64) {
	t.Helper()
	job = on(w, job)
	ctx := t.Context()
	key := job.keys.dead("in", "0")
	if n := w.Client().HLen(ctx, key).Val(); n != int64(len(offs)) {
		t.Errorf("%d dead letters folded, want %d", n, len(offs))
	}
	for _, off := range offs {
		raw, err := w.Client().HGet(ctx, key, fmt.Sprint(off)).Bytes()
		if err != nil {
			t.Errorf("dead letter %d: %v", off, err)
			continue
		}
		var d deadLetterJSON
		want := bigDead(off, size)
		if err := json.Unmarshal(raw, &d); err != nil || d.Reason != want.Reason || !bytes.Equal(d.Payload, want.Payload) {
			t.Errorf("dead letter %d: reason %q, %d payload bytes (%.10q…), %v; want %q and its %d bytes",
				off, d.Reason, len(d.Payload), d.Payload, err, want.Reason, size)
		}
	}
}

// wantStagedCountChecked checks that a fold refuses staged dead letters
// that don't match the contribution's count, and changes nothing: it drops
// one of batch 1's staged dead letters for the fold, then puts it back.
func wantStagedCountChecked(t *testing.T, w *Sink, job *Job, epoch int64, ranges []record.Range) {
	t.Helper()
	ctx := t.Context()
	staged := job.keys.contribDead(ranges[0])
	val := w.Client().HGet(ctx, staged, "3").Val()
	if err := w.Client().HDel(ctx, staged, "3").Err(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, w, job)
	if _, err := job.Fold(ctx, epoch, 1, ranges); err == nil || !strings.Contains(err.Error(), "MBCORRUPT") || IsRetryable(err) {
		t.Fatalf("Fold with a staged dead letter missing = %v, want a non-retryable MBCORRUPT error", err)
	}
	sameSnapshot(t, "a fold of incomplete staged dead letters", before, snapshot(t, w, job))
	if err := w.Client().HSet(ctx, staged, "3", val).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRedisStagedDeadLetters: a contribution's dead letters written in
// steps ahead of it (Contribution) are invisible until the fold, which
// moves them all with the totals and offsets at once; a contribution whose
// staged dead letters don't add up is refused whole; writing the range
// again starts from nothing; a folded range takes no more.
func TestRedisStagedDeadLetters(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 40)
	r := ranges[0]
	const size = 300 << 10 // 20 take more than one staging call
	staged := job.keys.contribDead(r)

	// A first attempt stages offsets 0..19 and 30 (say, its decode failed
	// on 30 for a reason that went away), then dies before its totals.
	first, err := job.NewContribution(epoch, r)
	if err != nil {
		t.Fatal(err)
	}
	var dls []record.DeadLetter
	for off := range int64(20) {
		dls = append(dls, bigDead(off, size))
	}
	if err := first.DeadLetters(ctx, append(dls, bigDead(30, size))); err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	if n := w.Client().HLen(ctx, staged).Val(); n != 21 {
		t.Fatalf("%d dead letters staged, want 21", n)
	}
	before := snapshot(t, w, job)
	if _, err := job.Fold(ctx, epoch, 1, ranges); !errors.Is(err, ErrMissing) {
		t.Fatalf("Fold of a contribution still being written = %v, want ErrMissing", err)
	}
	sameSnapshot(t, "a fold of a half-written contribution", before, snapshot(t, w, job))

	// The replay: offsets 0..19 staged in two calls, 20..24 with the totals.
	c, err := job.NewContribution(epoch, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeadLetters(ctx, dls[:7]); err != nil {
		t.Fatal(err)
	}
	if err := c.DeadLetters(ctx, dls[7:]); err != nil {
		t.Fatal(err)
	}
	var rest []record.DeadLetter
	for off := int64(20); off < 25; off++ {
		rest = append(rest, bigDead(off, size))
	}
	if err := c.Totals(ctx, []Total{{Key: "k", Events: 15, Amount: 150}}, rest); err != nil {
		t.Fatalf("Totals: %v", err)
	}
	if n := w.Client().HLen(ctx, staged).Val(); n != 25 {
		t.Fatalf("%d dead letters staged, want 25 (the first attempt's 30 dropped)", n)
	}
	if n, _ := job.DeadLetterCount(ctx); n != 0 {
		t.Fatalf("%d dead letters visible before the fold", n)
	}
	wantTotals(t, w, job, nil)

	wantStagedCountChecked(t, w, job, epoch, ranges)
	mustFold(t, w, job, epoch, 1, ranges, 1)
	wantTotals(t, w, job, map[string]total{"k": {15, 150}})
	wantOffsets(t, w, job, map[int32]int64{0: 40})
	var all []int64
	for off := range int64(25) {
		all = append(all, off)
	}
	wantDead(t, w, job, size, all...)
	if n := w.Client().Exists(ctx, staged, job.keys.contrib(r)).Val(); n != 0 {
		t.Errorf("%d of the contribution's keys left after the fold", n)
	}

	// A late attempt at the folded range writes nothing.
	late, err := job.NewContribution(epoch, r)
	if err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, w, job)
	if err := late.DeadLetters(ctx, dls); err != nil {
		t.Fatalf("DeadLetters after the fold: %v", err)
	}
	if err := late.Totals(ctx, []Total{{Key: "k", Events: 1}}, rest); err != nil {
		t.Fatalf("Totals after the fold: %v", err)
	}
	sameSnapshot(t, "a write of a folded range", before, snapshot(t, w, job))
}

// TestRedisLargeContribution: WriteContribution stages a large set of dead
// letters by itself, a small one stays inline, and a staged write is
// fenced like the rest.
func TestRedisLargeContribution(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 40)
	const size = 1 << 20
	var big []record.DeadLetter
	for off := range int64(3) {
		big = append(big, bigDead(off, size))
	}
	mustWrite(t, w, job, epoch, ranges[0], nil, big)
	if n := w.Client().HLen(ctx, job.keys.contribDead(ranges[0])).Val(); n != 3 {
		t.Fatalf("%d of 3 MiB of dead letters staged, want all 3", n)
	}
	small := []record.DeadLetter{{Topic: "in", Partition: 1, Offset: 5, Reason: "bad", Payload: []byte("x")}}
	mustWrite(t, w, job, epoch, ranges[1], nil, small)
	if n := w.Client().Exists(ctx, job.keys.contribDead(ranges[1])).Val(); n != 0 {
		t.Fatalf("one small dead letter was staged, want it inline")
	}
	mustFold(t, w, job, epoch, 1, ranges, 2)
	wantDead(t, w, job, size, 0, 1, 2)
	if n, err := job.DeadLetterCount(ctx); err != nil || n != 4 {
		t.Fatalf("DeadLetterCount = %d, %v; want 4", n, err)
	}

	// Batch 2, staged by an instance that lost the job meanwhile.
	next := []record.Range{{Topic: "in", Partition: 0, From: 40, To: 60}}
	if err := job.LogPlan(ctx, epoch, 2, next); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := job.NewContribution(epoch, next[0])
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, w, job)
	if err := c.DeadLetters(ctx, []record.DeadLetter{bigDead(41, 10)}); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("DeadLetters with a stale epoch = %v, want ErrFenced", err)
	}
	sameSnapshot(t, "a fenced staging", before, snapshot(t, w, job))
}

// TestRedisResetDropsStagedDeadLetters: an offsets reset drops a pending
// range's staged dead letters with its contribution.
func TestRedisResetDropsStagedDeadLetters(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 40)
	c, err := job.NewContribution(epoch, ranges[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeadLetters(ctx, []record.DeadLetter{bigDead(3, 10)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := job.ResetOffsets(ctx, "in", map[int32]int64{0: 0}); err != nil {
		t.Fatal(err)
	}
	if n := w.Client().Exists(ctx, job.keys.contribDead(ranges[0])).Val(); n != 0 {
		t.Errorf("staged dead letters left after the reset")
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
