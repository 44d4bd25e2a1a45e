package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// sqlTestRecords are a SQL job's input: three groups, a decimal amount,
// and two records the query rejects (a string to SUM, not JSON).
var sqlTestRecords = []string{
	`{"key":"a","amount":5}`, `{"key":"b","amount":1.25}`, `{"key":"a","amount":7}`,
	`{"key":"c","amount":-2}`, `{"key":"b","amount":"lots"}`, `not json`,
	`{"key":"b","amount":3}`, `{"key":"c"}`, `{"key":"a","amount":0.5}`,
}

// produceSQLInput writes recs round-robin over a new topic of 2 partitions.
func produceSQLInput(t *testing.T, brokers, topic string, recs []string) {
	t.Helper()
	if err := kafkautil.EnsureTopic([]string{brokers}, topic, 2); err != nil {
		t.Fatal(err)
	}
	cfg := kafkautil.Config("sqljob-test")
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer([]string{brokers}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Partition: int32(i % 2), Value: sarama.StringEncoder(r)}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

// sqlName is a table name from a unique name: letters, digits, _.
func sqlName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

func perKeyQuery(table, topic string) string {
	return fmt.Sprintf("INSERT INTO %s SELECT `key`, COUNT(*) AS events, SUM(amount) AS amount FROM `%s` GROUP BY `key`", table, topic)
}

// wantLines fails t unless r's stdout has each of want, spaces squeezed
// (the columns are aligned with spaces).
func wantLines(t *testing.T, r systemtest.Result, want ...string) {
	t.Helper()
	out := strings.Join(strings.Fields(r.Stdout), " ")
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, r)
		}
	}
}

// TestSQLJobRunAndVerifyMySQL: run --sql (txn, at-least-once, checkpoint
// with XA and WAL: each keeps its positions elsewhere) on
// a few records, two of them bad, then verify --sql: it passes, and after
// the table is changed by hand it names each change — a wrong value
// (different), a deleted row (missing), an inserted one (extra) — exits
// 1, and lists no more than --show of them.
func TestSQLJobRunAndVerifyMySQL(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "sql")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()

	for _, c := range []struct {
		name, strategy string
		extra          []string // run's and verify's
		runExtra       []string
	}{
		{name: "txn", strategy: "txn"},
		// Its positions are the consumer group's offsets.
		{name: "at-least-once", strategy: "at-least-once"},
		// Its positions are in the newest checkpoint.
		{name: "checkpoint-xa", strategy: "checkpoint", extra: []string{"--state-dir", filepath.Join(dir, "state-xa")}},
		{name: "checkpoint-wal", strategy: "checkpoint", extra: []string{"--state-dir", filepath.Join(dir, "state-wal")}, runExtra: []string{"--sink-mode", "wal"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			job := "sql-" + c.name
			table := sqlName("per_key_" + c.name)
			q := perKeyQuery(table, topic)
			common := append([]string{"--brokers", kafka, "--job", job, "--sink", sink, "--strategy", c.strategy, "--sql", q}, c.extra...)
			r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append(append([]string{"run", "--until-idle", "1s", "-q"}, common...), c.runExtra...)...)
			if r.Code != 0 {
				t.Fatalf("run --sql: exit %d\n%s", r.Code, r)
			}
			verify := func(args ...string) systemtest.Result {
				return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append(append([]string{"verify"}, common...), args...)...)
			}
			r = verify()
			if r.Code != 0 {
				t.Fatalf("verify --sql after a clean run: exit %d\n%s", r.Code, r)
			}
			wantLines(t, r, "records read 9", "rejected 2 (dead letters the sink holds for the job: 2)",
				"groups recomputed 3", "matching 3", "OK: all 3 groups match")
			t.Logf("verify --sql:\n%s", r.Stdout)

			w, err := sqlsink.Open(t.Context(), sink)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for _, stmt := range []string{
				"UPDATE `" + table + "` SET amount = amount + 1 WHERE `key` = 'b'",
				"DELETE FROM `" + table + "` WHERE `key` = 'c'",
				"INSERT INTO `" + table + "` VALUES ('zz', 1, 1)",
			} {
				if _, err := w.DB().ExecContext(t.Context(), stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			r = verify()
			if r.Code != 1 {
				t.Fatalf("verify --sql of a changed table: exit %d, want 1\n%s", r.Code, r)
			}
			wantLines(t, r, "matching 1", "missing 1", "extra 1", "different 1",
				"FAIL: 3 of 4 groups differ (1 missing, 1 extra, 1 different)",
				`"b" amount 4.25 5.25`, `"c" - (row) (no row)`, `"zz" - (no such group) (row)`)
			t.Logf("verify --sql of a changed table:\n%s", r.Stdout)

			r = verify("--show", "1")
			if r.Code != 1 {
				t.Fatalf("verify --sql --show 1: exit %d, want 1\n%s", r.Code, r)
			}
			wantLines(t, r, `"b" amount 4.25 5.25`, "… and 2 more (--show)")
			if strings.Contains(r.Stdout, `"zz"`) || strings.Contains(r.Stdout, `"c"`) {
				t.Errorf("--show 1 listed more than one difference:\n%s", r.Stdout)
			}
		})
	}
}

