package redissink

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/values"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// Per-column rules (writers.Upsert.Merges) in Redis: "a:" sums, "n:" least,
// "x:" greatest, "s:"/"u:" replace; nil is no value.

// rowsPerColumn is a SQL job's upsert: COUNT, SUM, MIN, MAX and a
// replaced column.
var rowsPerColumn = writers.Upsert{Table: "agg", Keys: []string{"k"}, Values: []string{"n", "s", "lo", "hi", "last"},
	Merges: []writers.Merge{writers.MergeAdd, writers.MergeAdd, writers.MergeMin, writers.MergeMax, writers.MergeReplace}}

const past2to63 = "9223372036854775808" // 2^63

func wantAgg(t *testing.T, w *Sink, job *Job, want map[string]map[string]string) {
	t.Helper()
	for _, col := range rowsPerColumn.Values {
		wantRows(t, w, job, "agg", col, want[col])
	}
}

func TestRedisRowsPerColumn(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)

	// Rows of one key in a contribution combine first; nil adds and
	// compares nothing.
	first := [][]any{
		{"a", 1, "15", "2.25", "-3", "x"},
		{"a", 1, past2to63, "-0.5", "0.000000001", nil},
		{"a", nil, nil, nil, nil, "y"},
		{"b", nil, nil, nil, nil, nil},
		{"c", 2, "-7", "-12.50", past2to63 + "0.5", "z"},
	}
	mustWriteRows(t, w, job, epoch, ranges[0], rowsPerColumn, first, nil)
	contrib, err := w.Client().HGetAll(ctx, job.keys.contrib(ranges[0])).Result()
	if err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{
		"a:agg:n\x00a": "2", "a:agg:s\x00a": "9223372036854775823", "n:agg:lo\x00a": "-0.5", "x:agg:hi\x00a": "0.000000001", "s:agg:last\x00a": "y",
		"u:agg:last\x00b": "", "n:agg:lo\x00c": "-12.50", "x:agg:hi\x00c": past2to63 + "0.5",
	} {
		if contrib[f] != v {
			t.Errorf("contribution field %q = %q, want %q (all: %q)", f, contrib[f], v, contrib)
		}
	}
	for _, f := range []string{"n:agg:lo\x00b", "a:agg:n\x00b", "x:agg:hi\x00b", "s:agg:last\x00b"} {
		if _, ok := contrib[f]; ok {
			t.Errorf("contribution has %q for a key with only nil values", f)
		}
	}
	// Written twice (a replay of the range): replaced, not added to.
	second := [][]any{{"a", 3, "10", "2", "5", nil}, {"c", 1, "1", "-12.5", "1", nil}, {"d", 1, nil, nil, nil, nil}}
	mustWriteRows(t, w, job, epoch, ranges[1], rowsPerColumn, second, nil)
	mustWriteRows(t, w, job, epoch, ranges[1], rowsPerColumn, second, nil)
	mustFoldRows(t, w, job, epoch, 1, ranges, rowsPerColumn, 2)
	wantAgg(t, w, job, map[string]map[string]string{
		"n":    {"a": "5", "c": "3", "d": "1"},
		"s":    {"a": "9223372036854775833", "c": "-6"},
		"lo":   {"a": "-0.5", "c": "-12.50"}, // -12.5 equals the stored -12.50: kept as stored
		"hi":   {"a": "5", "c": past2to63 + "0.5"},
		"last": nil, // the second range replaced them with nil
	})

	// The next batch merges into what is stored: a least that differs far
	// into the fraction, a greatest past 2^63, a replaced nil deletes.
	next := []record.Range{{Topic: "in", Partition: 0, From: 10, To: 20}}
	if err := job.LogPlan(ctx, epoch, 2, next); err != nil {
		t.Fatal(err)
	}
	mustWriteRows(t, w, job, epoch, next[0], rowsPerColumn, [][]any{
		{"a", nil, "-9223372036854775819", "-0.500000001", "18446744073709551616", nil},
		{"c", 1, nil, "-12.49", "9223372036854775808.4999", "w"},
		{"d", nil, nil, "0", "-1", "v"},
	}, nil)
	mustFoldRows(t, w, job, epoch, 2, next, rowsPerColumn, 1)
	wantAgg(t, w, job, map[string]map[string]string{
		"n":    {"a": "5", "c": "4", "d": "1"},
		"s":    {"a": "14", "c": "-6"},
		"lo":   {"a": "-0.500000001", "c": "-12.50", "d": "0"},
		"hi":   {"a": "18446744073709551616", "c": past2to63 + "0.5", "d": "-1"},
		"last": {"c": "w", "d": "v"},
	})
	// Replayed after the fold: the write is skipped and the fold changes nothing.
	before := snapshot(t, w, job)
	mustWriteRows(t, w, job, epoch, next[0], rowsPerColumn, [][]any{{"a", 1, "1", "-100", "100", "again"}}, nil)
	mustFoldRows(t, w, job, epoch, 2, next, rowsPerColumn, 0)
	sameSnapshot(t, "a replayed write and fold", before, snapshot(t, w, job))
}

