package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestRunAllDeadLetters: a SQL job whose WHERE compares a number with a
// string dead-letters every record. On every strategy the run logs one
// WARN naming the reason (once per run, though each record is a batch of
// its own here), and run --until-idle exits 6 saying every record was
// dead-lettered. The same job comparing with a number logs no such WARN
// and exits 0.
func TestRunAllDeadLetters(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	mysql := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	redis := testutil.NeedServer(t, testutil.EnvRedis)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "alldead")
	recs := []string{`{"kind":"a","qty":1}`, `{"kind":"b","qty":2}`, `{"kind":"a","qty":3}`, `{"kind":"b","qty":4}`}
	produceSQLInput(t, kafka, topic, recs)
	dir := t.TempDir()
	for _, c := range []struct {
		strategy, sink string
		extra          []string
	}{
		{strategy: "txn", sink: mysql},
		{strategy: "single", sink: mysql},
		{strategy: "at-least-once", sink: mysql},
		{strategy: "idempotent", sink: redis},
		{strategy: "checkpoint", sink: mysql, extra: []string{"--checkpoint-interval", "200ms"}},
	} {
		for _, where := range []string{"qty > '0'", "qty > 0"} {
			bad := strings.Contains(where, "'")
			name := c.strategy + map[bool]string{true: "/all-dead", false: "/normal"}[bad]
			t.Run(name, func(t *testing.T) {
				job := systemtest.UniqueName(t, "j")
				table := sqlName("alldead_" + c.strategy + map[bool]string{true: "_bad", false: "_ok"}[bad])
				q := fmt.Sprintf("INSERT INTO %s SELECT kind, COUNT(*) AS n FROM `%s` WHERE %s GROUP BY kind", table, topic, where)
				args := append([]string{"run", "--until-idle", "1s", "-q", "--max-batch-records", "1", "--brokers", kafka,
					"--job", job, "--strategy", c.strategy, "--sink", c.sink, "--sql", q,
					"--state-dir", filepath.Join(dir, job)}, c.extra...)
				r := systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, args...)
				warns := strings.Count(r.Stderr, "most of a batch's records were dead-lettered")
				if !bad {
					if r.Code != 0 || warns != 0 {
						t.Fatalf("a job without dead letters: exit %d, %d dead-letter warnings; want 0, 0\n%s", r.Code, warns, r)
					}
					return
				}
				t.Logf("run:\n%s", r.Stderr)
				if r.Code != 6 {
					t.Errorf("run of a job that dead-letters every record: exit %d, want 6\n%s", r.Code, r)
				}
				if warns != 1 {
					t.Errorf("%d dead-letter warnings, want 1 (once per run)\n%s", warns, r)
				}
				for _, want := range []string{"WARN", "compares a number (", `with a string (\"0\")`,
					"every one of the 4 records the run read was dead-lettered", "compares a number"} {
					if !strings.Contains(r.Stderr, want) {
						t.Errorf("stderr lacks %q\n%s", want, r)
					}
				}
			})
		}
	}
}
