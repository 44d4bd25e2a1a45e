package sqlsink

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/microbatch/microbatch/writers"
)

// CheckUpsert accepts a table keyed on the upsert's keys (primary or
// unique, any column order, a reserved word as a column name) and refuses a
// missing table, a missing column and a table without that key — the case
// in which MySQL would quietly insert duplicates instead of merging.
func TestCheckUpsert(t *testing.T) {
	forEachSink(t, func(t *testing.T, w *Writer) {
		ctx := t.Context()
		name := fmt.Sprintf("cu_%x", time.Now().UnixNano()) // shared MySQL database: unique per run
		ddl := map[string]string{
			"pk":     "CREATE TABLE " + name + "_pk (`key` VARCHAR(64), region VARCHAR(64), n BIGINT, PRIMARY KEY (region, `key`))",
			"unique": "CREATE TABLE " + name + "_uq (id INTEGER PRIMARY KEY, `key` VARCHAR(64), region VARCHAR(64), n BIGINT, UNIQUE (`key`, region))",
			"nokey":  "CREATE TABLE " + name + "_nk (`key` VARCHAR(64), region VARCHAR(64), n BIGINT)",
		}
		for _, q := range ddl {
			if _, err := w.DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			for _, s := range []string{"_pk", "_uq", "_nk"} {
				w.DB().Exec("DROP TABLE " + name + s)
			}
		})
		up := func(suffix string, values ...string) writers.Upsert {
			return writers.Upsert{Table: name + suffix, Keys: []string{"key", "region"}, Values: values, Merge: writers.MergeAdd}
		}
		for _, s := range []string{"_pk", "_uq"} {
			if err := w.CheckUpsert(ctx, up(s, "n")); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
		for what, u := range map[string]writers.Upsert{
			"no key":         up("_nk", "n"),
			"missing column": up("_pk", "n", "amount"),
			"missing table":  up("_none", "n"),
			"key is not ":    {Table: name + "_pk", Keys: []string{"key"}, Values: []string{"n"}},
		} {
			if err := w.CheckUpsert(ctx, u); !errors.Is(err, ErrBadTable) {
				t.Errorf("%s: CheckUpsert = %v, want ErrBadTable", what, err)
			}
		}
		// The reserved word works in the upsert itself too.
		u := up("_pk", "n")
		for range 2 {
			if err := w.Upsert(ctx, u, [][]any{{"a", "emea", 2}, {"a", "emea", 3}}); err != nil {
				t.Fatal(err)
			}
		}
		var n int64
		if err := w.DB().QueryRowContext(ctx, "SELECT n FROM "+name+"_pk WHERE `key` = 'a'").Scan(&n); err != nil || n != 10 {
			t.Fatalf("n = %d (%v), want 10", n, err)
		}
	})
}
