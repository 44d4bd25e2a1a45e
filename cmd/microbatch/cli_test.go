package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/systemtest"
	"github.com/microbatch/microbatch/writers"
)

// unreachable is a broker address nothing listens on: runs that must fail
// on their configuration never get as far as connecting.
const unreachable = "127.0.0.1:1"

// writeFile writes a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkConfigError asserts exit code 2 with a single "microbatch: …" line
// on stderr that contains every one of want.
func checkConfigError(t *testing.T, r systemtest.Result, want ...string) {
	t.Helper()
	msg := strings.TrimRight(r.Stderr, "\n")
	switch {
	case r.Code != 2:
		t.Errorf("exit code %d, want 2\n%s", r.Code, r)
	case strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "microbatch: "):
		t.Errorf("want one line \"microbatch: …\" on stderr, got:\n%s", r.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q does not mention %q", msg, w)
		}
	}
}

// TestCLIConfigErrors: every kind of bad setting exits 2 with one line
// that names the problem, before anything is started.
func TestCLIConfigErrors(t *testing.T) {
	systemtest.Binary(t)
	for _, c := range []struct {
		name   string
		args   []string
		env    []string
		config string // contents of the --config file, if any
		want   []string
	}{
		{name: "unknown strategy", args: []string{"run", "--strategy", "nope", "--brokers", unreachable}, want: []string{`"nope"`, "strategy"}},
		// Without --brokers, run starts the embedded demo broker; a bad
		// strategy must still be refused first, with one line.
		{name: "unknown strategy in demo mode", args: []string{"run", "--strategy", "nope"}, want: []string{`"nope"`, "strategy"}},
		{name: "unknown sink scheme", args: []string{"run", "--sink", "oracle://x", "--brokers", unreachable}, want: []string{`"oracle"`, "scheme"}},
		{name: "unknown sink scheme in demo mode", args: []string{"run", "--sink", "oracle://x"}, want: []string{`"oracle"`, "scheme"}},
		// PostgreSQL takes the built-in job with the micro-batch
		// strategies; what it doesn't take yet is refused at start.
		{name: "bad postgres DSN", args: []string{"run", "--sink", "postgres://mb:pg-secret@db:notaport/app", "--brokers", unreachable}, want: []string{"sink"}},
		{name: "idempotent into postgres", args: []string{"run", "--strategy", "idempotent", "--sink", "postgres://mb:pg-secret@db/app", "--brokers", unreachable}, want: []string{"redis"}},
		{name: "mysql sink without database", args: []string{"run", "--sink", "mysql://u:secret@host:3306", "--brokers", unreachable}, want: []string{"mysql://"}},
		{name: "malformed interval flag", args: []string{"run", "--interval", "abc"}, want: []string{"abc", "interval"}},
		{name: "malformed interval in env", args: []string{"run"}, env: []string{"MICROBATCH_INTERVAL=abc"}, want: []string{"abc", "interval"}},
		{name: "malformed until-idle in config", args: []string{"run"}, config: "until-idle: soon\n", want: []string{"soon", "until-idle"}},
		{name: "bad start-from", args: []string{"run", "--start-from", "middle"}, want: []string{"middle", "start-from"}},
		{name: "bad max-batch-records in env", args: []string{"run"}, env: []string{"MICROBATCH_MAX_BATCH_RECORDS=lots"}, want: []string{"lots", "max-batch-records"}},
		{name: "bad log level", args: []string{"run", "--log-level", "loud"}, want: []string{"loud", "log-level"}},
		{name: "bad assignment strategy", args: []string{"run", "--assignment-strategy", "fair", "--brokers", unreachable}, want: []string{"fair", "assignment-strategy"}},
		{name: "session timeout too short", args: []string{"run", "--session-timeout", "10ms", "--brokers", unreachable}, want: []string{"session-timeout"}},
		{name: "unknown key in config", args: []string{"run"}, config: "topik: events\n", want: []string{`"topik"`}},
		{name: "config file is not YAML", args: []string{"run"}, config: "topic: [unclosed\n", want: []string{"config"}},
		{name: "config file missing", args: []string{"run", "--config", "/nonexistent/mb.yaml"}, want: []string{"/nonexistent/mb.yaml"}},
		{name: "unknown flag", args: []string{"run", "--nope"}, want: []string{"--nope"}},
		{name: "verify without expectations", args: []string{"verify", "--sink", "sqlite:///nonexistent/x.db"}, want: []string{"--expect-events"}},
		{name: "verify with unknown sink scheme", args: []string{"verify", "--sink", "oracle://x"}, want: []string{`scheme "oracle"`}},
		{name: "broker with zero partitions", args: []string{"broker", "--listen", "127.0.0.1:0", "--partitions", "0"}, want: []string{"partitions"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := c.args
			if c.config != "" {
				args = append(args, "--config", writeFile(t, dir, "mb.yaml", c.config))
			}
			r := systemtest.Run(t, dir, systemtest.Env(c.env...), time.Minute, args...)
			checkConfigError(t, r, c.want...)
			if _, err := os.Stat(filepath.Join(dir, "microbatch-demo-broker")); err == nil {
				t.Errorf("a run refused for its configuration started the demo broker (./microbatch-demo-broker exists)")
			}
		})
	}
}

