package main_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// pgAggQuery sums, counts and keeps the least and greatest amount and the
// greatest key text of each key: NUMERIC, BIGINT and BYTEA columns.
func pgAggQuery(table, topic string) string {
	return fmt.Sprintf("INSERT INTO %s SELECT `key`, COUNT(*) AS events, SUM(amount) AS amount, MIN(amount) AS lo, MAX(CAST(`key` AS CHAR)) AS hi FROM `%s` GROUP BY `key`", table, topic)
}

// An aggregate SQL job runs into PostgreSQL with txn and single, and
// verify --sql finds every group (exit 0); a changed sum, a deleted row
// and a deleted dead letter each make it exit 1 naming them. Before,
// every --sql into postgres:// exited 2.
func TestSQLJobPostgres(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "pgsql")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	for _, strategy := range []string{"txn", "single"} {
		table := "pg_agg_" + strategy
		common := []string{"--brokers", kafka, "--sink", sink, "--sql", pgAggQuery(table, topic), "--job", "pg-" + strategy, "--strategy", strategy}
		if r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--until-idle", "1s", "-q"}, common...)...); r.Code != 0 {
			t.Fatalf("run --sql --strategy %s: exit %d\n%s", strategy, r.Code, r)
		}
		verify := func() systemtest.Result {
			return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"verify"}, common...)...)
		}
		r := verify()
		if r.Code != 0 {
			t.Fatalf("verify --sql --strategy %s: exit %d\n%s", strategy, r.Code, r)
		}
		wantLines(t, r, "rejected 2 (dead letters the sink holds for the job: 2)", "OK: all 3 groups match")
		if strategy != "txn" {
			continue
		}
		w, err := sqlsink.Open(t.Context(), sink)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		exec := func(stmt string) {
			t.Helper()
			if _, err := w.DB().ExecContext(t.Context(), stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		var got string
		if err := w.DB().QueryRowContext(t.Context(), `SELECT amount::text || ' ' || lo::text || ' ' || encode(hi, 'escape') FROM `+table+` WHERE "key" = 'b'::bytea`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := "4.250000000 1.250000000 b"; got != want {
			t.Errorf("row b: %q, want %q", got, want)
		}
		exec(`UPDATE ` + table + ` SET amount = amount + 0.000000001 WHERE "key" = 'a'::bytea`)
		wantVerifyFail(t, verify(), "FAIL: 1 of 3 groups differ (0 missing, 0 extra, 1 different)", `"a" amount 12.5 12.500000001`)
		exec(`DELETE FROM ` + table + ` WHERE "key" = 'c'::bytea`)
		wantVerifyFail(t, verify(), "FAIL: 2 of 3 groups differ (1 missing, 0 extra, 1 different)")
		exec(`DELETE FROM mb_dead_letters WHERE part = 0`)
		wantVerifyFail(t, verify(), "1 rejected record has no dead letter in the sink (partition/offset 0/2)")
	}
}

// Row jobs into PostgreSQL: an append and an upsert run with txn, and
// verify --sql finds every row (NUMERIC(10,2) as "5.00", TIMESTAMP(3) with
// its 3 digits); a changed value, a deleted row and an added one each
// make it exit 1. Before, every --sql into postgres:// exited 2.
func TestRowJobPostgres(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "pgrows")
	produceSQLInput(t, kafka, topic, rowJobRecords)
	w, err := sqlsink.Open(t.Context(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	exec := func(stmt string) {
		t.Helper()
		if _, err := w.DB().ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	dir := t.TempDir()
	job := func(name, q string) (verify func() systemtest.Result) {
		common := []string{"--brokers", kafka, "--sink", sink, "--sql", q, "--job", name}
		if r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--until-idle", "1s", "-q"}, common...)...); r.Code != 0 {
			t.Fatalf("run --sql %s: exit %d\n%s", q, r.Code, r)
		}
		return func() systemtest.Result {
			return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"verify"}, common...)...)
		}
	}
	verify := job("append", fmt.Sprintf("INSERT INTO pg_append SELECT `key`, CAST(amount AS DECIMAL(10,2)) AS amount, _timestamp AS ts FROM `%s`", topic))
	r := verify()
	if r.Code != 0 {
		t.Fatalf("verify --sql of the append: exit %d\n%s", r.Code, r)
	}
	wantLines(t, r, "rejected 2 (dead letters the sink holds for the job: 2)", "rows recomputed 5 (one per record accepted)", "OK: all 5 rows match")
	exec(`UPDATE pg_append SET amount = 0 WHERE "key" = 'c'`)
	wantVerifyFail(t, verify(), "missing 1", "extra 1")
	exec(`UPDATE pg_append SET amount = NULL WHERE "key" = 'c'`)
	exec(`UPDATE pg_append SET ts = ts + interval '1 millisecond' WHERE "key" = 'b'`)
	wantVerifyFail(t, verify(), "missing 1", "extra 1")

	verify = job("upsert", fmt.Sprintf("REPLACE INTO pg_upsert (PRIMARY KEY (k)) SELECT `key` AS k, CAST(amount AS DECIMAL(10,2)) AS amount FROM `%s`", topic))
	r = verify()
	if r.Code != 0 {
		t.Fatalf("verify --sql of the upsert: exit %d\n%s", r.Code, r)
	}
	wantLines(t, r, "rows recomputed 4 (one per key)", "OK: all 4 rows match")
	exec(`UPDATE pg_upsert SET amount = 6 WHERE k = 'a'::bytea`)
	wantVerifyFail(t, verify(), "different 1", `"a" amount "5.00" "6.00"`)
	exec(`UPDATE pg_upsert SET amount = 5 WHERE k = 'a'::bytea`)
	exec(`DELETE FROM pg_upsert WHERE k = 'c'::bytea`)
	exec(`INSERT INTO pg_upsert VALUES ('d'::bytea, 1)`)
	wantVerifyFail(t, verify(), "missing 1", "extra 1", "different 0", `"c" - (row) (no row)`, `"d" - (no row) (row)`)
}
