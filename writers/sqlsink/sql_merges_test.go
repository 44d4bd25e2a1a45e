package sqlsink

import (
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// Per-column upserts (writers.Upsert.Merges) on MariaDB/MySQL, into a
// table typed as a SQL job's: BIGINT for a count, DECIMAL(38,9) for sums,
// least and greatest, all nullable (SQL NULL is "no value").

const mergesTable = "mb_test_merges"

// perColumn is the upsert of a SQL job such as
// SELECT k, COUNT(*) AS n, SUM(x) AS s, MIN(x) AS lo, MAX(x) AS hi, … GROUP BY k.
var perColumn = writers.Upsert{Table: mergesTable, Keys: []string{"job", "k"}, Values: []string{"n", "s", "lo", "hi", "last"},
	Merges: []writers.Merge{writers.MergeAdd, writers.MergeAdd, writers.MergeMin, writers.MergeMax, writers.MergeReplace}}

func openMergesMySQL(t *testing.T) *Writer {
	t.Helper()
	w := openMySQL(t)
	if _, err := w.DB().ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS `+mergesTable+` (
  job VARCHAR(128) NOT NULL,
  k VARBINARY(255) NOT NULL,
  n BIGINT NULL,
  s DECIMAL(38,9) NULL,
  lo DECIMAL(38,9) NULL,
  hi DECIMAL(38,9) NULL,
  last VARCHAR(64) NULL,
  PRIMARY KEY (job, k)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`); err != nil {
		t.Fatalf("creating %s: %v", mergesTable, err)
	}
	if err := w.CheckUpsert(t.Context(), perColumn); err != nil {
		t.Fatalf("CheckUpsert: %v", err)
	}
	return w
}

// mergedRow is a stored row as text; "NULL" for SQL NULL.
type mergedRow struct{ n, s, lo, hi, last string }

func readMerged(t *testing.T, w *Writer, job string) map[string]mergedRow {
	t.Helper()
	rows, err := w.DB().QueryContext(t.Context(), `SELECT k, n, s, lo, hi, last FROM `+mergesTable+` WHERE job = ?`, job)
	if err != nil {
		t.Fatalf("reading %s: %v", mergesTable, err)
	}
	defer rows.Close()
	out := map[string]mergedRow{}
	for rows.Next() {
		var k string
		var c [5]sql.NullString
		if err := rows.Scan(&k, &c[0], &c[1], &c[2], &c[3], &c[4]); err != nil {
			t.Fatal(err)
		}
		var s [5]string
		for i := range c {
			s[i] = "NULL"
			if c[i].Valid {
				s[i] = c[i].String
			}
		}
		out[k] = mergedRow{s[0], s[1], s[2], s[3], s[4]}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSQLPerColumnUpsert(t *testing.T) {
	w := openMergesMySQL(t)
	// Each step is one transaction of rows: k, n, s, lo, hi, last.
	tests := []struct {
		name  string
		steps [][][]any
		want  map[string]mergedRow
	}{
		{
			name: "NULL is no value",
			steps: [][][]any{
				{{"a", nil, nil, nil, nil, nil}, {"b", 1, "2.5", "2.5", "2.5", "x"}},
				{{"a", 3, "1.25", "-4", "-4", "y"}, {"b", nil, nil, nil, nil, nil}},
			},
			want: map[string]mergedRow{
				"a": {"3", "1.250000000", "-4.000000000", "-4.000000000", "y"},
				"b": {"1", "2.500000000", "2.500000000", "2.500000000", "NULL"},
			},
		},
		{
			name: "sums exact in decimal",
			steps: [][][]any{
				{{"a", 1, "0.1", nil, nil, nil}, {"b", 1, "100000000000000000000", nil, nil, nil}},
				{{"a", 1, "0.2", nil, nil, nil}, {"b", 1, "0.000000001", nil, nil, nil}},
				{{"c", int64(math.MaxInt64), "-12.50", nil, nil, nil}},
			},
			want: map[string]mergedRow{
				"a": {"2", "0.300000000", "NULL", "NULL", "NULL"},
				"b": {"2", "100000000000000000000.000000001", "NULL", "NULL", "NULL"},
				"c": {"9223372036854775807", "-12.500000000", "NULL", "NULL", "NULL"},
			},
		},
		{
			name: "least and greatest across upserts",
			steps: [][][]any{
				{{"a", 1, "5", "5", "5", nil}},
				{{"a", 1, "-0.000000001", "-0.000000001", "-0.000000001", nil}},
				{{"a", 1, "1", "99999999999999999999999999999.999999999", "99999999999999999999999999999.999999999", nil}},
				{{"a", 1, "+7", "0.000000002", "+7", nil}},
			},
			want: map[string]mergedRow{
				"a": {"4", "12.999999999", "-0.000000001", "99999999999999999999999999999.999999999", "NULL"},
			},
		},
		{
			name: "the same key twice in one statement",
			steps: [][][]any{
				{{"a", 2, "1.5", "3", "3", "first"}, {"a", 5, "2.25", "-1.5", "10", "second"}, {"a", nil, nil, nil, nil, "third"}},
				{{"a", 1, "1", "0", "11", nil}, {"a", 1, "1", "-2", "4", "fourth"}},
			},
			want: map[string]mergedRow{
				"a": {"9", "5.750000000", "-2.000000000", "11.000000000", "fourth"},
			},
		},
		{
			name: "Go integers of every size",
			steps: [][][]any{
				{{"a", int8(-3), uint64(math.MaxUint64), int32(-7), uint(7), nil}},
				{{"a", uint16(5), int64(math.MinInt64), int16(-8), uint8(9), nil}},
			},
			want: map[string]mergedRow{
				"a": {"2", "9223372036854775807.000000000", "-8.000000000", "9.000000000", "NULL"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := uniqueJob(t)
			for _, step := range tc.steps {
				rows := make([][]any, len(step))
				for i, r := range step {
					rows[i] = append([]any{job}, r...)
				}
				inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), perColumn, rows) })
			}
			got := readMerged(t, w, job)
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
}

// Upserts of the same shape but other rules must not share a cached
// statement.
func TestSQLPerColumnRulesNotShared(t *testing.T) {
	w := openMergesMySQL(t)
	job := uniqueJob(t)
	shape := func(m ...writers.Merge) writers.Upsert {
		return writers.Upsert{Table: mergesTable, Keys: []string{"job", "k"}, Values: []string{"lo", "hi"}, Merges: m}
	}
	steps := []struct {
		u      writers.Upsert
		lo, hi string
	}{
		{shape(writers.MergeMin, writers.MergeMax), "5", "5"},
		{shape(writers.MergeMin, writers.MergeMax), "3", "3"},                                                                             // lo 3, hi 5
		{shape(writers.MergeMax, writers.MergeMin), "4", "4"},                                                                             // lo 4, hi 4
		{shape(writers.MergeAdd, writers.MergeReplace), "1", "1"},                                                                         // lo 5, hi 1
		{writers.Upsert{Table: mergesTable, Keys: []string{"job", "k"}, Values: []string{"lo", "hi"}, Merge: writers.MergeAdd}, "1", "1"}, // lo 6, hi 2
	}
	for _, s := range steps {
		inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), s.u, [][]any{{job, "a", s.lo, s.hi}}) })
	}
	if got := readMerged(t, w, job)["a"]; got.lo != "6.000000000" || got.hi != "2.000000000" {
		t.Fatalf("lo, hi = %s, %s, want 6, 2", got.lo, got.hi)
	}
}

func TestSQLPerColumnRejects(t *testing.T) {
	w := openMergesMySQL(t)
	tests := []struct {
		name    string
		u       writers.Upsert
		row     []any
		wantErr error
	}{
		{"float in a least column", perColumn, []any{"k", 1, "1", 1.5, "1", nil}, writers.ErrBadValue},
		{"exponent", perColumn, []any{"k", 1, "1e3", "1", "1", nil}, writers.ErrBadValue},
		{"bare point", perColumn, []any{"k", 1, ".5", "1", "1", nil}, writers.ErrBadValue},
		{"text in a count", perColumn, []any{"k", "many", "1", "1", "1", nil}, writers.ErrBadValue},
		{"bytes in a greatest column", perColumn, []any{"k", 1, "1", "1", []byte("1"), nil}, writers.ErrBadValue},
		{"rules short", writers.Upsert{Table: mergesTable, Keys: []string{"job", "k"}, Values: []string{"n", "s", "lo", "hi", "last"}, Merges: []writers.Merge{writers.MergeAdd}},
			[]any{"k", 1, "1", "1", "1", nil}, writers.ErrBadMerge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := uniqueJob(t)
			tx, err := w.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			err = tx.Upsert(t.Context(), tc.u, [][]any{{job, "good", 1, "1", "1", "1", nil}, append([]any{job}, tc.row...)})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Upsert = %v, want %v", err, tc.wantErr)
			}
			if writers.IsRetryable(err) {
				t.Errorf("IsRetryable(%v) = true", err)
			}
		})
	}
}

// SQLite has no exact decimal type: per-column least/greatest and
// fractions are refused; adding integers (NULL as no value) and replacing
// work as on MySQL.
func TestSQLitePerColumn(t *testing.T) {
	w := openSQLite(t)
	if _, err := w.DB().ExecContext(t.Context(), `CREATE TABLE `+mergesTable+` (job TEXT NOT NULL, k TEXT NOT NULL, n, s, lo, hi, last TEXT, PRIMARY KEY (job, k))`); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckUpsert(t.Context(), perColumn); !errors.Is(err, writers.ErrBadMerge) {
		t.Errorf("CheckUpsert with least/greatest on SQLite = %v, want ErrBadMerge", err)
	}
	if err := w.Upsert(t.Context(), perColumn, [][]any{{"j", "a", 1, 1, 1, 1, nil}}); !errors.Is(err, writers.ErrBadMerge) {
		t.Errorf("Upsert with least/greatest on SQLite = %v, want ErrBadMerge", err)
	}
	adds := writers.Upsert{Table: mergesTable, Keys: []string{"job", "k"}, Values: []string{"n", "s", "last"},
		Merges: []writers.Merge{writers.MergeAdd, writers.MergeAdd, writers.MergeReplace}}
	if err := w.CheckUpsert(t.Context(), adds); err != nil {
		t.Fatalf("CheckUpsert: %v", err)
	}
	if err := w.Upsert(t.Context(), adds, [][]any{{"j", "a", 1, "0.1", nil}}); !errors.Is(err, writers.ErrBadMerge) {
		t.Errorf("Upsert of a fraction on SQLite = %v, want ErrBadMerge", err)
	}
	steps := [][][]any{
		{{"j", "a", nil, nil, "x"}},
		{{"j", "a", 2, int64(math.MaxInt64), "y"}, {"j", "a", nil, "1", nil}},
		{{"j", "a", 3, nil, "z"}},
	}
	for _, rows := range steps {
		if err := w.Upsert(t.Context(), adds, rows); err != nil {
			t.Fatalf("Upsert(%v): %v", rows, err)
		}
	}
	var n, s any
	var last sql.NullString
	if err := w.DB().QueryRowContext(t.Context(), `SELECT n, s, last FROM `+mergesTable+` WHERE job = 'j' AND k = 'a'`).Scan(&n, &s, &last); err != nil {
		t.Fatal(err)
	}
	if n != int64(5) || s != "9223372036854775808" || last.String != "z" {
		t.Fatalf("n, s, last = %v (%T), %v (%T), %v; want 5, 9223372036854775808, z", n, n, s, s, last)
	}
}

// The built-in job's statements are exactly what they were before
// per-column rules existed.
func TestSQLTotalsStatementUnchanged(t *testing.T) {
	want := map[offsets.Dialect]string{
		offsets.MySQL:  "INSERT INTO `mb_totals` (`job`, `k`, `events`, `amount`) VALUES (?, ?, ?, ?), (?, ?, ?, ?) ON DUPLICATE KEY UPDATE `events` = `events` + VALUES(`events`), `amount` = `amount` + VALUES(`amount`)",
		offsets.SQLite: "INSERT INTO `mb_totals` (`job`, `k`, `events`, `amount`) VALUES (?, ?, ?, ?), (?, ?, ?, ?) ON CONFLICT (`job`, `k`) DO UPDATE SET `events` = COALESCE(mb_add(`events`, excluded.`events`), `events` + excluded.`events`), `amount` = COALESCE(mb_add(`amount`, excluded.`amount`), `amount` + excluded.`amount`)",
	}
	for d, sql := range want {
		w := New(nil, d)
		if got := w.upsertSQL(writers.Totals, 2); got != sql {
			t.Errorf("%s: Totals statement\n%s\nwant\n%s", d, got, sql)
		}
	}
}

// The write-ahead sink keeps a per-column upsert in the checkpoint as
// JSON: its rules, NULLs and decimal strings come back as they were, and
// a recovering writer applies them.
func TestWALPerColumn(t *testing.T) {
	w := openMergesMySQL(t)
	job := uniqueJob(t)
	l := NewWAL(w, job, 0)
	if err := l.Recover(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	write := func(txn int64, rows ...[]any) writers.Pending {
		t.Helper()
		if err := l.Begin(t.Context(), txn); err != nil {
			t.Fatal(err)
		}
		for i := range rows {
			rows[i] = append([]any{job}, rows[i]...)
		}
		if err := l.Upsert(t.Context(), perColumn, rows); err != nil {
			t.Fatal(err)
		}
		p, err := l.PreCommit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p1 := write(1, []any{"a", int64(1), "0.1", "100000000000000000000.000000001", "-3", "x"}, []any{"a", nil, "0.2", nil, nil, nil})
	if !strings.Contains(string(p1.Data), `"Merges":[0,0,2,3,1]`) {
		t.Fatalf("checkpoint data without the rules: %s", p1.Data)
	}
	if err := l.Commit(t.Context(), p1); err != nil {
		t.Fatal(err)
	}
	p2 := write(2, []any{"a", int64(2), "100000000000000000000", "7", "-2.5", nil})
	// A restarted writer applies the kept checkpoint from its JSON alone;
	// the first one, applied before, is skipped.
	again := NewWAL(w, job, 0)
	if err := again.Recover(t.Context(), []writers.Pending{p1, p2}); err != nil {
		t.Fatal(err)
	}
	want := mergedRow{"3", "100000000000000000000.300000000", "7.000000000", "-2.500000000", "NULL"}
	if got := readMerged(t, w, job)["a"]; got != want {
		t.Fatalf("after the WAL's commits: %+v, want %+v", got, want)
	}
}

// The XA writer upserts through the same statements.
func TestXAPerColumn(t *testing.T) {
	job := xaJob(t)
	w := openMergesMySQL(t)
	xaCleanup(t, mysqlDSN(t), job)
	x := newTestXA(t, w, job, 0)
	if err := x.Recover(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	for txn, rows := range [][][]any{
		{{job, "a", 1, "0.1", "5", "5", "x"}, {job, "a", nil, "0.2", "-1", nil, nil}},
		{{job, "a", 1, nil, nil, "6.5", "y"}},
	} {
		if err := x.Begin(t.Context(), int64(txn+1)); err != nil {
			t.Fatal(err)
		}
		if err := x.Upsert(t.Context(), perColumn, rows); err != nil {
			t.Fatal(err)
		}
		p, err := x.PreCommit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Commit(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	want := mergedRow{"2", "0.300000000", "-1.000000000", "6.500000000", "y"}
	if got := readMerged(t, w, job)["a"]; got != want {
		t.Fatalf("after the XA commits: %+v, want %+v", got, want)
	}
}
