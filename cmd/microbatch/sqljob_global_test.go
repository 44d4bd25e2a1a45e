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
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	mysql := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	redis := testutil.NeedServer(t, testutil.EnvRedis)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "sqlglobal")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	for _, c := range []struct{ name, sink, strategy, sum string }{
		{"mysql", mysql, "txn", "SUM(amount) AS amount, MIN(amount) AS lo"},
		{"sqlite", "sqlite://" + filepath.Join(dir, "sink.db"), "txn", "SUM(amount) AS amount"},
		{"redis", redis, "idempotent", "SUM(amount) AS amount, MIN(amount) AS lo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := fmt.Sprintf("INSERT INTO %s SELECT COUNT(*) AS events, COUNT(amount) AS amounts, %s FROM `%s`", sqlName("totals_"+c.name), c.sum, topic)
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
				wantLines(t, r, "records read 9", "groups recomputed 1", "OK: all 1 groups match")
				t.Logf("verify:\n%s", r.Stdout)
			}
		})
	}
}