// TestCLISettingsPrecedence: flag over MICROBATCH_* env over --config file.
// The topics are invalid names, so the run stops at validation with an
// error that quotes the topic it would have read.
func TestCLISettingsPrecedence(t *testing.T) {
	systemtest.Binary(t)
	const (
		fromFlag = "flag topic!"
		fromEnv  = "env topic!"
		fromFile = "file topic!"
	)
	for _, c := range []struct {
		name            string
		flag, env, file bool
		want            string
	}{
		{name: "env", env: true, want: fromEnv},
		{name: "file", file: true, want: fromFile},
		{name: "flag over env", flag: true, env: true, want: fromFlag},
		{name: "env over file", env: true, file: true, want: fromEnv},
		{name: "flag over env and file", flag: true, env: true, file: true, want: fromFlag},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"run", "--brokers", unreachable, "--sink", "sqlite://" + dir + "/sink.db"}
			var env []string
			if c.flag {
				args = append(args, "--topic", fromFlag)
			}
			if c.env {
				env = append(env, "MICROBATCH_TOPIC="+fromEnv)
			}
			if c.file {
				args = append(args, "--config", writeFile(t, dir, "mb.yaml", "topic: \""+fromFile+"\"\n"))
			}
			r := systemtest.Run(t, dir, systemtest.Env(env...), time.Minute, args...)
			checkConfigError(t, r, strconv.Quote(c.want))
		})
	}
}

// TestCLIVerify: exit 0 when the sink matches, 1 with the difference named
// when it doesn't.
func TestCLIVerify(t *testing.T) {
	systemtest.Binary(t)
	dir := t.TempDir()
	sink := "sqlite://" + dir + "/sink.db"
	w := sinktest.OpenSQL(t, sink)
	ctx := context.Background()
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]any{{"vjob", "a", int64(3), int64(30)}, {"vjob", "b", int64(2), int64(12)}}
	if err := tx.Upsert(ctx, writers.Totals, rows); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, c := range []struct {
		name           string
		strategy       string
		job            string
		events, amount int64
		code           int
		verdict        string
	}{
		{"match", "txn", "vjob", 5, 42, 0, "OK: exactly once"},
		{"losses", "txn", "vjob", 6, 50, 1, "FAIL: the sink breaks the exactly-once promise"},
		{"duplicates", "single", "vjob", 4, 40, 1, "FAIL: the sink breaks the exactly-once promise"},
		{"amount differs", "txn", "vjob", 5, 43, 1, "FAIL"},
		{"unknown job", "txn", "nojob", 5, 42, 1, "FAIL"},
		{"at-least-once with duplicates", "at-least-once", "vjob", 4, 40, 0, "OK for at-least-once: 1 duplicates, 0 losses"},
		{"at-least-once with losses", "at-least-once", "vjob", 6, 50, 1, "FAIL: the sink breaks the at-least-once promise"},
		{"at-most-once with losses", "at-most-once", "vjob", 6, 50, 0, "OK for at-most-once: 0 duplicates, 1 losses"},
		{"at-most-once with duplicates", "at-most-once", "vjob", 4, 40, 1, "FAIL: the sink breaks the at-most-once promise"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := systemtest.Run(t, dir, nil, time.Minute, "verify", "--sink", sink, "--job", c.job, "--strategy", c.strategy,
				"--expect-events", strconv.FormatInt(c.events, 10), "--expect-amount", strconv.FormatInt(c.amount, 10))
			if r.Code != c.code || !strings.Contains(r.Stdout, c.verdict) {
				t.Errorf("want exit %d and %q\n%s", c.code, c.verdict, r)
			}
			dups, losses := max(5-c.events, 0), max(c.events-5, 0) // the sink holds 5 events
			shown := regexp.MustCompile(fmt.Sprintf(`duplicates\s+%d\n\s+losses\s+%d\n`, dups, losses))
			if c.job == "vjob" && !shown.MatchString(r.Stdout) {
				t.Errorf("want duplicates %d and losses %d shown\n%s", dups, losses, r)
			}
		})
	}
}

