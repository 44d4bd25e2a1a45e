package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// verify --sql's OK means it checked something and everything agreed: the
// job has positions (a job that never ran, or a --strategy whose store the
// job did not use, has none), the sink's dead letters are exactly the
// records the query rejects, not every record was rejected, and every
// group matches. Each case below printed "OK" and exited 0 before.

// wantVerifyFail wants of verify --sql's result exit 1 and each of want in
// its output (spaces squeezed), and no "OK".
func wantVerifyFail(t *testing.T, r systemtest.Result, want ...string) {
	t.Helper()
	if r.Code != 1 {
		t.Errorf("verify --sql: exit %d, want 1\n%s", r.Code, r)
	}
	wantLines(t, r, want...)
	if strings.Contains("\n"+r.Stdout, "\nOK") {
		t.Errorf("verify --sql says OK:\n%s", r.Stdout)
	}
}

// TestVerifySQLNotOKMySQL: on MySQL, a job name that never ran, a wrong
// --strategy, a deleted dead-letter row, a bogus one and a query that
// rejects every record each exit 1 naming the problem; the honest job
// exits 0.
func TestVerifySQLNotOKMySQL(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "vsql")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	job := "honest"
	q := perKeyQuery("vsql_per_key", topic)
	common := []string{"--brokers", kafka, "--sink", sink, "--sql", q}
	run := func(args ...string) systemtest.Result {
		return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append(append([]string{"run", "--until-idle", "1s", "-q"}, common...), args...)...)
	}
	verify := func(args ...string) systemtest.Result {
		return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append(append([]string{"verify"}, common...), args...)...)
	}
	if r := run("--job", job); r.Code != 0 {
		t.Fatalf("run --sql: exit %d\n%s", r.Code, r)
	}
	r := verify("--job", job)
	if r.Code != 0 {
		t.Fatalf("verify --sql of the honest job: exit %d\n%s", r.Code, r)
	}
	// sqlTestRecords go round-robin over 2 partitions: "lots" is record 4
	// (partition 0, offset 2), "not json" record 5 (partition 1, offset 2).
	wantLines(t, r, "rejected 2 (dead letters the sink holds for the job: 2)", "OK: all 3 groups match")

	r = verify("--job", "never-ran")
	wantVerifyFail(t, r, `no positions found for job "never-ran" with strategy txn`, "0 of 2 partitions", "check --job and --strategy")

	r = verify("--job", job, "--strategy", "at-least-once")
	wantVerifyFail(t, r, `no positions found for job "honest" with strategy at-least-once`, `consumer group "honest"`, "0 of 2 partitions", "--group")

	w, err := sqlsink.Open(t.Context(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	exec := func(stmt string, args ...any) {
		t.Helper()
		if _, err := w.DB().ExecContext(t.Context(), stmt, args...); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	exec("CREATE TABLE saved_dead AS SELECT * FROM mb_dead_letters WHERE job = ?", job)
	exec("DELETE FROM mb_dead_letters WHERE job = ? AND part = 0", job)
	r = verify("--job", job)
	wantVerifyFail(t, r, "rejected 2 (dead letters the sink holds for the job: 1)",
		"1 rejected record has no dead letter in the sink (partition/offset 0/2)")
	exec("INSERT INTO mb_dead_letters SELECT * FROM saved_dead WHERE part = 0")

	exec("INSERT INTO mb_dead_letters (job, topic, part, off, reason, payload, at) VALUES (?, ?, 1, 3, 'bogus', '', NOW())", job, topic)
	r = verify("--job", job)
	wantVerifyFail(t, r, "rejected 2 (dead letters the sink holds for the job: 3)",
		"1 dead letter is of no record the query rejects (partition/offset 1/3)")
	// The same count, another set: still not OK.
	exec("DELETE FROM mb_dead_letters WHERE job = ? AND part = 1 AND off = 2", job)
	r = verify("--job", job)
	wantVerifyFail(t, r, "rejected 2 (dead letters the sink holds for the job: 2)",
		"1 rejected record has no dead letter in the sink (partition/offset 1/2)",
		"1 dead letter is of no record the query rejects (partition/offset 1/3)")

	// Every record rejected: 0 groups match, which is not OK.
	allBad := systemtest.UniqueName(t, "vsqlbad")
	produceSQLInput(t, kafka, allBad, []string{`{"key":"a","amount":"x"}`, `{"key":"b","amount":"y"}`, `{"key":"a","amount":"z"}`})
	bad := []string{"--brokers", kafka, "--sink", sink, "--job", "all-bad", "--sql", perKeyQuery("vsql_all_bad", allBad)}
	r = systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--until-idle", "1s", "-q"}, bad...)...)
	if r.Code != 6 { // TestRunAllDeadLetters
		t.Errorf("run of a job that rejects every record: exit %d, want 6\n%s", r.Code, r)
	}
	r = systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"verify"}, bad...)...)
	wantVerifyFail(t, r, "rejected 3 (dead letters the sink holds for the job: 3)", "every one of the 3 records read was rejected")
}

// TestVerifySQLNotOKRedis: on Redis (idempotent), a job name that never
// ran and a dead letter deleted from its hash exit 1.
func TestVerifySQLNotOKRedis(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	redisDSN := testutil.NeedServer(t, testutil.EnvRedis)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "vsqlr")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	job := topic
	common := []string{"--brokers", kafka, "--sink", redisDSN, "--sql", perKeyQuery("per_key", topic)}
	r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--strategy", "idempotent", "--until-idle", "1s", "-q", "--job", job}, common...)...)
	if r.Code != 0 {
		t.Fatalf("run --sql: exit %d\n%s", r.Code, r)
	}
	verify := func(args ...string) systemtest.Result {
		return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append(append([]string{"verify"}, common...), args...)...)
	}
	// Redis sums integers only: 1.25 and 0.5 are dead letters too.
	r = verify("--job", job)
	if r.Code != 0 {
		t.Fatalf("verify --sql of the honest job: exit %d\n%s", r.Code, r)
	}
	wantLines(t, r, "(strategy idempotent)", "rejected 4 (dead letters the sink holds for the job: 4)", "OK: all 3 groups match")

	never := systemtest.UniqueName(t, "never")
	r = verify("--job", never)
	wantVerifyFail(t, r, fmt.Sprintf("no positions found for job %q with strategy idempotent", never), "0 of 2 partitions")

	opt, err := redis.ParseURL(redisDSN)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	// docs/redis-layout.md: mb:{job}:dead:{topic}:{partition}, offset → dead letter.
	if n, err := c.HDel(t.Context(), "mb:{"+job+"}:dead:"+topic+":1", "2").Result(); err != nil || n != 1 {
		t.Fatalf("deleting the dead letter of 1/2: %d, %v", n, err)
	}
	r = verify("--job", job)
	wantVerifyFail(t, r, "rejected 4 (dead letters the sink holds for the job: 3)",
		"1 rejected record has no dead letter in the sink (partition/offset 1/2)")
}