// A stored least or greatest that is not a decimal is refused before the
// fold writes anything, though the fold meets fields it could write first.
func TestRedisRowsPerColumnCorrupt(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)
	mustWriteRows(t, w, job, epoch, ranges[0], rowsPerColumn, [][]any{{"a", 1, "1", "1", "1", "x"}}, nil)
	mustWriteRows(t, w, job, epoch, ranges[1], rowsPerColumn, [][]any{{"b", 1, "1", "1", "1", "x"}}, nil)
	for _, stored := range []string{"1e3", "abc", "", ".5", "1.", "0x10", "--1"} {
		if err := w.Client().HSet(ctx, RowsKey(job.Name(), "agg", "hi"), "b", stored).Err(); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, w, job)
		_, err := job.FoldRows(ctx, epoch, 1, ranges, rowsPerColumn)
		if err == nil || !strings.Contains(err.Error(), "not a decimal") || IsRetryable(err) {
			t.Fatalf("FoldRows onto a stored %q = %v, want a non-retryable not-a-decimal error", stored, err)
		}
		sameSnapshot(t, "a fold onto a stored "+stored, before, snapshot(t, w, job))
	}
	if err := w.Client().HSet(ctx, RowsKey(job.Name(), "agg", "hi"), "b", "-007.50").Err(); err != nil {
		t.Fatal(err)
	}
	mustFoldRows(t, w, job, epoch, 1, ranges, rowsPerColumn, 2)
	wantRows(t, w, job, "agg", "hi", map[string]string{"a": "1", "b": "1"})
}

// Contributions that merge one field by two rules in one fold (written by
// jobs with other rules for the column) are refused before anything is
// written: an add after a kept fraction would fail half-way.
func TestRedisRowsPerColumnRulesConflict(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)
	asMax := writers.Upsert{Table: "agg", Keys: []string{"k"}, Values: []string{"s"}, Merges: []writers.Merge{writers.MergeMax}}
	asAdd := writers.Upsert{Table: "agg", Keys: []string{"k"}, Values: []string{"s"}, Merges: []writers.Merge{writers.MergeAdd}}
	mustWriteRows(t, w, job, epoch, ranges[0], asMax, [][]any{{"a", "0.5"}}, nil)
	mustWriteRows(t, w, job, epoch, ranges[1], asAdd, [][]any{{"a", 1}}, nil)
	before := snapshot(t, w, job)
	if _, err := job.FoldRows(ctx, epoch, 1, ranges, asAdd); !errors.Is(err, offsets.ErrConflict) {
		t.Fatalf("FoldRows of one field by two rules = %v, want ErrConflict", err)
	}
	sameSnapshot(t, "a fold by two rules", before, snapshot(t, w, job))
}

func TestRedisRowsPerColumnBadValues(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	before := snapshot(t, w, job)
	for _, c := range []struct {
		name string
		row  []any
		want string
	}{
		{"fraction in a sum", []any{"a", 1, "0.5", "1", "1", nil}, "agg.s"},
		{"float in a sum", []any{"a", 1, 0.5, "1", "1", nil}, "agg.s"},
		{"text in a count", []any{"a", "many", "1", "1", "1", nil}, "agg.n"},
		{"float in a least", []any{"a", 1, "1", 1.5, "1", nil}, "agg.lo"},
		{"exponent in a greatest", []any{"a", 1, "1", "1", "1e3", nil}, "agg.hi"},
		{"bare point in a least", []any{"a", 1, "1", ".5", "1", nil}, "agg.lo"},
		{"nil key", []any{nil, 1, "1", "1", "1", nil}, "key value"},
	} {
		err := job.WriteRowsContribution(ctx, epoch, ranges[0], rowsPerColumn, [][]any{{"ok", 1, "1", "1", "1", nil}, c.row}, nil)
		if !errors.Is(err, ErrValue) || !strings.Contains(err.Error(), c.want) || IsRetryable(err) {
			t.Errorf("%s: WriteRowsContribution = %v, want a non-retryable ErrValue mentioning %q", c.name, err, c.want)
		}
	}
	sameSnapshot(t, "refused rows", before, snapshot(t, w, job))
}