// TestSQLJobRedisVerify: a SQL job on Redis (idempotent) verifies. Redis
// sums integers only: the records with a fraction in the SUM are
// dead-lettered with the ones that are bad anywhere.
func TestSQLJobRedisVerify(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	redis := testutil.NeedServer(t, testutil.EnvRedis)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "sqlredis")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	q := fmt.Sprintf("INSERT INTO per_key SELECT `key`, COUNT(*) AS events, COUNT(amount) AS amounts, SUM(amount) AS amount, MAX(amount) AS largest FROM `%s` WHERE `key` <> 'c' GROUP BY `key`", topic)
	common := []string{"--brokers", kafka, "--job", topic, "--sink", redis, "--sql", q}
	r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--strategy", "idempotent", "--until-idle", "1s", "-q"}, common...)...)
	if r.Code != 0 {
		t.Fatalf("run --sql: exit %d\n%s", r.Code, r)
	}
	// verify takes the strategy from the redis:// sink, as offsets does.
	r = systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"verify"}, common...)...)
	if r.Code != 0 {
		t.Fatalf("verify --sql: exit %d\n%s", r.Code, r)
	}
	wantLines(t, r, "(strategy idempotent)", "records read 9", "rejected 4 (dead letters the sink holds for the job: 4)", "OK: all 2 groups match")
}

// TestSQLJobDryRun: run --dry-run --sql prints the query's plan and DDL
// after the dry run's report, and creates nothing.
func TestSQLJobDryRun(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "sqldry")
	produceSQLInput(t, kafka, topic, sqlTestRecords[:2])
	r := systemtest.Run(t, t.TempDir(), systemtest.Env(), 3*time.Minute, "run", "--dry-run", "--brokers", kafka, "--job", "dry", "--sink", sink,
		"--sql", "INSERT INTO dry_t SELECT `key`, SUM(amount) AS amount, MAX(amount) AS top FROM `"+topic+"` WHERE amount > 0 GROUP BY `key`")
	if r.Code != 0 {
		t.Fatalf("run --dry-run --sql: exit %d\n%s", r.Code, r)
	}
	wantLines(t, r, "dry run: settings OK", "topic: "+topic, "filter: amount > 0", "key: key",
		"top DECIMAL(38,9) max(amount) merged by keeping the greatest", "CREATE TABLE IF NOT EXISTS `dry_t`")
	w, err := sqlsink.Open(t.Context(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var n int
	if err := w.DB().QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the dry run created %d tables", n)
	}
}

