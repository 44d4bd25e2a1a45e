package main_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// rowJobRecords go round-robin over 2 partitions: two byte-identical
// records (two rows), a key with a trailing space (a row of its own), a
// record without an amount (NULL), and two the CAST rejects.
var rowJobRecords = []string{
	`{"key":"a","amount":5}`, `{"key":"a","amount":5}`, `{"key":"b","amount":1.25}`,
	`{"key":"b","amount":"lots"}`, `not json`, `{"key":"c"}`, `{"key":"a ","amount":5}`,
}

// TestVerifySQLRowJobs: verify --sql of a row job says OK for the run's
// table, and names each hand-made change with exit 1: an append is a
// multiset (a lost duplicate is missing, a second copy extra, NULL is not
// 0.00, "a " is not "a"); an upsert is by key (a value no record of the key
// has is different, a deleted row missing, a new key extra).
func TestVerifySQLRowJobs(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "vrows")
	produceSQLInput(t, kafka, topic, rowJobRecords)
	w, err := sqlsink.Open(t.Context(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// (A text column compares with PAD SPACE: `key` = 'a' is true of 'a '
	// too, hence the CASTs to BINARY.)
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

	t.Run("append", func(t *testing.T) {
		verify := job("append", fmt.Sprintf("INSERT INTO vrows_append SELECT `key`, CAST(amount AS DECIMAL(10,2)) AS amount FROM `%s`", topic))
		r := verify()
		if r.Code != 0 {
			t.Fatalf("verify --sql of the run's table: exit %d\n%s", r.Code, r)
		}
		wantLines(t, r, "rejected 2 (dead letters the sink holds for the job: 2)", "rows recomputed 5 (one per record accepted)",
			"rows in the sink 5", "OK: all 5 rows match")

		exec("DELETE FROM vrows_append WHERE CAST(`key` AS BINARY) = 'a' LIMIT 1")
		wantVerifyFail(t, verify(), "missing 1", "extra 0", `("a", "5.00") × 2 1`)
		exec("INSERT INTO vrows_append VALUES ('a', 5.00), ('a', 5.00)")
		wantVerifyFail(t, verify(), "missing 0", "extra 1", `("a", "5.00") × 2 3`)
		exec("DELETE FROM vrows_append WHERE CAST(`key` AS BINARY) = 'a' LIMIT 1")
		if r := verify(); r.Code != 0 {
			t.Fatalf("verify --sql after the table was put back: exit %d\n%s", r.Code, r)
		}
		exec("UPDATE vrows_append SET amount = 0 WHERE `key` = 'c'")
		wantVerifyFail(t, verify(), "missing 1", "extra 1", `("c", NULL) × 1 0`, `("c", "0.00") × 0 1`)
		exec("UPDATE vrows_append SET amount = NULL WHERE `key` = 'c'")
		exec("UPDATE vrows_append SET `key` = 'a' WHERE CAST(`key` AS BINARY) = 'a '")
		wantVerifyFail(t, verify(), "missing 1", "extra 1", `("a ", "5.00") × 1 0`, `("a", "5.00") × 2 3`)
	})

	t.Run("upsert", func(t *testing.T) {
		// "a" and "b" are in both partitions: either partition's latest
		// record of the key is right.
		verify := job("upsert", fmt.Sprintf("REPLACE INTO vrows_upsert (PRIMARY KEY (k)) SELECT `key` AS k, CAST(amount AS DECIMAL(10,2)) AS amount FROM `%s`", topic))
		r := verify()
		if r.Code != 0 {
			t.Fatalf("verify --sql of the run's table: exit %d\n%s", r.Code, r)
		}
		wantLines(t, r, "rows recomputed 4 (one per key)", "rows in the sink 4", "OK: all 4 rows match")

		exec("UPDATE vrows_upsert SET amount = 6 WHERE k = 'a'")
		wantVerifyFail(t, verify(), "different 1", `"a" amount "5.00" "6.00"`)
		exec("UPDATE vrows_upsert SET amount = 5 WHERE k = 'a'")
		exec("DELETE FROM vrows_upsert WHERE k = 'c'")
		exec("INSERT INTO vrows_upsert VALUES ('d', 1)")
		wantVerifyFail(t, verify(), "missing 1", "extra 1", "different 0", `"c" - (row) (no row)`, `"d" - (no row) (row)`)
	})

	t.Run("upsert into Redis", func(t *testing.T) {
		// "c" has no amount: all its values are NULL, and Redis keeps no
		// field for a NULL — the row is there as no field at all.
		redisDSN := testutil.NeedServer(t, testutil.EnvRedis)
		name := systemtest.UniqueName(t, "vrows-redis")
		q := fmt.Sprintf("REPLACE INTO vrows_upsert (PRIMARY KEY (k)) SELECT `key` AS k, CAST(amount AS DECIMAL(10,2)) AS amount FROM `%s`", topic)
		common := []string{"--brokers", kafka, "--sink", redisDSN, "--strategy", "idempotent", "--sql", q, "--job", name}
		if r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--until-idle", "1s", "-q"}, common...)...); r.Code != 0 {
			t.Fatalf("run --sql %s: exit %d\n%s", q, r.Code, r)
		}
		verify := func() systemtest.Result {
			return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"verify"}, common...)...)
		}
		r := verify()
		if r.Code != 0 {
			t.Fatalf("verify --sql of the run's hashes: exit %d\n%s", r.Code, r)
		}
		wantLines(t, r, "rows recomputed 4 (one per key)", "rows in the sink 4", "OK: all 4 rows match")
		opt, err := redis.ParseURL(redisDSN)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		// docs/redis-layout.md: mb:{job}:rows:{table}:{column}, row key -> value.
		if err := rdb.HSet(t.Context(), "mb:{"+name+"}:rows:vrows_upsert:amount", "c", "1.00").Err(); err != nil {
			t.Fatal(err)
		}
		wantVerifyFail(t, verify(), "different 1", `"c" amount NULL "1.00"`)
	})

	t.Run("aggregate of the record's fields", func(t *testing.T) {
		// verify recomputes with each record's own fields too (it read
		// _partition as NULL: every group was wrong).
		verify := job("parts", fmt.Sprintf("INSERT INTO vrows_parts SELECT _partition AS p, COUNT(*) AS n FROM `%s` WHERE `key` IS NOT NULL GROUP BY p", topic))
		r := verify()
		if r.Code != 0 {
			t.Fatalf("verify --sql of the run's table: exit %d\n%s", r.Code, r)
		}
		wantLines(t, r, "groups recomputed 2", "OK: all 2 groups match")
	})
}

