package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// Row jobs: an append (writers.MergeAppend) inserts every row, equal rows
// as two; an upsert's Delete rows delete their key, the last row of a key
// in one write winning.

// rowTable creates a table of its own for the test, dropped at the end:
// with a primary key (job, k) when keyed, without any key otherwise.
func rowTable(t *testing.T, w *Writer, keyed bool) string {
	t.Helper()
	name := "rows_" + strings.ReplaceAll(uniqueJob(t)[len(nonJobChars.ReplaceAllString(t.Name(), "_"))+1:], "-", "")
	kt, vt := "VARBINARY(64)", "VARCHAR(200)"
	if w.Dialect() == offsets.SQLite {
		kt, vt = "TEXT", "TEXT"
	}
	ddl := fmt.Sprintf("CREATE TABLE %s (job %s NOT NULL, k %s NOT NULL, n BIGINT, s %s", name, kt, kt, vt)
	if keyed {
		ddl += ", PRIMARY KEY (job, k)"
	}
	if _, err := w.DB().ExecContext(t.Context(), ddl+")"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = w.DB().ExecContext(context.Background(), "DROP TABLE "+name) })
	return name
}

// rowCounts reads the table as a multiset: each distinct row's count.
func rowCounts(t *testing.T, w *Writer, table string) map[string]int {
	t.Helper()
	rows, err := w.DB().QueryContext(t.Context(), "SELECT job, k, n, s FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var job, k string
		var n *int64
		var s *string
		if err := rows.Scan(&job, &k, &n, &s); err != nil {
			t.Fatal(err)
		}
		out[rowText(job, k, n, s)]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func rowText(job, k string, n *int64, s *string) string {
	ns, ss := "NULL", "NULL"
	if n != nil {
		ns = fmt.Sprint(*n)
	}
	if s != nil {
		ss = *s
	}
	return fmt.Sprintf("%s|%s|%s|%s", job, k, ns, ss)
}

func appendOf(table string) writers.Upsert {
	return writers.Upsert{Table: table, Values: []string{"job", "k", "n", "s"}, Merge: writers.MergeAppend}
}

func replaceOf(table string) writers.Upsert {
	return writers.Upsert{Table: table, Keys: []string{"job", "k"}, Values: []string{"n", "s"}, Merge: writers.MergeReplace}
}

func wantCounts(t *testing.T, got, want map[string]int) {
	t.Helper()
	if !maps.Equal(got, want) {
		keys := slices.Sorted(maps.Keys(want))
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if got[k] != want[k] {
				t.Errorf("row %s: %d stored, want %d", k, got[k], want[k])
			}
		}
		for _, k := range keys {
			if _, ok := got[k]; !ok {
				t.Errorf("row %s: missing, want %d", k, want[k])
			}
		}
		t.FailNow()
	}
}

// An append inserts every row, equal rows as two, across statements (2,500
// rows are three INSERTs of up to rowsPerStatement), and CheckUpsert takes
// a table without any key for it.
func TestSQLAppend(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		table := rowTable(t, w, false)
		u := appendOf(table)
		if err := w.CheckUpsert(t.Context(), u); err != nil {
			t.Fatalf("CheckUpsert of an append into a table without a key: %v", err)
		}
		if err := w.CheckUpsert(t.Context(), writers.Upsert{Table: table, Values: []string{"job", "nope"}, Merge: writers.MergeAppend}); !errors.Is(err, ErrBadTable) {
			t.Fatalf("CheckUpsert of an append with a missing column = %v, want ErrBadTable", err)
		}
		var rows [][]any
		want := map[string]int{}
		for i := range 2500 {
			n, s := int64(i%7), fmt.Sprintf("value %d", i%300)
			rows = append(rows, []any{"j", fmt.Sprintf("k%d", i%500), n, s})
			want[rowText("j", fmt.Sprintf("k%d", i%500), &n, &s)]++
		}
		rows = append(rows, []any{"j", "null", nil, nil}, []any{"j", "null", nil, nil})
		want[rowText("j", "null", nil, nil)] = 2
		inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), u, rows) })
		wantCounts(t, rowCounts(t, w, table), want)
		// Written again, every row is there twice.
		inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), u, rows) })
		for k := range want {
			want[k] *= 2
		}
		wantCounts(t, rowCounts(t, w, table), want)
	})
}