// TestSQLJobConfigErrors: what a SQL job can't run is exit 2 with one
// line naming why, before anything connects (the brokers are an address
// nothing listens on).
func TestSQLJobConfigErrors(t *testing.T) {
	systemtest.Binary(t)
	q := "INSERT INTO t SELECT `key`, COUNT(*) AS n FROM events GROUP BY `key`"
	qmin := "INSERT INTO t SELECT `key`, MIN(amount) AS lo FROM events GROUP BY `key`"
	mysql := "mysql://u:p@127.0.0.1:1/db"
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"refused construct", []string{"run", "--sink", mysql, "--sql", "INSERT INTO t SELECT `key`, COUNT(*) AS n FROM events\nGROUP BY `key` ORDER BY n"},
			[]string{"ORDER BY", "line 2, column 16"}},
		{"AVG", []string{"run", "--sink", mysql, "--sql", "INSERT INTO t SELECT `key`, AVG(amount) AS a FROM events GROUP BY `key`"},
			[]string{"AVG", "line 1, column 29", "SUM"}},
		{"topic disagrees", []string{"run", "--sink", mysql, "--topic", "orders", "--sql", q}, []string{`--topic "orders"`, `FROM "events"`}},
		{"topic disagrees in env", []string{"run", "--sink", mysql, "--sql", q, "--env", "MICROBATCH_TOPIC=orders"}, []string{`"orders"`, `"events"`}},
		{"sqlite sink with MIN", []string{"run", "--sink", "sqlite://x.db", "--sql", qmin}, []string{"MIN at line 1, column 29", "SQLite", "exact decimal"}},
		{"default sink with MAX", []string{"run", "--sql", strings.ReplaceAll(qmin, "MIN", "MAX")}, []string{"MAX", "SQLite"}},
		{"kafka sink", []string{"run", "--strategy", "checkpoint", "--sink", "kafka://127.0.0.1:1/out", "--sql", q}, []string{"kafka://", "built-in job only"}},
		{"file sink", []string{"run", "--strategy", "checkpoint", "--sink", "file:///tmp/x", "--sql", q}, []string{"file://", "built-in job only"}},
		{"redis without idempotent", []string{"run", "--sink", "redis://127.0.0.1:1/0", "--sql", q}, []string{"redis://", "idempotent"}},
		{"verify refused construct", []string{"verify", "--sink", mysql, "--sql", "INSERT INTO t SELECT DISTINCT `key` FROM events"}, []string{"DISTINCT"}},
		{"verify with expectations", []string{"verify", "--sink", mysql, "--sql", q, "--expect-events", "1"}, []string{"--expect-events"}},
		{"verify without brokers", []string{"verify", "--sink", mysql, "--sql", q, "--brokers", ""}, []string{"brokers"}},
		{"verify sqlite sink with MIN", []string{"verify", "--sink", "sqlite://x.db", "--sql", qmin}, []string{"MIN", "SQLite"}},
		{"verify topic disagrees", []string{"verify", "--sink", mysql, "--topic", "orders", "--sql", q}, []string{`--topic "orders"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args, env := c.args, []string(nil)
			for i, a := range args {
				if a == "--env" {
					args, env = append(append([]string(nil), args[:i]...), args[i+2:]...), []string{args[i+1]}
					break
				}
			}
			if !containsArg(args, "--brokers") {
				args = append(args, "--brokers", unreachable)
			}
			r := systemtest.Run(t, t.TempDir(), systemtest.Env(env...), time.Minute, append(args, "--connect-timeout", "1s")...)
			checkConfigError(t, r, c.want...)
		})
	}
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

// TestSQLJobTableDoesNotFit: an existing table that can't hold the query's
// results exactly is exit 2 with the reason, before the job reads
// anything.
func TestSQLJobTableDoesNotFit(t *testing.T) {
	t.Parallel()
	sink := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	systemtest.Binary(t)
	w, err := sqlsink.Open(t.Context(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.DB().ExecContext(t.Context(), "CREATE TABLE per_key (`key` VARCHAR(100) PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	r := systemtest.Run(t, t.TempDir(), systemtest.Env(), time.Minute, "run", "--brokers", unreachable, "--connect-timeout", "1s", "--sink", sink,
		"--sql", "INSERT INTO per_key SELECT `key`, COUNT(*) AS n FROM events GROUP BY `key`")
	checkConfigError(t, r, "per_key", "VARBINARY")
}

// TestSQLJobSQLiteCheckpointWAL: checkpoint mode with --sink-mode wal runs
// a SQL job into SQLite (docs/sql-jobs.md lists it), and verify --sql
// finds every group (the fractional sums dead-lettered, as SQLite sums
// integers only).
func TestSQLJobSQLiteCheckpointWAL(t *testing.T) {
	t.Parallel()
	kafka := kafkaForTest(t)
	topic := systemtest.UniqueName(t, "sqlwal")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	common := []string{"--brokers", kafka, "--job", "wal", "--sink", "sqlite://" + filepath.Join(dir, "sink.db"), "--strategy", "checkpoint",
		"--state-dir", filepath.Join(dir, "state"), "--sql", perKeyQuery("per_key", topic)}
	r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"run", "--until-idle", "1s", "-q", "--sink-mode", "wal", "--checkpoint-interval", "200ms"}, common...)...)
	if r.Code != 0 {
		t.Fatalf("run --sql, checkpoint wal on SQLite: %s", r)
	}
	r = systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, append([]string{"verify"}, common...)...)
	if r.Code != 0 {
		t.Fatalf("verify --sql: %s", r)
	}
	wantLines(t, r, "records read 9", "groups recomputed 3", "matching 3", "OK: all 3 groups match")
}
