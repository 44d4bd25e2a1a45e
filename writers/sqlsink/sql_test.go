package sqlsink

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// The SQL writer cases run on a temporary SQLite file always, and on
// MariaDB/MySQL when MICROBATCH_TEST_MYSQL is set (and not -short). The
// MySQL tables are shared between tests and runs, so every case uses its
// own job name.

// forEachSink runs fn as a subtest on every available SQL sink.
func forEachSink(t *testing.T, fn func(t *testing.T, w *Writer)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		fn(t, openSQLite(t))
	})
	t.Run("mysql", func(t *testing.T) {
		fn(t, openMySQL(t))
	})
}

func openSQLite(t *testing.T) *Writer {
	t.Helper()
	return openSink(t, "sqlite://"+filepath.Join(t.TempDir(), "sink.db"))
}

func mysqlDSN(t *testing.T) string {
	t.Helper()
	return testutil.NeedServer(t, testutil.EnvMySQL)
}

func openMySQL(t *testing.T) *Writer {
	t.Helper()
	return openSink(t, mysqlDSN(t))
}

func openSink(t *testing.T, dsn string) *Writer {
	t.Helper()
	w, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.CreateTables(t.Context()); err != nil {
		t.Fatalf("CreateTables: %v", err)
	}
	return w
}

var nonJobChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// uniqueJob is a job name no other test or run uses.
func uniqueJob(t *testing.T) string {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	name := nonJobChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return fmt.Sprintf("%s-%x", name, n)
}

type total struct{ events, amount int64 }