// A Delete row deletes its key; within one write the last row of a key
// wins, whether it upserts or deletes. Deleting a key that has no row is
// no error.
func TestSQLUpsertDeletes(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		table := rowTable(t, w, true)
		u := replaceOf(table)
		if err := w.CheckUpsert(t.Context(), u); err != nil {
			t.Fatal(err)
		}
		del := writers.Delete
		inTx(t, w, func(tx *Tx) error {
			return tx.Upsert(t.Context(), u, [][]any{{"j", "a", 1, "a1"}, {"j", "b", 1, "b1"}, {"j", "c", 1, "c1"}, {"j", "e", 1, "e1"}})
		})
		inTx(t, w, func(tx *Tx) error {
			return tx.Upsert(t.Context(), u, [][]any{
				{"j", "a", 2, "a2"}, {"j", "b", del, nil}, {"j", "b", 3, "b3"}, {"j", "a", del, nil},
				{"j", "c", 5, "c5"}, {"j", "d", del, nil}, {"j", "c", del, nil}, {"j", "c", 6, "c6"},
				{"j", "e", del, "ignored"}, {"x", "e", 7, "x-e7"},
			})
		})
		n := func(i int64) *int64 { return &i }
		s := func(s string) *string { return &s }
		wantCounts(t, rowCounts(t, w, table), map[string]int{
			rowText("j", "b", n(3), s("b3")):   1,
			rowText("j", "c", n(6), s("c6")):   1,
			rowText("x", "e", n(7), s("x-e7")): 1,
		})

		// Many deletes: more keys than one DELETE takes.
		var rows, dels [][]any
		for i := range 2500 {
			rows = append(rows, []any{"m", fmt.Sprintf("k%04d", i), int64(i), nil})
			dels = append(dels, []any{"m", fmt.Sprintf("k%04d", i), del, nil})
		}
		inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), u, rows) })
		dels = append(dels, []any{"m", "k0007", 8, "back"})
		inTx(t, w, func(tx *Tx) error { return tx.Upsert(t.Context(), u, dels) })
		got := rowCounts(t, w, table)
		if want := rowText("m", "k0007", n(8), s("back")); len(got) != 4 || got[want] != 1 {
			t.Fatalf("after deleting 2,500 keys and putting one back: %v, want 3 rows of before and %s", got, want)
		}
	})
}

// writers.Delete marks a row of a MergeReplace upsert only; elsewhere it
// is the rows' error, and nothing is written.
func TestSQLDeleteRefusedElsewhere(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		keyed, plain := rowTable(t, w, true), rowTable(t, w, false)
		for what, c := range map[string]struct {
			u   writers.Upsert
			row []any
		}{
			"append":    {appendOf(plain), []any{writers.Delete, "k", 1, "s"}},
			"merge add": {writers.Upsert{Table: keyed, Keys: []string{"job", "k"}, Values: []string{"n"}, Merge: writers.MergeAdd}, []any{"j", "k", writers.Delete}},
		} {
			err := w.Upsert(t.Context(), c.u, [][]any{c.row})
			if !errors.Is(err, writers.ErrBadValue) {
				t.Errorf("%s: a Delete row: %v, want ErrBadValue", what, err)
			}
		}
	})
}

// A statement takes at most rowsPerStatement rows, maxParams values and
// about statementBytes of them, and always at least one row.
func TestChunkLen(t *testing.T) {
	small := make([][]any, 3000)
	for i := range small {
		small[i] = []any{"j", "k", int64(i), "a value of some thirty bytes.."}
	}
	big := make([][]any, 10)
	for i := range big {
		big[i] = []any{strings.Repeat("x", 1<<20)}
	}
	huge := [][]any{{strings.Repeat("x", statementBytes)}, {"y"}}
	for _, c := range []struct {
		rows [][]any
		per  int
		want int
	}{
		{small, rowsPerStatement, rowsPerStatement},
		{small[:10], rowsPerStatement, 10},
		{small, 7, 7},
		{big, rowsPerStatement, 1}, // each row counts as 2 MiB escaped
		{huge, rowsPerStatement, 1},
	} {
		if got := chunkLen(c.rows, c.per); got != c.want {
			t.Errorf("chunkLen(%d rows, %d) = %d, want %d", len(c.rows), c.per, got, c.want)
		}
	}
}
