package sqlsink

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/writers"
)

// A per-column upsert into PostgreSQL whose rows repeat a key in one call
// merges them in turn, as MySQL does (PostgreSQL alone refuses such a
// statement: "cannot affect row a second time"); strings of BYTEA columns
// are their bytes (a backslash is no escape); NULL keeps the stored value
// and a stored NULL takes the new one.
func TestPostgresUpsertRepeatedKeys(t *testing.T) {
	w := openPG(t, pgDSN(t))
	ctx := t.Context()
	if _, err := w.DB().ExecContext(ctx, `CREATE TABLE "PgMerge" ("K" BYTEA NOT NULL, n BIGINT NOT NULL, s NUMERIC(38,9),
		lo NUMERIC(38,9), hi NUMERIC(38,9), first BYTEA, last BYTEA, PRIMARY KEY ("K"))`); err != nil {
		t.Fatal(err)
	}
	u := writers.Upsert{Table: "PgMerge", Keys: []string{"K"}, Values: []string{"n", "s", "lo", "hi", "first", "last"},
		Merges: []writers.Merge{writers.MergeAdd, writers.MergeAdd, writers.MergeMin, writers.MergeMax, writers.MergeMinBytes, writers.MergeMaxBytes}}
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, rows := range [][][]any{
		{{`a\x41`, int64(1), "1.5", nil, "2", "m", nil}, {"b", int64(1), nil, "7", nil, nil, "b"}, {`a\x41`, int64(2), "-0.25", "-3", "9", `\`, "z"}},
		{{"b", int64(4), "10", "5", "8", "a", "c"}, {`a\x41`, int64(1), nil, nil, nil, "zz", "a"}, {"b", int64(1), "0.000000001", "6", "9", nil, nil}},
	} {
		if err := tx.Upsert(ctx, u, rows); err != nil {
			t.Fatal(err)
		}
	}
	// A plain upsert that replaces keeps each key's last row.
	r := writers.Upsert{Table: "PgMerge", Keys: []string{"K"}, Values: []string{"n"}, Merge: writers.MergeReplace}
	if err := tx.Upsert(ctx, r, [][]any{{"c", int64(1)}, {"c", int64(3)}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	rows, err := w.DB().QueryContext(ctx, `SELECT "K", n, COALESCE(s::text, 'NULL'), COALESCE(lo::text, 'NULL'), COALESCE(hi::text, 'NULL'),
		COALESCE(encode(first, 'escape'), 'NULL'), COALESCE(encode(last, 'escape'), 'NULL') FROM "PgMerge"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k []byte
		var n int64
		var s, lo, hi, first, last string
		if err := rows.Scan(&k, &n, &s, &lo, &hi, &first, &last); err != nil {
			t.Fatal(err)
		}
		got[string(k)] = fmtRow(n, s, lo, hi, first, last)
	}
	want := map[string]string{
		`a\x41`: fmtRow(4, "1.250000000", "-3.000000000", "9.000000000", `\\`, "z"),
		"b":     fmtRow(6, "10.000000001", "5.000000000", "9.000000000", "a", "c"),
		"c":     fmtRow(3, "NULL", "NULL", "NULL", "NULL", "NULL"),
	}
	if len(got) != len(want) {
		t.Fatalf("rows %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("row %q = %s; want %s", k, got[k], v)
		}
	}
}

func fmtRow(n int64, vs ...string) string {
	return strings.Join(append([]string{strconv.FormatInt(n, 10)}, vs...), " ")
}

// The BYTEA columns of a table are read through the writer's transaction:
// with every connection of the pool in transactions (here the only one),
// reading them through the pool would wait forever.
func TestPostgresByteaLookupInTx(t *testing.T) {
	w := openPG(t, pgDSN(t))
	if _, err := w.DB().ExecContext(t.Context(), `CREATE TABLE one_conn (k BYTEA PRIMARY KEY, v BIGINT)`); err != nil {
		t.Fatal(err)
	}
	w.DB().SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	u := writers.Upsert{Table: "one_conn", Keys: []string{"k"}, Values: []string{"v"}, Merge: writers.MergeAdd}
	if err := tx.Upsert(ctx, u, [][]any{{`\x00`, int64(1)}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var k []byte
	if err := w.DB().QueryRowContext(ctx, `SELECT k FROM one_conn`).Scan(&k); err != nil || string(k) != `\x00` {
		t.Errorf("key %q (%v), want the 4 bytes \\x00", k, err)
	}
}
