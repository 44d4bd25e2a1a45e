package main_test

import (
	"fmt"
	"strings"
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
// and a deleted dead letter each make it exit 1 naming them. A row job is
// refused there with exit 2 (not supported yet). Before, every --sql into
// postgres:// exited 2.
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
	row := []string{"run", "--brokers", kafka, "--sink", sink, "--job", "pg-rows", "-q", "--until-idle", "1s",
		"--sql", fmt.Sprintf("INSERT INTO pg_rows SELECT `key`, amount FROM `%s`", topic)}
	r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, row...)
	if r.Code != 2 {
		t.Errorf("row job into PostgreSQL: exit %d, want 2\n%s", r.Code, r)
	}
	wantStderr := "row job: not supported on a PostgreSQL sink yet"
	if !strings.Contains(r.Stderr, wantStderr) {
		t.Errorf("row job into PostgreSQL: stderr %q, want %q", r.Stderr, wantStderr)
	}
}
