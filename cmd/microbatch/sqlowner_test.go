package main_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// tableRows is a table's rows, ordered by key, as text.
func tableRows(t *testing.T, sink, table string) string {
	t.Helper()
	w, err := sqlsink.Open(t.Context(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	quoted := "`" + table + "`"
	if sqlsink.IsPostgresDSN(sink) {
		quoted = `"` + table + `"`
	}
	rows, err := w.DB().QueryContext(t.Context(), "SELECT * FROM "+quoted+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			fmt.Fprintf(&b, "%s|", v.String)
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// testTableOwner: a SQL job's table belongs to the first job that runs on
// it and to its query. Another job with the same statement (which would
// count every record twice), or the owner with a changed query, exits 2
// with one line naming both and leaves the table as it was; the owner's
// restart with the statement reformatted runs; a run that could not start
// claims nothing. offsets reset
// --empty-table starts the table over, after which another job computes
// it once.
func testTableOwner(t *testing.T, sink string, otherStrategies [][]string) {
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "owner")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	table := sqlName("owned_" + topic)
	q := perKeyQuery(table, topic)
	run := func(job, query string, extra ...string) systemtest.Result {
		args := append([]string{"run", "--until-idle", "1s", "-q", "--brokers", kafka, "--job", job, "--sink", sink, "--sql", query}, extra...)
		return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, args...)
	}
	jobA, jobB := topic+"-a", topic+"-b"
	// A run that can't start (no such topic) claims nothing.
	if r := run(topic+"-z", strings.Replace(q, "`"+topic+"`", "`"+topic+"-missing`", 1)); r.Code != 4 {
		t.Fatalf("a job on a missing topic: exit %d, want 4\n%s", r.Code, r)
	}
	if r := run(jobA, q); r.Code != 0 {
		t.Fatalf("job a: exit %d\n%s", r.Code, r)
	}
	want := tableRows(t, sink, table)
	if want == "" {
		t.Fatal("job a wrote no rows")
	}

	// The dry run tells the truth: it refuses what the run refuses.
	for _, extra := range [][]string{{"--dry-run"}, nil} {
		r := run(jobB, q, extra...)
		checkConfigError(t, r, fmt.Sprintf("table %s belongs to job %q, not to job %q", table, jobA, jobB), "count every record twice",
			"offsets reset --job "+jobA+" --empty-table "+table)
	}
	for _, extra := range otherStrategies {
		r := run(jobB, q, extra...)
		checkConfigError(t, r, fmt.Sprintf("table %s belongs to job %q, not to job %q", table, jobA, jobB), "count every record twice",
			"offsets reset --job "+jobA+" --empty-table "+table)
	}
	changed := strings.Replace(q, "GROUP BY", "WHERE amount > 1 GROUP BY", 1)
	for _, extra := range [][]string{{"--dry-run"}, nil} {
		r := run(jobA, changed, extra...)
		checkConfigError(t, r, fmt.Sprintf("table %s of job %q holds the results of another query", table, jobA), "amount > 1")
	}
	if got := tableRows(t, sink, table); got != want {
		t.Fatalf("the refused runs changed the table:\n%s\nwant\n%s", got, want)
	}

	// The owner again, the statement reformatted: a restart.
	reformatted := strings.NewReplacer("INSERT INTO", "insert\n  into", "SELECT", "select", " AS ", "\tas\t", "COUNT(*)", "count( * )",
		"SUM", "sum", "FROM", "\nfrom", "GROUP BY", "group   by", ", ", " ,").Replace(q)
	if r := run(jobA, reformatted); r.Code != 0 {
		t.Fatalf("job a restarted, the statement reformatted: exit %d\n%s", r.Code, r)
	}
	if got := tableRows(t, sink, table); got != want {
		t.Fatalf("table after the restart:\n%s\nwant\n%s", got, want)
	}

	// Starting over: job b may not empty job a's table; job a may, and
	// then job b computes it once.
	var r systemtest.Result
	reset := func(job string) systemtest.Result {
		return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, "offsets", "reset", "--brokers", kafka, "--topic", topic,
			"--job", job, "--sink", sink, "--to", "earliest", "--empty-table", table)
	}
	r = reset(jobB)
	checkConfigError(t, r, "empty-table", fmt.Sprintf("belongs to job %q", jobA))
	if got := tableRows(t, sink, table); got != want {
		t.Fatalf("job b's refused reset changed the table:\n%s", got)
	}
	r = reset(jobA)
	if r.Code != 0 {
		t.Fatalf("offsets reset --empty-table: exit %d\n%s", r.Code, r)
	}
	if !strings.Contains(r.Stdout, "table "+table+" emptied (3 rows deleted)") {
		t.Errorf("reset output lacks the emptied table:\n%s", r)
	}
	if got := tableRows(t, sink, table); got != "" {
		t.Fatalf("table after the reset:\n%s", got)
	}
	if r := run(jobB, q); r.Code != 0 {
		t.Fatalf("job b after the reset: exit %d\n%s", r.Code, r)
	}
	if got := tableRows(t, sink, table); got != want {
		t.Fatalf("table job b computed after the reset:\n%s\nwant (once)\n%s", got, want)
	}
	checkConfigError(t, run(jobA, q), fmt.Sprintf("belongs to job %q, not to job %q", jobB, jobA))
}

func TestSQLJobTableOwnerSQLite(t *testing.T) {
	t.Parallel()
	testTableOwner(t, "sqlite://"+filepath.Join(t.TempDir(), "owner.db"), nil)
}

func TestSQLJobTableOwnerMySQL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testTableOwner(t, testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL)), [][]string{
		{"--strategy", "single"},
		{"--strategy", "at-least-once"},
		{"--strategy", "at-most-once"},
		{"--strategy", "checkpoint", "--state-dir", filepath.Join(dir, "xa")},
		{"--strategy", "checkpoint", "--sink-mode", "wal", "--state-dir", filepath.Join(dir, "wal")},
	})
}

