package main_test

// run --dry-run tells the truth: the run's table check for a SQL job, the
// hashes a Redis SQL job writes, and checkpoint mode's real start.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestSQLJobDryRunChecksTable: an existing table the run refuses is
// refused by the dry run too, with the run's message and exit code (2),
// before Kafka is asked (the brokers are an address nothing listens on):
// SQLite always, MySQL's key column VARCHAR (the run wants VARBINARY)
// when the servers run. A table that fits passes the check, and one that
// does not exist yet is the run's to create: the dry run creates nothing.
func TestSQLJobDryRunChecksTable(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	q := "INSERT INTO per_key SELECT `key`, COUNT(*) AS n FROM events GROUP BY `key`"
	sinks := map[string]struct {
		dsn, ddl, fit string
		want          []string
	}{
		"sqlite": {dsn: "sqlite://" + filepath.Join(t.TempDir(), "sink.db"),
			ddl: "CREATE TABLE per_key (`key` TEXT PRIMARY KEY, other TEXT NOT NULL)", want: []string{"per_key", "n"},
			fit: "CREATE TABLE per_key (`key` TEXT PRIMARY KEY, n INTEGER NOT NULL)"},
	}
	if os.Getenv(testutil.EnvMySQL) != "" && !testing.Short() {
		sinks["mysql"] = struct {
			dsn, ddl, fit string
			want          []string
		}{dsn: testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL)),
			ddl: "CREATE TABLE per_key (`key` VARCHAR(100) PRIMARY KEY, n BIGINT NOT NULL)", want: []string{"per_key", "VARBINARY"},
			fit: "CREATE TABLE per_key (`key` VARBINARY(1024) PRIMARY KEY, n BIGINT NOT NULL)"}
	}
	for name, c := range sinks {
		t.Run(name, func(t *testing.T) {
			w, err := sqlsink.Open(t.Context(), c.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			base := []string{"--brokers", unreachable, "--connect-timeout", "1s", "--sink", c.dsn}
			// Missing: the dry run says the run creates it, and does not.
			r := systemtest.Run(t, t.TempDir(), systemtest.Env(), time.Minute, append([]string{"run", "--dry-run", "--sql", q}, base...)...)
			if !strings.Contains(r.Stdout, "per_key does not exist yet: run creates it") || r.Code == 2 {
				t.Errorf("dry run, no table: want the note that the run creates it, and no refusal\n%s", r)
			}
			if _, err := w.DB().ExecContext(t.Context(), c.ddl); err != nil {
				t.Fatal(err)
			}
			real := systemtest.Run(t, t.TempDir(), systemtest.Env(), time.Minute, append([]string{"run", "--sql", q}, base...)...)
			checkConfigError(t, real, c.want...)
			dry := systemtest.Run(t, t.TempDir(), systemtest.Env(), time.Minute, append([]string{"run", "--dry-run", "--sql", q}, base...)...)
			checkConfigError(t, dry, c.want...)
			if dry.Stderr != real.Stderr {
				t.Errorf("the dry run refuses the table in other words than the run:\n dry run: %s run:     %s", dry.Stderr, real.Stderr)
			}
			// A table that fits passes.
			if _, err := w.DB().ExecContext(t.Context(), "DROP TABLE per_key"); err != nil {
				t.Fatal(err)
			}
			if _, err := w.DB().ExecContext(t.Context(), c.fit); err != nil {
				t.Fatal(err)
			}
			r = systemtest.Run(t, t.TempDir(), systemtest.Env(), time.Minute, append([]string{"run", "--dry-run", "--sql", q}, base...)...)
			if !strings.Contains(r.Stdout, "per_key exists and fits the query") || r.Code == 2 {
				t.Errorf("dry run, a table that fits: want it passed\n%s", r)
			}
		})
	}
}

