package main_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestSQLJobGlobalAggregate: a query without GROUP BY keeps one row (keyed
// by the hidden mb_all column) on MySQL, SQLite and Redis; run twice it
// counts each record once, and verify --sql passes.
func TestSQLJobGlobalAggregate(t *testing.T) {
	t.Parallel()
	testSQLJobOnEverySink(t, "sqlglobal", func(table, sums, topic string) string {
		return fmt.Sprintf("INSERT INTO %s SELECT COUNT(*) AS events, COUNT(amount) AS amounts, %s FROM `%s`", table, sums, topic)
	}, "groups recomputed 1", "OK: all 1 groups match")
}

// TestSQLJobStringMinMax: MIN and MAX of strings (byte order) on MySQL,
// SQLite and Redis; run twice they keep the same row, and verify --sql
// compares their bytes.
func TestSQLJobStringMinMax(t *testing.T) {
	t.Parallel()
	testSQLJobOnEverySink(t, "sqlstrminmax", func(table, sums, topic string) string {
		return fmt.Sprintf("INSERT INTO %s SELECT CAST(amount > 1 AS SIGNED) AS big, MIN(CAST(`key` AS CHAR)) AS key_lo, MAX(UPPER(`key`)) AS key_hi, "+
			"MAX(CAST(amount AS CHAR)) AS amount_text, COUNT(*) AS events, %s FROM `%s` GROUP BY big", table, sums, topic)
	}, "groups recomputed 2", "OK: all 2 groups match")
}

// testSQLJobOnEverySink runs query (given its table, the SUM/MIN columns the
// sink takes and the topic) on MySQL, SQLite and Redis twice, verifying
// after each run.
func testSQLJobOnEverySink(t *testing.T, name string, query func(table, sums, topic string) string, want ...string) {
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	mysql := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	redis := testutil.NeedServer(t, testutil.EnvRedis)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, name)
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	for _, c := range []struct{ name, sink, strategy, sum string }{
		{"mysql", mysql, "txn", "SUM(amount) AS amount, MIN(amount) AS lo"},
		{"sqlite", "sqlite://" + filepath.Join(dir, "sink.db"), "txn", "SUM(amount) AS amount"},
		{"redis", redis, "idempotent", "SUM(amount) AS amount, MIN(amount) AS lo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := query(sqlName(name+"_"+c.name), c.sum, topic)
			common := []string{"--brokers", kafka, "--job", topic + "-" + c.name, "--sink", c.sink, "--sql", q}
			for i := range 2 {
				r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--strategy", c.strategy, "--until-idle", "1s", "-q"}, common...)...)
				if r.Code != 0 {
					t.Fatalf("run %d --sql: exit %d\n%s", i+1, r.Code, r)
				}
				args := append([]string{"verify"}, common...)
				if c.strategy != "idempotent" {
					args = append(args, "--strategy", c.strategy)
				}
				r = systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, args...)
				if r.Code != 0 {
					t.Fatalf("verify --sql after run %d: exit %d\n%s", i+1, r.Code, r)
				}
				wantLines(t, r, append([]string{"records read 9"}, want...)...)
				t.Logf("verify:\n%s", r.Stdout)
			}
		})
	}
}
