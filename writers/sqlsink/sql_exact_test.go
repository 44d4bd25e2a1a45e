package sqlsink

import (
	"fmt"
	"math"
	"math/big"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// readExactTotals reads mb_totals of job with amount as exact text.
func readExactTotals(t *testing.T, w *Writer, job string) map[string]string {
	t.Helper()
	rows, err := w.DB().QueryContext(t.Context(), `SELECT k, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		t.Fatalf("reading mb_totals: %v", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k string
		var amount any
		if err := rows.Scan(&k, &amount); err != nil {
			t.Fatal(err)
		}
		switch a := amount.(type) {
		case int64:
			out[k] = fmt.Sprint(a)
		case string:
			out[k] = a
		case []byte: // MySQL's DECIMAL
			out[k] = string(a)
		default:
			t.Fatalf("key %s: amount %v is a %T, not an exact integer", k, amount, amount)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func readEvents(t *testing.T, w *Writer, job string) map[string]int64 {
	t.Helper()
	rows, err := w.DB().QueryContext(t.Context(), `SELECT k, events FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func bigSum(vs ...int64) string {
	s := new(big.Int)
	for _, v := range vs {
		s.Add(s, big.NewInt(v))
	}
	return s.String()
}

// TestSQLTotalsPastInt64: mb_totals sums exactly past both ends of int64,
// across transactions and with several rows of one key in one statement
// (how the aggregator carries a sum that leaves int64), and comes back
// into int64 as an integer.
func TestSQLTotalsPastInt64(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		job := uniqueJob(t)
		const max, min = math.MaxInt64, math.MinInt64
		inTx(t, w, func(tx *Tx) error {
			return tx.Upsert(t.Context(), writers.Totals, totalsRows(job, "p", 1, max-5, "n", 1, min+5, "back", 1, max))
		})
		inTx(t, w, func(tx *Tx) error {
			return tx.Upsert(t.Context(), writers.Totals, totalsRows(job,
				"p", 1, 10, "p", 2, max, // two rows of one key in one statement
				"n", 1, -10, "n", 1, min,
				"back", 1, 1, "new", 1, max, "new", 1, max))
		})
		inTx(t, w, func(tx *Tx) error {
			return tx.Upsert(t.Context(), writers.Totals, totalsRows(job, "back", 1, -2, "p", 1, 1))
		})
		want := map[string]string{
			"p":    bigSum(max-5, 10, max, 1),
			"n":    bigSum(min+5, -10, min),
			"back": bigSum(max, 1, -2),
			"new":  bigSum(max, max),
		}
		got := readExactTotals(t, w, job)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("key %s: amount %s, want %s", k, got[k], v)
			}
		}
		// Back inside int64 the column holds an integer again.
		var back int64
		if err := w.DB().QueryRowContext(t.Context(), `SELECT amount FROM mb_totals WHERE job = ? AND k = 'back'`, job).Scan(&back); err != nil || back != max-1 {
			t.Errorf("back = %d, %v; want %d", back, err, int64(max-1))
		}
		if got := readEvents(t, w, job); got["p"] != 5 || got["n"] != 3 {
			t.Errorf("events: %v", got)
		}
	})
}

