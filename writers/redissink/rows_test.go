package redissink

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// The rows of a user-defined job (WriteRowsContribution, FoldRows): the
// same protocol as the built-in totals, into hashes per value column.

var (
	rowsAdd     = writers.Upsert{Table: "per_key", Keys: []string{"k"}, Values: []string{"n", "total"}, Merge: writers.MergeAdd}
	rowsReplace = writers.Upsert{Table: "last_seen", Keys: []string{"region", "k"}, Values: []string{"at"}, Merge: writers.MergeReplace}
)

func mustWriteRows(t *testing.T, w *Sink, job *Job, epoch int64, r record.Range, u writers.Upsert, rows [][]any, dls []record.DeadLetter) {
	t.Helper()
	job = on(w, job)
	if err := job.WriteRowsContribution(t.Context(), epoch, r, u, rows, dls); err != nil {
		t.Fatalf("WriteRowsContribution %v: %v", r, err)
	}
}

func mustFoldRows(t *testing.T, w *Sink, job *Job, epoch, batch int64, ranges []record.Range, u writers.Upsert, want int) {
	t.Helper()
	job = on(w, job)
	n, err := job.FoldRows(t.Context(), epoch, batch, ranges, u)
	if err != nil {
		t.Fatalf("FoldRows: %v", err)
	}
	if n != want {
		t.Fatalf("FoldRows folded %d ranges, want %d", n, want)
	}
}

func wantRows(t *testing.T, w *Sink, job *Job, table, column string, want map[string]string) {
	t.Helper()
	job = on(w, job)
	got, err := job.Rows(t.Context(), table, column)
	if err != nil {
		t.Fatalf("Rows(%s, %s): %v", table, column, err)
	}
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rows %s.%s = %v, want %v", table, column, got, want)
	}
}

func TestRedisRowField(t *testing.T) {
	at := time.Date(2026, 11, 30, 14, 0, 0, 5, time.FixedZone("CET", 3600))
	for _, c := range []struct {
		keys []any
		want string
	}{
		{[]any{"a:b"}, "a:b"},
		{[]any{int64(-7)}, "-7"},
		{[]any{uint64(math.MaxUint64)}, "18446744073709551615"},
		{[]any{[]byte("x\x00y")}, "x\x00y"},
		{[]any{1.5}, "1.5"},
		{[]any{true}, "true"},
		{[]any{at}, "2026-11-30T13:00:00.000000005Z"},
		{[]any{"eu", "2026-11-30"}, "2:eu10:2026-11-30"},
		// The length prefixes keep these apart, whatever bytes the values hold.
		{[]any{"a1:", "b"}, "3:a1:1:b"},
		{[]any{"a", "1:b"}, "1:a3:1:b"},
		{[]any{"", 7}, "0:1:7"},
	} {
		got, err := RowField(c.keys)
		if err != nil || got != c.want {
			t.Errorf("RowField(%v) = %q, %v; want %q", c.keys, got, err, c.want)
		}
	}
	for _, bad := range [][]any{nil, {nil}, {"a", nil}, {struct{}{}}, {[]int{1}}} {
		if got, err := RowField(bad); !errors.Is(err, ErrValue) {
			t.Errorf("RowField(%v) = %q, %v; want ErrValue", bad, got, err)
		}
	}
}

