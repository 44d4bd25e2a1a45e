package main_test

// Where a SQL job's statement comes from (--sql, --sql-file, their
// variables and config-file keys), and that every command takes its topic
// from the statement's FROM, wherever the statement was given.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/systemtest"
)

// TestCLISQLSourceRefused: a SQL job that is set but holds no statement
// is a configuration error (exit 2, "sql: empty query") in every command
// that takes one, never the built-in job into the user's sink; so are
// --sql and --sql-file together and a file that can't be read (named).
func TestCLISQLSourceRefused(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	for _, cmd := range [][]string{
		{"run", "--brokers", unreachable, "--sink", "sqlite://sink.db"},
		{"run", "--dry-run", "--brokers", unreachable, "--sink", "sqlite://sink.db"},
		{"verify", "--brokers", unreachable, "--sink", "sqlite://sink.db"},
		{"offsets", "show", "--brokers", unreachable, "--sink", "sqlite://sink.db"},
		{"offsets", "reset", "--brokers", unreachable, "--sink", "sqlite://sink.db", "--to", "earliest"},
	} {
		for _, c := range []struct {
			name   string
			args   []string
			env    []string
			config string
			file   string // contents of q.sql in the directory, if any
			want   []string
		}{
			{name: "empty --sql", args: []string{"--sql", ""}, want: []string{"sql: empty query", "--sql"}},
			{name: "blank --sql", args: []string{"--sql", " \n\t"}, want: []string{"sql: empty query", "--sql"}},
			{name: "empty MICROBATCH_SQL", env: []string{"MICROBATCH_SQL="}, want: []string{"sql: empty query", "MICROBATCH_SQL"}},
			{name: "empty sql key", config: "sql: ''\n", want: []string{"sql: empty query", "config file"}},
			{name: "empty file", args: []string{"--sql-file", "q.sql"}, file: "\n  \n", want: []string{"sql: empty query", "q.sql"}},
			{name: "missing file", args: []string{"--sql-file", "missing.sql"}, want: []string{"sql-file:", "missing.sql"}},
			{name: "missing file from MICROBATCH_SQL_FILE", env: []string{"MICROBATCH_SQL_FILE=missing.sql"}, want: []string{"sql-file:", "missing.sql"}},
			{name: "missing file from the config file", config: "sql-file: missing.sql\n", want: []string{"sql-file:", "missing.sql"}},
			{name: "both", args: []string{"--sql", "INSERT INTO t SELECT k, COUNT(*) AS n FROM x GROUP BY k", "--sql-file", "q.sql"},
				file: "INSERT INTO t SELECT k, COUNT(*) AS n FROM x GROUP BY k", want: []string{"sql and sql-file: both set", "--sql", "--sql-file"}},
			{name: "both, from the environment", args: []string{"--sql-file", "q.sql"}, env: []string{"MICROBATCH_SQL=INSERT INTO t SELECT k, COUNT(*) AS n FROM x GROUP BY k"},
				file: "INSERT INTO t SELECT k, COUNT(*) AS n FROM x GROUP BY k", want: []string{"sql and sql-file: both set", "MICROBATCH_SQL", "--sql-file"}},
		} {
			t.Run(strings.Join(cmd[:2], " ")+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				args := append(append([]string{}, cmd...), c.args...)
				if c.config != "" {
					args = append(args, "--config", writeFile(t, dir, "mb.yaml", c.config))
				}
				if c.file != "" {
					writeFile(t, dir, "q.sql", c.file)
				}
				r := systemtest.Run(t, dir, systemtest.Env(c.env...), time.Minute, args...)
				checkConfigError(t, r, c.want...)
				checkNoDemo(t, dir, r)
			})
		}
	}
}