// TestVerifySQLRowJobSQLiteDatetime: a user's own SQLite table with a
// DATETIME column keeps the job's milliseconds, and verify --sql reads
// them back (SQLite's driver says nothing of a column's precision; verify
// cut the fraction off and said every row differed).
func TestVerifySQLRowJobSQLiteDatetime(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "vrows-dt")
	produceSQLInput(t, kafka, topic, []string{
		`{"key":"a","ts":"2026-01-02T03:04:05.678Z"}`, `{"key":"b","ts":"2026-01-02T03:04:05Z"}`,
	})
	sink := "sqlite://" + t.TempDir() + "/sink.db"
	w, err := sqlsink.Open(t.Context(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.DB().ExecContext(t.Context(), "CREATE TABLE vrows_dt (k TEXT NOT NULL, ts DATETIME)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	q := fmt.Sprintf("INSERT INTO vrows_dt SELECT `key` AS k, CAST(ts AS DATETIME(3)) AS ts FROM `%s`", topic)
	common := []string{"--brokers", kafka, "--sink", sink, "--sql", q, "--job", "dt"}
	if r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--until-idle", "1s", "-q"}, common...)...); r.Code != 0 {
		t.Fatalf("run --sql %s: exit %d\n%s", q, r.Code, r)
	}
	verify := func() systemtest.Result {
		return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"verify"}, common...)...)
	}
	if r := verify(); r.Code != 0 {
		t.Fatalf("verify --sql of the run's table: exit %d\n%s", r.Code, r)
	}
	if _, err := w.DB().ExecContext(t.Context(), "UPDATE vrows_dt SET ts = '2026-01-02 03:04:05.679' WHERE k = 'a'"); err != nil {
		t.Fatal(err)
	}
	wantVerifyFail(t, verify(), "missing 1", "extra 1")
}