// Rows with writers.MergeAdd: summed per key in the contribution and into the hash
// by the fold, with the dead letters and the offsets in the same step; a
// contribution written again replaces the first, a second fold adds
// nothing, a fenced epoch writes and folds nothing.
func TestRedisRowsFold(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)

	// Existing keys of the built-in job are not touched.
	before := snapshot(t, w, job)
	mustWriteRows(t, w, job, epoch, ranges[0], rowsAdd, [][]any{{"x", 1, int64(10)}, {"y", 1, 5}, {"x", 1, -3}},
		[]record.DeadLetter{{Topic: "in", Partition: 0, Offset: 4, Reason: "no key", Payload: []byte("{}")}})
	// A replay with the same records writes the same contribution again:
	// the first is replaced, not added to.
	mustWriteRows(t, w, job, epoch, ranges[0], rowsAdd, [][]any{{"x", 1, int64(10)}, {"y", 1, 5}, {"x", 1, -3}},
		[]record.DeadLetter{{Topic: "in", Partition: 0, Offset: 4, Reason: "no key", Payload: []byte("{}")}})
	mustWriteRows(t, w, job, epoch, ranges[1], rowsAdd, [][]any{{"x", uint8(1), int32(100)}, {"z", 2, 0}}, nil)
	wantRows(t, w, job, "per_key", "n", nil) // nothing visible before the fold
	if n, _ := job.DeadLetterCount(ctx); n != 0 {
		t.Fatalf("%d dead letters visible before the fold", n)
	}
	wantOffsets(t, w, job, map[int32]int64{0: 0, 1: 0})

	mustFoldRows(t, w, job, epoch, 1, ranges, rowsAdd, 2)
	wantRows(t, w, job, "per_key", "n", map[string]string{"x": "3", "y": "1", "z": "2"})
	wantRows(t, w, job, "per_key", "total", map[string]string{"x": "107", "y": "5", "z": "0"})
	wantOffsets(t, w, job, map[int32]int64{0: 10, 1: 10})
	if n, err := job.DeadLetterCount(ctx); err != nil || n != 1 {
		t.Fatalf("DeadLetterCount = %d, %v; want 1", n, err)
	}
	if keys, _ := w.Client().Keys(ctx, "mb:{"+job.Name()+"}:contrib:*").Result(); len(keys) != 0 {
		t.Fatalf("contributions left after the fold: %v", keys)
	}
	wantTotals(t, w, job, nil)
	if _, ok := before[EventsKey(job.Name())]; ok {
		t.Fatal("the test expects no built-in totals")
	}

	// Replayed after the fold: the write is skipped and the fold adds nothing.
	before = snapshot(t, w, job)
	mustWriteRows(t, w, job, epoch, ranges[0], rowsAdd, [][]any{{"x", 1, 10}}, nil)
	mustFoldRows(t, w, job, epoch, 1, ranges, rowsAdd, 0)
	sameSnapshot(t, "a replayed write and fold", before, snapshot(t, w, job))

	// The next batch adds to what is there.
	next := []record.Range{{Topic: "in", Partition: 0, From: 10, To: 20}}
	if err := job.LogPlan(ctx, epoch, 2, next); err != nil {
		t.Fatal(err)
	}
	mustWriteRows(t, w, job, epoch, next[0], rowsAdd, [][]any{{"x", 1, 1}, {"new", 1, 1}}, nil)
	// Another instance takes over: the old one neither writes nor folds.
	if _, err := job.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, w, job)
	if err := job.WriteRowsContribution(ctx, epoch, next[0], rowsAdd, [][]any{{"zombie", 1, 1}}, nil); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("WriteRowsContribution with a stale epoch = %v, want ErrFenced", err)
	}
	if _, err := job.FoldRows(ctx, epoch, 2, next, rowsAdd); !errors.Is(err, offsets.ErrFenced) || IsRetryable(err) {
		t.Fatalf("FoldRows with a stale epoch = %v, want ErrFenced, not retryable", err)
	}
	sameSnapshot(t, "a fenced write and fold", before, snapshot(t, w, job))
}

// A fold that can't apply every row changes nothing: rows of a table the
// fold was not given, a plain Fold of a rows contribution, a hash holding
// text where a sum goes.
func TestRedisRowsFoldRefusalsChangeNothing(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)
	mustWriteRows(t, w, job, epoch, ranges[0], rowsAdd, [][]any{{"a", 1, 1}}, nil)
	mustWriteRows(t, w, job, epoch, ranges[1], rowsAdd, [][]any{{"b", 1, int64(1 << 40)}}, nil)
	before := snapshot(t, w, job)
	if _, err := job.Fold(ctx, epoch, 1, ranges); !errors.Is(err, offsets.ErrConflict) || !strings.Contains(err.Error(), "FoldRows") {
		t.Fatalf("Fold of rows contributions = %v, want ErrConflict pointing to FoldRows", err)
	}
	other := writers.Upsert{Table: "per_key", Keys: []string{"k"}, Values: []string{"n"}, Merge: writers.MergeAdd}
	if _, err := job.FoldRows(ctx, epoch, 1, ranges, other); !errors.Is(err, offsets.ErrConflict) || !strings.Contains(err.Error(), "per_key:total") {
		t.Fatalf("FoldRows without the total column = %v, want ErrConflict naming per_key:total", err)
	}
	sameSnapshot(t, "folds without the contributions' hashes", before, snapshot(t, w, job))

	if err := w.Client().HSet(ctx, RowsKey(job.Name(), "per_key", "total"), "b", "text").Err(); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, w, job)
	if _, err := job.FoldRows(ctx, epoch, 1, ranges, rowsAdd); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("FoldRows into a text field = %v, want a not-an-integer error", err)
	}
	sameSnapshot(t, "a fold into a text field", before, snapshot(t, w, job))

	if err := w.Client().HDel(ctx, RowsKey(job.Name(), "per_key", "total"), "b").Err(); err != nil {
		t.Fatal(err)
	}
	mustFoldRows(t, w, job, epoch, 1, ranges, rowsAdd, 2)
	wantRows(t, w, job, "per_key", "total", map[string]string{"a": "1", "b": "1099511627776"})
}