// TestCLISQLTopicFromFROM: with the SQL job given in a config file, in
// MICROBATCH_SQL or in --sql-file (and no topic anywhere), run, verify,
// offsets show and offsets reset all read the topic the query's FROM
// names, not the default topic. A topic that does not exist is named as
// the FROM's (exit 4), not as a --topic to fix.
func TestCLISQLTopicFromFROM(t *testing.T) {
	t.Parallel()
	brokers := kafkaForTest(t)
	dir := t.TempDir()
	topic, job := systemtest.UniqueName(t, "from"), systemtest.UniqueName(t, "j")
	systemtest.Produce(t, brokers, topic, 3, 0, 500)
	query := fmt.Sprintf("INSERT INTO %s SELECT `key`, COUNT(*) AS events, SUM(amount) AS amount FROM `%s` GROUP BY `key`", sqlName(job), topic)
	sink := "sqlite://" + filepath.Join(dir, "sink.db")
	cfg := writeFile(t, dir, "mb.yaml", fmt.Sprintf("brokers: %s\njob: %s\nsink: %s\nsql: '%s'\ninterval: 100ms\nuntil-idle: 1s\n",
		brokers, job, sink, strings.ReplaceAll(query, "'", "''")))
	r := systemtest.Run(t, dir, nil, 3*time.Minute, "run", "--config", cfg)
	if r.Code != 0 {
		t.Fatalf("run --config with sql: %s", r)
	}
	checkNoDemo(t, dir, r)
	sqlFile := writeFile(t, dir, "job.sql", query+"\n")
	settings := map[string]struct {
		args []string
		env  []string
	}{
		"config file":          {args: []string{"--config", cfg}},
		"MICROBATCH_SQL":       {args: []string{"--brokers", brokers, "--job", job, "--sink", sink}, env: []string{"MICROBATCH_SQL=" + query}},
		"--sql-file":           {args: []string{"--brokers", brokers, "--job", job, "--sink", sink, "--sql-file", sqlFile}},
		"MICROBATCH_SQL_FILE":  {args: []string{"--brokers", brokers, "--job", job, "--sink", sink}, env: []string{"MICROBATCH_SQL_FILE=" + sqlFile}},
		"sql-file, the config": {args: []string{"--config", writeFile(t, dir, "mb2.yaml", fmt.Sprintf("brokers: %s\njob: %s\nsink: %s\nsql-file: %s\n", brokers, job, sink, sqlFile))}},
	}
	for name, st := range settings {
		t.Run(name, func(t *testing.T) {
			env := systemtest.Env(st.env...)
			r := systemtest.Run(t, dir, env, time.Minute, append([]string{"offsets", "show"}, st.args...)...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "topic "+topic) {
				t.Errorf("offsets show: want exit 0 and topic %s\n%s", topic, r)
			}
			r = systemtest.Run(t, dir, env, time.Minute, append([]string{"verify"}, st.args...)...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "OK") {
				t.Errorf("verify: want exit 0 and OK\n%s", r)
			}
			// Reset to where the job stands: a move that changes nothing,
			// but that must find the job's rows of the FROM's topic.
			r = systemtest.Run(t, dir, env, time.Minute, append([]string{"offsets", "reset", "--to", "latest"}, st.args...)...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "topic "+topic) {
				t.Errorf("offsets reset: want exit 0 and topic %s\n%s", topic, r)
			}
		})
	}
	t.Run("missing topic", func(t *testing.T) {
		missing := systemtest.UniqueName(t, "nosuch")
		q := fmt.Sprintf("INSERT INTO t SELECT `key`, COUNT(*) AS n FROM `%s` GROUP BY `key`", missing)
		for _, args := range [][]string{
			{"run", "--dry-run"}, {"offsets", "show"}, {"verify"},
		} {
			r := systemtest.Run(t, dir, nil, time.Minute, append(args, "--brokers", brokers, "--job", job, "--sink", sink, "--sql", q)...)
			want := fmt.Sprintf("the query's FROM names topic %q, which does not exist", missing)
			if r.Code != 4 || !strings.Contains(r.Stderr, want) || strings.Contains(r.Stderr, "--topic") {
				t.Errorf("%s: want exit 4 and %q, no --topic to fix\n%s", args, want, r)
			}
		}
	})
}