// On PostgreSQL too (offsets reset --empty-table there exited 2 before).
func TestSQLJobTableOwnerPostgres(t *testing.T) {
	t.Parallel()
	testTableOwner(t, testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres)), [][]string{
		{"--strategy", "single"},
		{"--strategy", "at-least-once"},
		{"--strategy", "at-most-once"},
	})
}

// TestSQLJobQueryOwnerRedis: on Redis a job's rows are its own, but a
// changed query under the same job would merge two queries' rows in its
// hashes: refused with exit 2; the same query reformatted runs.
func TestSQLJobQueryOwnerRedis(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	redis := testutil.NeedServer(t, testutil.EnvRedis)
	systemtest.Binary(t)
	topic := systemtest.UniqueName(t, "ownerredis")
	produceSQLInput(t, kafka, topic, sqlTestRecords)
	dir := t.TempDir()
	q := perKeyQuery("per_key", topic)
	run := func(query string) systemtest.Result {
		return systemtest.Run(t, dir, systemtest.Env(), 3*time.Minute, "run", "--strategy", "idempotent", "--until-idle", "1s", "-q",
			"--brokers", kafka, "--job", topic, "--sink", redis, "--sql", query)
	}
	if r := run(q); r.Code != 0 {
		t.Fatalf("run --sql: exit %d\n%s", r.Code, r)
	}
	r := run(strings.Replace(q, "SUM(amount) AS amount", "SUM(amount) AS amount, COUNT(amount) AS amounts", 1))
	checkConfigError(t, r, fmt.Sprintf("table per_key of job %q holds the results of another query", topic), "amounts", "a new --job")
	r = run(strings.Replace(q, "INTO per_key", "INTO per_key2", 1))
	checkConfigError(t, r, fmt.Sprintf("job %q writes table per_key, not per_key2", topic))
	if r := run(strings.ReplaceAll(strings.Replace(q, "SELECT", "select", 1), " ", "  ")); r.Code != 0 {
		t.Fatalf("the same query reformatted: exit %d\n%s", r.Code, r)
	}
}
