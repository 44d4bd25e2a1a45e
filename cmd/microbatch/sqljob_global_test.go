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
// sink takes and the topic) on MySQL (txn, and checkpoint with its
// write-ahead log), SQLite (txn, checkpoint with WAL) and Redis: run,
// verify, the same records written again, run (merged into the rows the
// sink holds), verify.
func testSQLJobOnEverySink(t *testing.T, name string, query func(table, sums, topic string) string, want ...string) {
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	mysql := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	redis := testutil.NeedServer(t, testutil.EnvRedis)
	systemtest.Binary(t)
	dir := t.TempDir()
	const mysqlSums, sqliteSums = "SUM(amount) AS amount, MIN(amount) AS lo", "SUM(amount) AS amount"
	for _, c := range []struct {
		name, sink, strategy, sum string
		extra, runExtra           []string
	}{
		{name: "mysql", sink: mysql, strategy: "txn", sum: mysqlSums},
		{name: "mysql_wal", sink: mysql, strategy: "checkpoint", sum: mysqlSums,
			extra: []string{"--state-dir", filepath.Join(dir, "state-mysql")}, runExtra: []string{"--sink-mode", "wal"}},
		{name: "sqlite", sink: "sqlite://" + filepath.Join(dir, "sink.db"), strategy: "txn", sum: sqliteSums},
		{name: "sqlite_wal", sink: "sqlite://" + filepath.Join(dir, "sink-wal.db"), strategy: "checkpoint", sum: sqliteSums,
			extra: []string{"--state-dir", filepath.Join(dir, "state-sqlite")}, runExtra: []string{"--sink-mode", "wal"}},
		{name: "redis", sink: redis, strategy: "idempotent", sum: mysqlSums},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := systemtest.UniqueName(t, name)
			q := query(sqlName(name+"_"+c.name), c.sum, topic)
			common := append([]string{"--brokers", kafka, "--job", topic, "--sink", c.sink, "--sql", q}, c.extra...)
			for i := range 2 {
				produceSQLInput(t, kafka, topic, sqlTestRecords)
				r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append(append([]string{"run", "--strategy", c.strategy, "--until-idle", "1s", "-q"}, common...), c.runExtra...)...)
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
				wantLines(t, r, append([]string{fmt.Sprintf("records read %d", 9*(i+1))}, want...)...)
				t.Logf("verify:\n%s", r.Stdout)
			}
		})
	}
}