// TestSQLJobDryRunRedis: a SQL job into Redis (idempotent) is planned as
// the hashes it writes — one per value column, named as
// docs/redis-layout.md says — with the integer-sums rule, not as MySQL DDL.
// The plan needs no server: it is printed before anything connects.
func TestSQLJobDryRunRedis(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	r := systemtest.Run(t, t.TempDir(), systemtest.Env(), time.Minute, "run", "--dry-run", "--strategy", "idempotent",
		"--brokers", unreachable, "--connect-timeout", "1s", "--sink", "redis://127.0.0.1:1/0", "--job", "rj",
		"--sql", "INSERT INTO per_key SELECT `key`, COUNT(*) AS n, SUM(amount) AS amount, MAX(amount) AS top FROM events GROUP BY `key`")
	wantLines(t, r, "topic: events", "key: key",
		"mb:{rj}:rows:per_key:n count(*) merged by adding",
		"mb:{rj}:rows:per_key:amount sum(amount) merged by adding",
		"mb:{rj}:rows:per_key:top max(amount) merged by keeping the greatest",
		"integers only", "digits after the point is dead-lettered", "mb:{rj}:dead:events:<partition>")
	for _, bad := range []string{"CREATE TABLE", "DECIMAL", "DDL"} {
		if strings.Contains(r.Stdout, bad) {
			t.Errorf("the Redis plan shows %q, which is SQL's\n%s", bad, r)
		}
	}
}

// TestCLIDryRunCheckpoint: in checkpoint mode the dry run opens the sink
// (one that does not answer is exit 3, as for the run) and reads the
// newest checkpoint as a run's restore does: before the first run, a new
// job from the log start; after a run, the checkpoint's id and each
// partition's position, and a first read from there, not from 0.
func TestCLIDryRunCheckpoint(t *testing.T) {
	t.Parallel()
	brokers := kafkaForTest(t)
	dir := t.TempDir()
	topic, job := systemtest.UniqueName(t, "chk"), systemtest.UniqueName(t, "j")
	systemtest.Produce(t, brokers, topic, 5, 0, 400)
	common := []string{"--brokers", brokers, "--topic", topic, "--job", job, "--strategy", "checkpoint", "--sink-mode", "wal",
		"--sink", "sqlite://" + filepath.Join(dir, "sink.db"), "--state-dir", filepath.Join(dir, "state")}
	dry := func() systemtest.Result {
		t.Helper()
		r := systemtest.Run(t, dir, nil, time.Minute, append([]string{"run", "--dry-run"}, common...)...)
		if r.Code != 0 {
			t.Fatalf("dry run: %s", r)
		}
		return r
	}
	r := dry()
	wantLines(t, r, "no checkpoint of job "+job, "does not exist yet")

	if r := systemtest.Run(t, dir, nil, 3*time.Minute, append([]string{"run", "-q", "--checkpoint-interval", "200ms", "--until-idle", "1s"}, common...)...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	systemtest.Produce(t, brokers, topic, 5, 400, 100)
	r = dry()
	wantLines(t, r, "Kafka and the sink reached", "(wal)")
	if !regexp.MustCompile(`state\s+checkpoint \d+ of job ` + regexp.QuoteMeta(job)).MatchString(r.Stdout) {
		t.Errorf("dry run after a run: want the checkpoint it resumes from\n%s", r)
	}
	// Each partition: stored = where the run stopped (its log end then),
	// reads from there to the new log end; together the 400 events.
	rows := regexp.MustCompile(`(?m)^\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(.+?)\s*$`).FindAllStringSubmatch(r.Stdout, -1)
	var stored, unread int64
	for _, row := range rows {
		var s, end, from, to int64
		if _, err := fmt.Sscan(row[2], &s); err != nil {
			t.Fatalf("partition %s: stored %q, want the checkpoint's position\n%s", row[1], row[2], r)
		}
		fmt.Sscan(row[4], &end)
		if _, err := fmt.Sscanf(row[5], "[%d, %d)", &from, &to); err != nil && s < end {
			t.Errorf("partition %s: reads %q, want [%d, %d)", row[1], row[5], s, end)
		}
		if s < end && (from != s || to != end) {
			t.Errorf("partition %s: reads [%d, %d), want [%d, %d)", row[1], from, to, s, end)
		}
		stored += s
		unread += end - s
	}
	if len(rows) != 4 || stored != 400 || unread != 100 {
		t.Errorf("want 4 partitions whose positions add up to the 400 events read and 100 unread; got %d rows, %d, %d\n%s", len(rows), stored, unread, r)
	}

	// A SQL sink that does not answer: exit 3, as for the run.
	r = systemtest.Run(t, dir, nil, time.Minute, "run", "--dry-run", "--brokers", brokers, "--topic", topic, "--job", job,
		"--strategy", "checkpoint", "--sink", "mysql://u:p@127.0.0.1:1/db", "--connect-timeout", "1s", "--state-dir", filepath.Join(dir, "state"))
	if r.Code != 3 {
		t.Errorf("dry run, a MySQL sink that does not answer: want exit 3\n%s", r)
	}
}