// writers.MergeAdd sums are exact past int64: rows of one key in a contribution,
// and a stored sum near the bound.
func TestRedisRowsPastInt64(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 2, 10)
	mustWriteRows(t, w, job, epoch, ranges[0], rowsAdd, [][]any{{"a", 1, int64(math.MaxInt64)}, {"a", 1, int64(math.MaxInt64)}}, nil)
	mustWriteRows(t, w, job, epoch, ranges[1], rowsAdd, [][]any{{"b", 1, int64(1 << 40)}, {"c", 1, int64(math.MinInt64)}}, nil)
	if err := w.Client().HSet(ctx, RowsKey(job.Name(), "per_key", "total"), "b", int64(math.MaxInt64)-(1<<30), "c", int64(-1)).Err(); err != nil {
		t.Fatal(err)
	}
	mustFoldRows(t, w, job, epoch, 1, ranges, rowsAdd, 2)
	wantRows(t, w, job, "per_key", "total", map[string]string{
		"a": bigSum(math.MaxInt64, math.MaxInt64),
		"b": bigSum(math.MaxInt64-(1<<30), 1<<40),
		"c": bigSum(-1, math.MinInt64),
	})
	wantRows(t, w, job, "per_key", "n", map[string]string{"a": "2", "b": "1", "c": "1"})
}

// writers.MergeReplace: the fold sets the values' text; of rows with the same key
// in one contribution the last wins, and a later batch replaces.
func TestRedisRowsReplace(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	t1 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	mustWriteRows(t, w, job, epoch, ranges[0], rowsReplace, [][]any{
		{"eu", "k1", t1}, {"eu", "k1", t1.Add(time.Minute)}, {"us", "k1", "text"}, {"eu", "k2", 2.5},
	}, nil)
	mustFoldRows(t, w, job, epoch, 1, ranges, rowsReplace, 1)
	wantRows(t, w, job, "last_seen", "at", map[string]string{
		"2:eu2:k1": "2026-11-30T12:01:00Z", "2:us2:k1": "text", "2:eu2:k2": "2.5",
	})
	next := []record.Range{{Topic: "in", Partition: 0, From: 10, To: 12}}
	if err := job.LogPlan(ctx, epoch, 2, next); err != nil {
		t.Fatal(err)
	}
	mustWriteRows(t, w, job, epoch, next[0], rowsReplace, [][]any{{"eu", "k1", "later"}}, nil)
	mustFoldRows(t, w, job, epoch, 2, next, rowsReplace, 1)
	mustFoldRows(t, w, job, epoch, 2, next, rowsReplace, 0)
	wantRows(t, w, job, "last_seen", "at", map[string]string{
		"2:eu2:k1": "later", "2:us2:k1": "text", "2:eu2:k2": "2.5",
	})
	// A NULL replaces as no field (a row job's record without the column):
	// it stopped the job before (ErrValue).
	last := []record.Range{{Topic: "in", Partition: 0, From: 12, To: 13}}
	if err := job.LogPlan(ctx, epoch, 3, last); err != nil {
		t.Fatal(err)
	}
	mustWriteRows(t, w, job, epoch, last[0], rowsReplace, [][]any{{"us", "k1", nil}, {"eu", "k3", nil}}, nil)
	mustFoldRows(t, w, job, epoch, 3, last, rowsReplace, 1)
	wantRows(t, w, job, "last_seen", "at", map[string]string{"2:eu2:k1": "later", "2:eu2:k2": "2.5"})
}

// Rows that can't be stored are refused before anything is written, with
// an ErrValue naming the column.
func TestRedisRowsBadValues(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	before := snapshot(t, w, job)
	for _, c := range []struct {
		name string
		u    writers.Upsert
		rows [][]any
		want string
	}{
		{"float sum", rowsAdd, [][]any{{"a", 1, 2.5}}, "per_key.total"},
		{"text sum", rowsAdd, [][]any{{"a", "one", 2}}, "per_key.n"},
		{"fraction sum", rowsAdd, [][]any{{"a", 1, "2.5"}}, "per_key.total"},
		{"nil sum", rowsAdd, [][]any{{"a", 1, nil}}, "per_key.total"},
		{"nil key", rowsAdd, [][]any{{nil, 1, 1}}, "key value"},
		{"short row", rowsAdd, [][]any{{"a", 1}}, "want 3"},
	} {
		err := job.WriteRowsContribution(ctx, epoch, ranges[0], c.u, c.rows, nil)
		if !errors.Is(err, ErrValue) || !strings.Contains(err.Error(), c.want) || IsRetryable(err) {
			t.Errorf("%s: WriteRowsContribution = %v, want a non-retryable ErrValue mentioning %q", c.name, err, c.want)
		}
	}
	sameSnapshot(t, "refused rows", before, snapshot(t, w, job))
	if err := job.WriteRowsContribution(ctx, epoch, ranges[0], writers.Upsert{Table: "t; drop", Keys: []string{"k"}, Values: []string{"v"}}, nil, nil); !errors.Is(err, writers.ErrBadIdentifier) {
		t.Errorf("a bad table name = %v, want writers.ErrBadIdentifier", err)
	}
}