// TestSQLiteMergeAddSemantics: on SQLite every MergeAdd goes through
// mb_add: exact for integers (past int64 in a column without a declared
// type), and SQLite's own + for what is not an integer.
func TestSQLiteMergeAddSemantics(t *testing.T) {
	w := openSQLite(t)
	ctx := t.Context()
	if _, err := w.DB().ExecContext(ctx, `CREATE TABLE sums (k TEXT PRIMARY KEY, n NOT NULL, i INTEGER, r REAL, x)`); err != nil {
		t.Fatal(err)
	}
	u := writers.Upsert{Table: "sums", Keys: []string{"k"}, Values: []string{"n", "i", "r", "x"}, Merge: writers.MergeAdd}
	const max = math.MaxInt64
	first := [][]any{
		{"int", 1, 2, 1.5, 1},
		{"big", max, max, 1.0, "12"},
		{"null", 1, nil, 2.5, nil},
		{"text", "9223372036854775808", 1, 1.0, "abc"},
		{"real", 2.5, 1, 1.0, []byte("7")},
	}
	second := [][]any{
		{"int", 2, 3, 1, 2},
		{"big", max, 1, 2, 3},
		{"null", 2, 1, nil, 4},
		{"text", "-9223372036854775809", 2, 1, 5},
		{"real", 1, 2, 1, 1},
	}
	inTx(t, w, func(tx *Tx) error { return tx.Upsert(ctx, u, first) })
	inTx(t, w, func(tx *Tx) error { return tx.Upsert(ctx, u, second) })
	// What SQLite's + gives for the same operands, column by column; n and
	// i are also exact where + would overflow.
	want := map[string]string{
		"int":  "integer 3|integer 5|real 2.5|integer 3",
		"big":  "text 18446744073709551614|real 9.2233720368547758e+18|real 3.0|integer 15",
		"null": "integer 3|null |null |null ",
		"text": "integer -1|integer 3|real 2.0|integer 5",
		"real": "real 3.5|integer 3|real 2.0|integer 8",
	}
	rows, err := w.DB().QueryContext(ctx, `SELECT k,
  typeof(n) || ' ' || COALESCE(n, ''), typeof(i) || ' ' || COALESCE(i, ''),
  typeof(r) || ' ' || COALESCE(r, ''), typeof(x) || ' ' || COALESCE(x, '') FROM sums`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var c [4]string
		if err := rows.Scan(&k, &c[0], &c[1], &c[2], &c[3]); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(c[:], "|"); got != want[k] {
			t.Errorf("%s: %s, want %s", k, got, want[k])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// oldTotalsDDL is mb_totals as versions before exact sums created it.
func oldTotalsDDL(d offsets.Dialect) string {
	if d == offsets.MySQL {
		return `CREATE TABLE mb_totals (job VARCHAR(128) NOT NULL, k VARBINARY(255) NOT NULL,
  events BIGINT NOT NULL, amount BIGINT NOT NULL, PRIMARY KEY (job, k)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	return `CREATE TABLE mb_totals (job TEXT NOT NULL, k TEXT NOT NULL,
  events INTEGER NOT NULL, amount INTEGER NOT NULL, PRIMARY KEY (job, k))`
}

// testMigrateTotals: an old mb_totals (rows near the old limit) is
// migrated by processes starting on it at once; every one comes up, the
// rows are kept, and the migrated column sums past int64.
func testMigrateTotals(t *testing.T, dsn string, dialect offsets.Dialect) {
	ctx := t.Context()
	raw, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.DB().ExecContext(ctx, oldTotalsDDL(dialect)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.DB().ExecContext(ctx, `INSERT INTO mb_totals VALUES ('j', 'a', 3, 9223372036854775800), ('j', 'b', 1, -9223372036854775800)`); err != nil {
		t.Fatal(err)
	}
	const starts = 3
	ws := make([]*Writer, starts)
	for i := range ws {
		if ws[i], err = Open(ctx, dsn); err != nil {
			t.Fatal(err)
		}
		defer ws[i].Close()
	}
	var g errgroup.Group
	var ready sync.WaitGroup
	ready.Add(starts)
	for _, w := range ws {
		g.Go(func() error {
			ready.Done()
			ready.Wait() // as close to together as goroutines get
			return w.CreateTables(ctx)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("CreateTables of processes starting together on an old mb_totals: %v", err)
	}
	w := ws[0]
	if dialect == offsets.MySQL {
		var typ string
		if err := w.DB().QueryRowContext(ctx, `SELECT COLUMN_TYPE FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'mb_totals' AND COLUMN_NAME = 'amount'`).Scan(&typ); err != nil || typ != "decimal(38,0)" {
			t.Fatalf("amount is %q (%v), want decimal(38,0)", typ, err)
		}
	} else if typ, err := sqliteColumnType(ctx, w.DB(), writers.TotalsTable, "amount"); err != nil || typ != "" {
		t.Fatalf("amount has declared type %q (%v), want none", typ, err)
	}
	inTx(t, w, func(tx *Tx) error {
		return tx.Upsert(ctx, writers.Totals, totalsRows("j", "a", 1, 100, "b", 1, -100))
	})
	got := readExactTotals(t, w, "j")
	if got["a"] != "9223372036854775900" || got["b"] != "-9223372036854775900" {
		t.Fatalf("after the migration: %v, want a past 2^63-1 and b past -2^63", got)
	}
	if tt := readEvents(t, w, "j"); tt["a"] != 4 || tt["b"] != 2 {
		t.Fatalf("events after the migration: %v", tt)
	}
	// Once migrated, a start changes nothing.
	if err := w.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	if got2 := readExactTotals(t, w, "j"); got2["a"] != got["a"] {
		t.Fatalf("a second start changed a: %v", got2)
	}
}

func TestMigrateTotalsSQLite(t *testing.T) {
	testMigrateTotals(t, "sqlite://"+filepath.Join(t.TempDir(), "old.db"), offsets.SQLite)
}

func TestMigrateTotalsMySQL(t *testing.T) {
	testMigrateTotals(t, testutil.FreshMySQLDatabase(t, mysqlDSN(t)), offsets.MySQL)
}