func readTotals(t *testing.T, w *Writer, job string) map[string]total {
	t.Helper()
	rows, err := w.DB().QueryContext(t.Context(), `SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		t.Fatalf("reading mb_totals: %v", err)
	}
	defer rows.Close()
	out := make(map[string]total)
	for rows.Next() {
		var k string
		var v total
		if err := rows.Scan(&k, &v.events, &v.amount); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type deadRow struct {
	reason  string
	payload []byte
}

func readDeadLetters(t *testing.T, w *Writer, job string) map[string]deadRow {
	t.Helper()
	rows, err := w.DB().QueryContext(t.Context(),
		`SELECT topic, part, off, reason, payload FROM mb_dead_letters WHERE job = ?`, job)
	if err != nil {
		t.Fatalf("reading mb_dead_letters: %v", err)
	}
	defer rows.Close()
	out := make(map[string]deadRow)
	for rows.Next() {
		var topic string
		var part int32
		var off int64
		var d deadRow
		if err := rows.Scan(&topic, &part, &off, &d.reason, &d.payload); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s/%d/%d", topic, part, off)] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// inTx runs fn in a transaction and commits it.
func inTx(t *testing.T, w *Writer, fn func(tx *Tx) error) {
	t.Helper()
	tx, err := w.Begin(t.Context())
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		t.Fatalf("in transaction: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func totalsRows(job string, kv ...any) [][]any {
	var rows [][]any
	for i := 0; i < len(kv); i += 3 {
		rows = append(rows, []any{job, kv[i], kv[i+1], kv[i+2]})
	}
	return rows
}

func TestSQLCreateTablesIdempotent(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		inTx(t, w, func(tx *Tx) error {
			return tx.Upsert(t.Context(), writers.Totals, totalsRows(job, "a", 1, 2))
		})
		for range 3 {
			if err := w.CreateTables(t.Context()); err != nil {
				t.Fatalf("CreateTables again: %v", err)
			}
		}
		// Tables are still there, with their rows.
		if got := readTotals(t, w, job); got["a"] != (total{1, 2}) {
			t.Fatalf("after CreateTables: totals %v", got)
		}
		for _, table := range []string{writers.TotalsTable, writers.DeadLettersTable, offsets.Table} {
			var n int
			if err := w.DB().QueryRowContext(t.Context(), `SELECT COUNT(*) FROM `+table+` WHERE job = ?`, job).Scan(&n); err != nil {
				t.Fatalf("table %s: %v", table, err)
			}
		}
	})
}

func TestSQLUpsertMerge(t *testing.T) {
	replace := writers.Upsert{Table: writers.TotalsTable, Keys: []string{"job", "k"}, Values: []string{"events", "amount"}, Merge: writers.MergeReplace}
	type step struct {
		u    writers.Upsert
		rows []any // k, events, amount triples
	}
	tests := []struct {
		name  string
		steps []step // one transaction each
		want  map[string]total
	}{
		{
			name:  "add across transactions",
			steps: []step{{writers.Totals, []any{"a", 1, 10, "b", 2, 20}}, {writers.Totals, []any{"a", 3, 5, "c", 1, -1}}},
			want:  map[string]total{"a": {4, 15}, "b": {2, 20}, "c": {1, -1}},
		},
		{
			name:  "replace",
			steps: []step{{writers.Totals, []any{"a", 1, 10, "b", 2, 20}}, {replace, []any{"a", 7, 70, "c", 1, 1}}},
			want:  map[string]total{"a": {7, 70}, "b": {2, 20}, "c": {1, 1}},
		},
		{
			// Same table, columns and row count: a cached MergeAdd statement
			// must not be used for MergeReplace or the other way round.
			name: "add, replace, add with the same shape",
			steps: []step{
				{writers.Totals, []any{"a", 1, 1, "b", 1, 1}},
				{replace, []any{"a", 5, 50, "b", 6, 60}},
				{writers.Totals, []any{"a", 1, 1, "b", 1, 1}},
				{replace, []any{"a", 9, 90, "b", 9, 90}},
			},
			want: map[string]total{"a": {9, 90}, "b": {9, 90}},
		},
		{
			name:  "large values",
			steps: []step{{writers.Totals, []any{"a", int64(1) << 40, int64(1) << 61}}, {writers.Totals, []any{"a", 1, int64(1) << 61}}},
			want:  map[string]total{"a": {1<<40 + 1, 1 << 62}},
		},
		{
			name: "keys differing only by case, trailing space or unicode form",
			steps: []step{
				{writers.Totals, []any{"k", 1, 1, "K", 1, 2, "k ", 1, 4, "é", 1, 8, "e\u0301", 1, 16}},
				{writers.Totals, []any{"k", 1, 1, "k ", 1, 4}},
			},
			want: map[string]total{"k": {2, 2}, "K": {1, 2}, "k ": {2, 8}, "é": {1, 8}, "e\u0301": {1, 16}},
		},
		{
			name:  "key of 255 bytes, multi-byte",
			steps: []step{{writers.Totals, []any{strings.Repeat("ж", 127) + "x", 1, 1}}, {writers.Totals, []any{strings.Repeat("ж", 127) + "x", 1, 1}}},
			want:  map[string]total{strings.Repeat("ж", 127) + "x": {2, 2}},
		},
		{
			name:  "empty upsert is a no-op",
			steps: []step{{writers.Totals, []any{"a", 1, 1}}, {writers.Totals, nil}},
			want:  map[string]total{"a": {1, 1}},
		},
	}
	forEachSink(t, func(t *testing.T, w *Writer) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				job := uniqueJob(t)
				for _, s := range tc.steps {
					inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), s.u, totalsRows(job, s.rows...)) })
				}
				got := readTotals(t, w, job)
				if len(got) != len(tc.want) {
					t.Errorf("%d rows, want %d: %v", len(got), len(tc.want), got)
				}
				for k, v := range tc.want {
					if got[k] != v {
						t.Errorf("key %q = %+v, want %+v", k, got[k], v)
					}
				}
			})
		}
	})
}

// TestSQLUpsertChunked writes more rows than fit under the placeholder
// limit in one statement (20,000 rows x 4 columns = 80,000 parameters).
func TestSQLUpsertChunked(t *testing.T) {
	tests := []struct{ rows int }{{7499}, {7500}, {7501}, {20000}}
	forEachSink(t, func(t *testing.T, w *Writer) {
		for _, tc := range tests {
			t.Run(fmt.Sprint(tc.rows), func(t *testing.T) {
				job := uniqueJob(t)
				rows := make([][]any, tc.rows)
				for i := range rows {
					rows[i] = []any{job, fmt.Sprintf("key-%05d", i), 1, int64(i)}
				}
				for range 2 {
					inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), writers.Totals, rows) })
				}
				got := readTotals(t, w, job)
				if len(got) != tc.rows {
					t.Fatalf("%d rows stored, want %d", len(got), tc.rows)
				}
				for i := range tc.rows {
					k := fmt.Sprintf("key-%05d", i)
					if got[k] != (total{2, 2 * int64(i)}) {
						t.Fatalf("key %s = %+v, want {2 %d}", k, got[k], 2*i)
					}
				}
			})
		}
	})
}

func TestSQLUpsertRejects(t *testing.T) {
	tests := []struct {
		name    string
		u       writers.Upsert
		row     []any
		wantErr error
	}{
		{"injection in table", writers.Upsert{Table: "mb_totals; DROP TABLE mb_totals", Keys: []string{"job", "k"}, Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"quoted table", writers.Upsert{Table: "`mb_totals`", Keys: []string{"job", "k"}, Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"dash in key column", writers.Upsert{Table: "mb_totals", Keys: []string{"job", "k-1"}, Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"space in value column", writers.Upsert{Table: "mb_totals", Keys: []string{"job", "k"}, Values: []string{"events", "amount = 0"}}, nil, writers.ErrBadIdentifier},
		{"empty column", writers.Upsert{Table: "mb_totals", Keys: []string{"job", ""}, Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"leading digit", writers.Upsert{Table: "1mb", Keys: []string{"job", "k"}, Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"too long", writers.Upsert{Table: strings.Repeat("t", 65), Keys: []string{"job", "k"}, Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"non-ASCII", writers.Upsert{Table: "mb_tötals", Keys: []string{"job", "k"}, Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"no keys", writers.Upsert{Table: "mb_totals", Values: []string{"events", "amount"}}, nil, writers.ErrBadIdentifier},
		{"no values", writers.Upsert{Table: "mb_totals", Keys: []string{"job", "k"}}, nil, writers.ErrBadIdentifier},
		{"row too short", writers.Totals, []any{"job", "k", 1}, nil},
		{"row too long", writers.Totals, []any{"job", "k", 1, 2, 3}, nil},
	}
	forEachSink(t, func(t *testing.T, w *Writer) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				job := uniqueJob(t)
				row := tc.row
				if row == nil {
					row = []any{job, "k", 1, 2}
				} else {
					row[0] = job
				}
				tx, err := w.Begin(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				good := []any{job, "good", 1, 1}
				err = tx.Upsert(t.Context(), tc.u, [][]any{good, row})
				if err == nil {
					t.Fatalf("Upsert(%+v) = nil, want an error", tc.u)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("Upsert error %v is not %v", err, tc.wantErr)
				}
				if writers.IsRetryable(err) {
					t.Errorf("IsRetryable(%v) = true", err)
				}
				tx.Rollback()
				if got := readTotals(t, w, job); len(got) != 0 {
					t.Errorf("rows stored despite the error: %v", got)
				}
				// The table is intact.
				if _, err := w.DB().ExecContext(t.Context(), `SELECT COUNT(*) FROM mb_totals`); err != nil {
					t.Fatalf("mb_totals after the bad upsert: %v", err)
				}
			})
		}
	})
}

func TestSQLDeadLetters(t *testing.T) {
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, '\'', '"', '\\', 'x'}, 125_000) // 1,000,000 bytes, not UTF-8
	if len(big) != 1_000_000 {
		t.Fatal(len(big))
	}
	// 1201 bytes; byte 1024 is inside a 2-byte rune, so a cut there must back off.
	longReason := "x" + strings.Repeat("é", 600)
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		first := []record.DeadLetter{
			{Job: job, Topic: "events", Partition: 0, Offset: 1, Reason: "not a JSON object", Payload: []byte("hello")},
			{Job: job, Topic: "events", Partition: 0, Offset: 2, Reason: "record is 1000000 bytes", Payload: big},
			{Job: job, Topic: "events", Partition: 3, Offset: 1, Reason: longReason, Payload: nil},
			{Job: job, Topic: "other", Partition: 0, Offset: 1, Reason: "x", Payload: []byte{}},
		}
		inTx(t, w, func(tx *Tx) error { return tx.DeadLetters(t.Context(), first) })
		// A replay of the same records (different reason and payload) and a
		// new one: the stored ones stay as they are.
		second := []record.DeadLetter{
			{Job: job, Topic: "events", Partition: 0, Offset: 2, Reason: "replayed", Payload: []byte("other")},
			{Job: job, Topic: "events", Partition: 0, Offset: 1, Reason: "replayed", Payload: []byte("other")},
			{Job: job, Topic: "events", Partition: 0, Offset: 3, Reason: "new", Payload: []byte("new")},
		}
		inTx(t, w, func(tx *Tx) error { return tx.DeadLetters(t.Context(), second) })

		got := readDeadLetters(t, w, job)
		if len(got) != 5 {
			t.Fatalf("%d dead letters, want 5: %v", len(got), mapKeys(got))
		}
		check := func(key, reason string, payload []byte) {
			t.Helper()
			d, ok := got[key]
			if !ok {
				t.Errorf("dead letter %s missing", key)
				return
			}
			if d.reason != reason {
				t.Errorf("%s reason %.60q, want %.60q", key, d.reason, reason)
			}
			if !bytes.Equal(d.payload, payload) {
				t.Errorf("%s payload: %d bytes, want %d (equal: %v)", key, len(d.payload), len(payload), bytes.Equal(d.payload, payload))
			}
		}
		check("events/0/1", "not a JSON object", []byte("hello"))
		check("events/0/2", "record is 1000000 bytes", big)
		check("events/0/3", "new", []byte("new"))
		check("other/0/1", "x", nil)
		long := got["events/3/1"].reason
		if len(long) == 0 || len(long) > writers.MaxReasonBytes || !utf8.ValidString(long) || !strings.HasPrefix(longReason, long) {
			t.Errorf("long reason stored as %d bytes (valid UTF-8 %v), want a prefix of at most %d", len(long), utf8.ValidString(long), writers.MaxReasonBytes)
		}
	})
}

// TestSQLDeadLetterReasonsNotUTF8: a reason may quote input that is not
// UTF-8 (a user's decode error, "got \xff…"). MariaDB's utf8mb4 column
// refuses such bytes (error 1366; under INSERT IGNORE a warning, and '?'
// stored for each), and JSON turns them into U+FFFD; the reason is stored
// with them escaped, cut at a character boundary, never inside an escape,
// and the payload stays exact.
func TestSQLDeadLetterReasonsNotUTF8(t *testing.T) {
	// Escaped, the long reason is 1019 bytes of text, then \xff (to 1023),
	// then \xfe escapes: the 1024-byte bound falls inside the second.
	longRaw := strings.Repeat("é", 509) + "x\xff" + strings.Repeat("\xfe", 10)
	cases := []struct {
		off          int64
		reason, want string
	}{
		{1, "decode: invalid key \"page-\xff\"", `decode: invalid key "page-\xff"`},
		{2, "caf\xc3 and a lone \x80, \xed\xa0\x80", `caf\xc3 and a lone \x80, \xed\xa0\x80`},
		{3, longRaw, strings.Repeat("é", 509) + `x\xff`},
		{4, "valid U+FFFD \uFFFD stays", "valid U+FFFD \uFFFD stays"},
	}
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		var dls []record.DeadLetter
		for _, c := range cases {
			dls = append(dls, record.DeadLetter{Job: job, Topic: "events", Partition: 0, Offset: c.off, Reason: c.reason, Payload: []byte(c.reason)})
		}
		inTx(t, w, func(tx *Tx) error { return tx.DeadLetters(t.Context(), dls) })
		got := readDeadLetters(t, w, job)
		for _, c := range cases {
			d, ok := got[fmt.Sprintf("events/0/%d", c.off)]
			switch {
			case !ok:
				t.Errorf("dead letter %d missing", c.off)
			case d.reason != c.want:
				t.Errorf("dead letter %d: reason %q (%d bytes), want %q (%d bytes)", c.off, d.reason, len(d.reason), c.want, len(c.want))
			case !bytes.Equal(d.payload, []byte(c.reason)):
				t.Errorf("dead letter %d: payload %q, want the bytes %q", c.off, d.payload, c.reason)
			}
		}
	})
}

// TestSQLDeadLettersChunked sends more rows (2,500) and more bytes (6 MB)
// than one statement takes.
func TestSQLDeadLettersChunked(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		payload int
	}{
		{"many rows", 2500, 10},
		{"many bytes", 6, 1_000_000},
		{"one over the byte chunk", 2, 4<<20 - 10},
	}
	forEachSink(t, func(t *testing.T, w *Writer) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				job := uniqueJob(t)
				dls := make([]record.DeadLetter, tc.n)
				for i := range dls {
					dls[i] = record.DeadLetter{Job: job, Topic: "events", Partition: int32(i % 3), Offset: int64(i),
						Reason: "bad", Payload: bytes.Repeat([]byte{byte(i)}, tc.payload)}
				}
				inTx(t, w, func(tx *Tx) error { return tx.DeadLetters(t.Context(), dls) })
				got := readDeadLetters(t, w, job)
				if len(got) != tc.n {
					t.Fatalf("%d dead letters stored, want %d", len(got), tc.n)
				}
				for i, d := range dls {
					if g := got[fmt.Sprintf("events/%d/%d", d.Partition, d.Offset)]; !bytes.Equal(g.payload, d.Payload) {
						t.Fatalf("dead letter %d: payload of %d bytes, want %d", i, len(g.payload), len(d.Payload))
					}
				}
			})
		}
	})
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// initOffsets creates the job's offset rows at from, epoch 1.
func initOffsets(t *testing.T, w *Writer, job string, parts []int32, from int64) {
	t.Helper()
	tx, err := w.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	c, err := offsets.Init(t.Context(), tx, w.Dialect(), job, "events", parts, func(int32, bool) (int64, error) { return from, nil })
	if err != nil {
		t.Fatalf("offsets.Init: %v", err)
	}
	if c.Epoch != 1 {
		t.Fatalf("epoch %d for a new job", c.Epoch)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func readOffsets(t *testing.T, w *Writer, job string) map[int32]offsets.Position {
	t.Helper()
	pos, err := offsets.Load(t.Context(), w.DB(), job, "events")
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

func TestSQLRollbackLeavesNothing(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		initOffsets(t, w, job, []int32{0}, 100)
		tx, err := w.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Upsert(t.Context(), writers.Totals, totalsRows(job, "a", 1, 1, "b", 2, 2)); err != nil {
			t.Fatal(err)
		}
		if err := tx.DeadLetters(t.Context(), []record.DeadLetter{{Job: job, Topic: "events", Offset: 100, Reason: "r", Payload: []byte("p")}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Advance(t.Context(), offsets.Advance{Job: job, Topic: "events", Partition: 0, From: 100, To: 110, Epoch: 1, BatchID: 1}); err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
		tx.Rollback() // twice is harmless
		if err := tx.Commit(); err == nil {
			t.Error("Commit after Rollback succeeded")
		}
		if got := readTotals(t, w, job); len(got) != 0 {
			t.Errorf("totals after rollback: %v", got)
		}
		if got := readDeadLetters(t, w, job); len(got) != 0 {
			t.Errorf("dead letters after rollback: %v", mapKeys(got))
		}
		if got := readOffsets(t, w, job); got[0].NextOffset != 100 || got[0].BatchID != 0 {
			t.Errorf("offset after rollback: %+v", got[0])
		}
	})
}

func TestSQLCommitWithAdvance(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		initOffsets(t, w, job, []int32{0, 1}, 0)
		inTx(t, w, func(tx *Tx) error {
			if err := tx.Upsert(t.Context(), writers.Totals, totalsRows(job, "a", 3, 30)); err != nil {
				return err
			}
			return tx.Advance(t.Context(), offsets.Advance{Job: job, Topic: "events", Partition: 1, From: 0, To: 3, Epoch: 1, BatchID: 1})
		})
		tx, err := w.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Upsert(t.Context(), writers.Totals, totalsRows(job, "a", 3, 30)); err != nil {
			t.Fatal(err)
		}
		// Replaying the same batch is refused by the offset row, and rolled back.
		err = tx.Advance(t.Context(), offsets.Advance{Job: job, Topic: "events", Partition: 1, From: 0, To: 3, Epoch: 1, BatchID: 1})
		if !errors.Is(err, offsets.ErrConflict) {
			t.Fatalf("replayed Advance = %v, want ErrConflict", err)
		}
		tx.Rollback()
		if got := readTotals(t, w, job); got["a"] != (total{3, 30}) {
			t.Errorf("totals %v, want a={3 30} once", got)
		}
		pos := readOffsets(t, w, job)
		if pos[1].NextOffset != 3 || pos[1].BatchID != 1 || pos[0].NextOffset != 0 {
			t.Errorf("offsets %+v", pos)
		}
	})
}

func TestSQLCloseTwice(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		var dsn string
		if w.Dialect() == offsets.SQLite {
			dsn = "sqlite://" + filepath.Join(t.TempDir(), "close.db")
		} else {
			dsn = mysqlDSN(t)
		}
		w2, err := Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		if err := w2.Close(); err != nil {
			t.Fatalf("first Close: %v", err)
		}
		if err := w2.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := w2.Begin(t.Context()); err == nil {
			t.Fatal("Begin after Close succeeded")
		}
	})
}

func TestSQLStringHidesPassword(t *testing.T) {
	dsn := mysqlDSN(t)
	w := openSink(t, dsn)
	got, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if w.String() != got.Display {
		t.Errorf("String() = %q, want %q", w.String(), got.Display)
	}
	cfgPass := ""
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndexByte(dsn, '@'); at > i {
			if _, p, ok := strings.Cut(dsn[i+3:at], ":"); ok {
				cfgPass = p
			}
		}
	}
	if cfgPass != "" && strings.Contains(w.String(), cfgPass) {
		t.Errorf("String() = %q shows the password", w.String())
	}
}

func TestOpenSQLErrors(t *testing.T) {
	tests := []struct {
		name, dsn string
		isBad     bool
	}{
		{"bad dsn", "nope://x", true},
		{"unreachable mysql", "mysql://u:unreachable-pw@127.0.0.1:1/db?timeout=1s", false},
		{"sqlite in a missing directory", "sqlite:///nonexistent-dir-for-test/x/y.db", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Open(t.Context(), tc.dsn)
			if err == nil {
				w.Close()
				t.Fatalf("Open(%q) succeeded", tc.dsn)
			}
			if errors.Is(err, writers.ErrBadDSN) != tc.isBad {
				t.Errorf("Open error %v: ErrBadDSN %v, want %v", err, errors.Is(err, writers.ErrBadDSN), tc.isBad)
			}
			if strings.Contains(err.Error(), "unreachable-pw") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// TestSQLiteFileName: the database lands in exactly the file the DSN names
// (or the DSN is refused); characters that mean something in a SQLite URI
// ('#', '%') must not send it elsewhere.
func TestSQLiteFileName(t *testing.T) {
	for i, name := range []string{"plain.db", "with space.db", "ü-ñ.db", "hash#1.db", "pct%20x.db", "pct%zz.db"} {
		// Subtests are numbered: t.TempDir's path contains the test name.
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			dir := t.TempDir()
			w, err := Open(t.Context(), "sqlite://"+filepath.Join(dir, name))
			if err != nil {
				if !errors.Is(err, writers.ErrBadDSN) {
					t.Fatalf("Open: %v", err)
				}
				return // refused: fine
			}
			err = w.CreateTables(t.Context())
			w.Close()
			if err != nil {
				t.Fatalf("CreateTables: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				ents, _ := os.ReadDir(dir)
				var got []string
				for _, e := range ents {
					got = append(got, e.Name())
				}
				t.Fatalf("database file %q not created (directory holds %q): the path was read as a URI", name, got)
			}
		})
	}
}

// TestSQLDeadLetterPayloadCap: a payload over MaxPayloadBytes is stored cut
// to that size with the cut named in its reason, so one huge bad record
// can't exceed max_allowed_packet and fail its batch forever.
func TestSQLDeadLetterPayloadCap(t *testing.T) {
	huge := bytes.Repeat([]byte("0123456789abcdef"), (writers.MaxPayloadBytes+1<<20)/16)
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		inTx(t, w, func(tx *Tx) error {
			return tx.DeadLetters(t.Context(), []record.DeadLetter{
				{Job: job, Topic: "events", Partition: 1, Offset: 7, Reason: "record too large", Payload: huge},
				{Job: job, Topic: "events", Partition: 1, Offset: 8, Reason: "not JSON", Payload: []byte("x")},
			})
		})
		got := readDeadLetters(t, w, job)
		d := got["events/1/7"]
		if !bytes.Equal(d.payload, huge[:writers.MaxPayloadBytes]) {
			t.Errorf("stored %d payload bytes, want the first %d", len(d.payload), writers.MaxPayloadBytes)
		}
		if want := fmt.Sprintf("record too large (payload cut from %d to %d bytes)", len(huge), writers.MaxPayloadBytes); d.reason != want {
			t.Errorf("reason %q, want %q", d.reason, want)
		}
		if d := got["events/1/8"]; d.reason != "not JSON" || string(d.payload) != "x" {
			t.Errorf("small dead letter stored as %q / %q", d.reason, d.payload)
		}
	})
}