// TestRedisContributionFieldOrder: a contribution's hash holds its fields
// in the same order every time it is written — rows and totals alike — so
// that the fold meets them in that order and its verdict on the first one
// it can't place names the same column every time (it named either of
// two, from Go's map order).
func TestRedisContributionFieldOrder(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	var rows [][]any
	var totals []Total
	for i := range 12 {
		rows = append(rows, []any{fmt.Sprintf("k%02d", i), 1, i})
		totals = append(totals, Total{Key: fmt.Sprintf("k%02d", i), Events: 1, Amount: int64(i)})
	}
	fields := func() []string {
		t.Helper()
		keys, err := w.Client().Keys(ctx, "mb:{"+job.Name()+"}:contrib:*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("contribution keys %v, %v: want one", keys, err)
		}
		f, err := w.Client().HKeys(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, write := range []struct {
		name string
		fn   func() error
	}{
		{"rows", func() error { return job.WriteRowsContribution(ctx, epoch, ranges[0], rowsAdd, rows, nil) }},
		{"totals", func() error { return job.WriteContribution(ctx, epoch, ranges[0], totals, nil) }},
	} {
		var first []string
		for i := range 10 {
			if err := write.fn(); err != nil {
				t.Fatal(err)
			}
			got := fields()
			if i == 0 {
				first = got
			} else if !slices.Equal(got, first) {
				t.Fatalf("%s: write %d stored the fields as %v, the first as %v", write.name, i, got, first)
			}
		}
	}
}

// A row job's tombstone (writers.Delete) removes its key's field from
// every value hash in the fold; of a key's rows in one contribution the
// last wins, delete or not. Folding the batch again changes nothing.
func TestRedisRowsDelete(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	ctx := t.Context()
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	u := writers.Upsert{Table: "orders", Keys: []string{"id"}, Values: []string{"total", "status"}, Merge: writers.MergeReplace}
	mustWriteRows(t, w, job, epoch, ranges[0], u, [][]any{{"a", 1, "new"}, {"b", 2, "new"}, {"c", 3, "new"}, {"d", 4, "new"}}, nil)
	mustFoldRows(t, w, job, epoch, 1, ranges, u, 1)
	next := []record.Range{{Topic: "in", Partition: 0, From: 10, To: 20}}
	if err := job.LogPlan(ctx, epoch, 2, next); err != nil {
		t.Fatal(err)
	}
	del := writers.Delete
	mustWriteRows(t, w, job, epoch, next[0], u, [][]any{
		{"a", del, nil}, {"b", del, nil}, {"b", 5, "back"}, {"c", 6, "gone"}, {"c", del, "ignored"}, {"e", del, nil},
	}, nil)
	for want := 1; want >= 0; want-- {
		mustFoldRows(t, w, job, epoch, 2, next, u, want)
		wantRows(t, w, job, "orders", "total", map[string]string{"b": "5", "d": "4"})
		wantRows(t, w, job, "orders", "status", map[string]string{"b": "back", "d": "new"})
	}
}

// Redis keeps rows by key: an append is refused, with the form to write
// instead, and nothing is written; a Delete outside a MergeReplace upsert
// is the rows' error.
func TestRedisRowsAppendRefused(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	epoch, ranges := jobSetup(t, w, job, 1, 10)
	before := snapshot(t, w, job)
	app := writers.Upsert{Table: "orders", Values: []string{"id", "total"}, Merge: writers.MergeAppend}
	err := job.WriteRowsContribution(t.Context(), epoch, ranges[0], app, [][]any{{"a", 1}}, nil)
	if !errors.Is(err, writers.ErrBadMerge) || !strings.Contains(err.Error(), "REPLACE INTO orders (PRIMARY KEY (") {
		t.Fatalf("an append into Redis: %v, want ErrBadMerge with the upsert form", err)
	}
	if _, err := job.FoldRows(t.Context(), epoch, 1, ranges, app); !errors.Is(err, writers.ErrBadMerge) {
		t.Fatalf("FoldRows of an append: %v, want ErrBadMerge", err)
	}
	if err := job.WriteRowsContribution(t.Context(), epoch, ranges[0], rowsAdd, [][]any{{"a", writers.Delete, 1}}, nil); !errors.Is(err, ErrValue) {
		t.Fatalf("a Delete in a MergeAdd upsert: %v, want ErrValue", err)
	}
	if after := snapshot(t, w, job); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused writes changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}