// TestCLIProduceRunVerify: produce prints the totals of its sequence; a
// run configured only through MICROBATCH_* variables (with a config file
// pointing elsewhere, which they override) consumes them; verify agrees.
func TestCLIProduceRunVerify(t *testing.T) {
	b := systemtest.StartBroker(t)
	const (
		count = 20_000
		keys  = 50
		seed  = 9
	)
	topic := systemtest.UniqueName(t, "cli")
	dir := t.TempDir()
	r := systemtest.Run(t, dir, nil, time.Minute, "produce", "--brokers", b.Addr, "--topic", topic,
		"--count", strconv.Itoa(count), "--keys", strconv.Itoa(keys), "--seed", strconv.Itoa(seed))
	want := event.ExpectedTotals(seed, keys, count)
	line := "expected events=" + strconv.FormatInt(want.Events, 10) + " amount=" + strconv.FormatInt(want.Amount, 10)
	if r.Code != 0 || !strings.Contains(r.Stdout, line) {
		t.Fatalf("produce: want exit 0 and %q\n%s", line, r)
	}

	sink := "sqlite://" + dir + "/sink.db"
	job := systemtest.UniqueName(t, "clijob")
	cfg := writeFile(t, dir, "mb.yaml", "topic: not-this-one\njob: nor-this-one\n")
	r = systemtest.Run(t, dir, systemtest.Env(
		"MICROBATCH_BROKERS="+b.Addr, "MICROBATCH_TOPIC="+topic, "MICROBATCH_JOB="+job, "MICROBATCH_SINK="+sink,
		"MICROBATCH_INTERVAL=100ms", "MICROBATCH_UNTIL_IDLE=1s", "MICROBATCH_CONFIG="+cfg,
	), 2*time.Minute, "run")
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	if !regexp.MustCompile(`msg="run finished".* records=` + strconv.Itoa(count) + ` `).MatchString(r.Stderr) {
		t.Errorf("run did not report %d records\n%s", count, r)
	}
	r = systemtest.Run(t, dir, nil, time.Minute, "verify", "--sink", sink, "--job", job,
		"--expect-events", strconv.FormatInt(want.Events, 10), "--expect-amount", strconv.FormatInt(want.Amount, 10))
	if r.Code != 0 || !strings.Contains(r.Stdout, "OK: exactly once") {
		t.Errorf("verify: %s", r)
	}
}

// TestCLIBroker: the dev broker prints its address, serves Kafka there and
// stops cleanly on SIGTERM.
func TestCLIBroker(t *testing.T) {
	b := systemtest.StartBroker(t, "--topic", "seeded", "--partitions", "3")
	client, err := sarama.NewClient([]string{b.Addr}, kafkautil.Config("microbatch-cli-test"))
	if err != nil {
		t.Fatalf("connecting to the broker at %s: %v", b.Addr, err)
	}
	parts, err := client.Partitions("seeded")
	client.Close()
	if err != nil || len(parts) != 3 {
		t.Errorf("topic seeded: partitions %v (err %v), want 3", parts, err)
	}
	r := b.Stop(t)
	if r.Code != 0 || !strings.Contains(r.Stdout, "dev broker stopped") {
		t.Errorf("broker after SIGTERM: want exit 0 and \"dev broker stopped\"\n%s", r)
	}
}

// TestCLIDemo: `run` without --brokers fills an embedded broker and ends
// with the verdict; a second run continues from the persisted broker log
// and sink.
func TestCLIDemo(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	dir := t.TempDir()
	for _, events := range []int{20_000, 30_000} {
		r := systemtest.Run(t, dir, nil, 5*time.Minute, "run", "--demo-events", strconv.Itoa(events), "--demo-rate", "0", "--until-idle", "1s")
		want := regexp.MustCompile(`events\s+` + strconv.Itoa(events) + `\s+` + strconv.Itoa(events) + `\n`)
		if r.Code != 0 || !strings.Contains(r.Stdout, "OK: exactly once") || !want.MatchString(r.Stdout) {
			t.Fatalf("demo run with %d events: want exit 0, %d events and \"OK: exactly once\"\n%s", events, events, r)
		}
	}
}

// TestCLIDemoInterrupt: Ctrl-C during the demo is a graceful stop: exit 0,
// a report of where the job stands, and a second run finishes exactly.
func TestCLIDemoInterrupt(t *testing.T) {
	t.Parallel()
	bin := systemtest.Binary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "--demo-events", "200000", "--demo-rate", "20000", "--interval", "200ms")
	cmd.Dir = dir
	cmd.Env = systemtest.Env()
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `msg="batch committed"`) {
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, stderr)
	err = cmd.Wait()
	if cmd.ProcessState.ExitCode() != 0 || !strings.Contains(stdout.String(), "run again to continue") {
		t.Fatalf("interrupted demo: exit %v, stdout:\n%s", err, stdout.String())
	}
	r := systemtest.Run(t, dir, nil, 5*time.Minute, "run", "--demo-events", "200000", "--demo-rate", "0", "--until-idle", "1s")
	if r.Code != 0 || !strings.Contains(r.Stdout, "OK: exactly once") {
		t.Fatalf("demo after the interrupt: %s", r)
	}
}