// TestRedisDecCmp checks the fold's Lua decimal comparison against
// values.CompareDecimal and math/big on Redis itself.
func TestRedisDecCmp(t *testing.T) {
	w := openRedisSink(t)
	script := redis.NewScript(exactLua + `
local out = {}
for i = 1, #ARGV, 2 do
  if not isdec(ARGV[i]) or not isdec(ARGV[i + 1]) then
    return redis.error_reply('not a decimal: ' .. ARGV[i] .. ' ' .. ARGV[i + 1])
  end
  out[#out + 1] = deccmp(ARGV[i], ARGV[i + 1])
end
return out
`)
	rng := rand.New(rand.NewPCG(3, 4))
	edges := []string{"0", "-0", "+0", "0.0", "-0.000", "1", "-1", "1.0", "0.1", "0.10", "0.01", "-0.1", "007", "7.000",
		"9007199254740993", "9007199254740992.5", past2to63, "-" + past2to63 + ".000000001", "99999999999999999999999999999.999999999"}
	digits := func(n int) string {
		d := make([]byte, n)
		for i := range d {
			d[i] = byte('0' + rng.IntN(10))
		}
		return string(d)
	}
	randDec := func() string {
		if rng.IntN(4) == 0 {
			return edges[rng.IntN(len(edges))]
		}
		s := digits(1 + rng.IntN(25))
		if rng.IntN(2) == 0 {
			s += "." + digits(1+rng.IntN(12))
		}
		switch rng.IntN(3) {
		case 0:
			s = "-" + s
		case 1:
			s = "+" + s
		}
		return s
	}
	var args []any
	var want []int64
	for range 3000 {
		a, b := randDec(), randDec()
		if rng.IntN(8) == 0 {
			b = a + "0" // differs only in a trailing zero (or a digit)
			if !strings.Contains(a, ".") {
				b = a + ".0"
			}
		}
		ra, _ := new(big.Rat).SetString(a)
		rb, _ := new(big.Rat).SetString(b)
		c := ra.Cmp(rb)
		if got := values.CompareDecimal(a, b); got != c {
			t.Fatalf("CompareDecimal(%s, %s) = %d, math/big says %d", a, b, got, c)
		}
		args = append(args, a, b)
		want = append(want, int64(c))
	}
	got, err := script.Run(t.Context(), w.Client(), nil, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("deccmp(%s, %s) = %d, want %d", args[2*i], args[2*i+1], got[i], want[i])
		}
	}
	bad, err := redis.NewScript(exactLua+`
local out = {}
for i = 1, #ARGV do
  if isdec(ARGV[i]) then out[#out + 1] = ARGV[i] end
end
return out
`).Run(t.Context(), w.Client(), nil, "1e3", "", ".5", "5.", "--1", "+-1", "1.2.3", " 1", "1 ", "0x10", "١").StringSlice()
	if err != nil || len(bad) != 0 {
		t.Fatalf("isdec took %q (%v)", bad, err)
	}
}

// MergeAdd takes integers of any size exactly, as Go integers or decimal
// text, with or without per-column rules.
func TestRedisRowsAddIntegerText(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	mustWriteRows(t, w, job, epoch, ranges[0], rowsAdd, [][]any{
		{"a", uint64(1<<64 - 1), "-100000000000000000000"}, {"a", "+1", "7.000"}, {"b", uint(1), "-0"},
	}, nil)
	mustFoldRows(t, w, job, epoch, 1, ranges, rowsAdd, 1)
	wantRows(t, w, job, "per_key", "n", map[string]string{"a": "18446744073709551616", "b": "1"})
	wantRows(t, w, job, "per_key", "total", map[string]string{"a": "-99999999999999999993", "b": "0"})
}

// MergeMinBytes and MergeMaxBytes keep the least and the greatest string
// byte by byte ("B" < "a" < "a " < "ab" < "é"), within a contribution
// and in the fold, across folds.
func TestRedisRowsBytes(t *testing.T) {
	u := writers.Upsert{Table: "names", Keys: []string{"k"}, Values: []string{"lo", "hi"},
		Merges: []writers.Merge{writers.MergeMinBytes, writers.MergeMaxBytes}}
	w := openRedisSink(t)
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 2, 10)
	long := strings.Repeat("x", 200)
	mustWriteRows(t, w, job, epoch, ranges[0], u, [][]any{{"a", "b", "b"}, {"a", "a ", "a "}, {"c", long + "b", long + "a"}, {"d", nil, nil}}, nil)
	mustWriteRows(t, w, job, epoch, ranges[1], u, [][]any{{"a", "B", "é"}, {"c", long + "a", long + "b"}, {"d", "", ""}}, nil)
	mustFoldRows(t, w, job, epoch, 1, ranges, u, 2)
	wantRows(t, w, job, "names", "lo", map[string]string{"a": "B", "c": long + "a", "d": ""})
	wantRows(t, w, job, "names", "hi", map[string]string{"a": "é", "c": long + "b", "d": ""})
	if err := job.WriteRowsContribution(t.Context(), epoch, ranges[0], u, [][]any{{"a", 1, "x"}}, nil); !errors.Is(err, ErrValue) {
		t.Errorf("an integer for MergeMinBytes: %v, want ErrValue", err)
	}
}
