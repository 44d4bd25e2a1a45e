package main_test

// The config file: lists where a list is meant, errors where it isn't, the
// embedded demo broker only when no broker is set anywhere, and one file
// for every command.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// kafkaForTest is Apache Kafka when the servers run (MICROBATCH_TEST_KAFKA),
// else a dev broker subprocess.
func kafkaForTest(t *testing.T) string {
	t.Helper()
	if b := os.Getenv(testutil.EnvKafka); b != "" && !testing.Short() {
		return b
	}
	return systemtest.StartBroker(t).Addr
}

// checkNoDemo fails if a run in dir started the embedded demo broker.
func checkNoDemo(t *testing.T, dir string, r systemtest.Result) {
	t.Helper()
	if strings.Contains(r.Stderr, "embedded demo broker") {
		t.Errorf("the run started the embedded demo broker\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "microbatch-demo-broker")); err == nil {
		t.Errorf("the run started the embedded demo broker (./microbatch-demo-broker exists)")
	}
}

// TestCLIConfigBrokersList: brokers given as a YAML list (flow or block) in
// the config file is the list of brokers: the job reads the user's topic
// there and writes into the sink the file names — no demo broker, no demo
// events.
func TestCLIConfigBrokersList(t *testing.T) {
	t.Parallel()
	brokers := kafkautil.SplitBrokers(kafkaForTest(t))
	for _, c := range []struct {
		name, brokers string
	}{
		{"flow", "brokers: [" + strings.Join(brokers, ", ") + "]\n"},
		// Two entries: joined wrongly, they would not be one address each.
		{"block", "brokers:\n  - " + strings.Join(append(brokers, brokers[0]), "\n  - ") + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			topic, job := systemtest.UniqueName(t, "t"), systemtest.UniqueName(t, "j")
			events, amount := systemtest.Produce(t, strings.Join(brokers, ","), topic, 5, 0, 2000)
			cfg := writeFile(t, dir, "microbatch.yaml", c.brokers+fmt.Sprintf(
				"topic: %s\njob: %s\nsink: sqlite://%s/sink.db\ninterval: 100ms\nuntil-idle: 1s\n", topic, job, dir))
			r := systemtest.Run(t, dir, nil, 3*time.Minute, "run", "--config", cfg)
			if r.Code != 0 {
				t.Fatalf("run: %s", r)
			}
			checkNoDemo(t, dir, r)
			if !regexp.MustCompile(`msg="run finished".* records=2000 `).MatchString(r.Stderr) {
				t.Errorf("run did not report 2000 records\n%s", r)
			}
			r = systemtest.Run(t, dir, nil, time.Minute, "verify", "--config", cfg,
				"--expect-events", fmt.Sprint(events), "--expect-amount", fmt.Sprint(amount))
			if r.Code != 0 || !strings.Contains(r.Stdout, "OK: exactly once") {
				t.Errorf("verify of the sink the file names: %s", r)
			}
		})
	}
}

// TestCLIConfigValues: a value of the wrong shape for its key — a list or
// map for one value, an empty value, a brokers setting naming no broker —
// exits 2 with one line naming the key and the file, before anything
// starts (no demo broker).
func TestCLIConfigValues(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	for _, c := range []struct {
		name   string
		args   []string
		env    []string
		config string // contents of the --config file, if any
		want   []string
		inFile bool // the message names the config file
	}{
		{name: "list for topic", args: []string{"run"}, config: "brokers: " + unreachable + "\ntopic: [a, b]\n", want: []string{"topic is a list, want one string"}, inFile: true},
		{name: "map for topic", args: []string{"run"}, config: "brokers: " + unreachable + "\ntopic: {a: b}\n", want: []string{"topic is a map, want one string"}, inFile: true},
		{name: "map for interval", args: []string{"run"}, config: "interval:\n  every: 1s\n", want: []string{"interval is a map, want one duration"}, inFile: true},
		{name: "list for max-batch-records", args: []string{"run"}, config: "max-batch-records: [1, 2]\n", want: []string{"max-batch-records is a list, want one whole number"}, inFile: true},
		{name: "map for dry-run", args: []string{"run"}, config: "dry-run: {x: 1}\n", want: []string{"dry-run is a map, want true or false"}, inFile: true},
		{name: "map for brokers", args: []string{"run"}, config: "brokers: {a: b}\n", want: []string{"brokers is a map"}, inFile: true},
		{name: "empty brokers", args: []string{"run"}, config: "brokers:\n", want: []string{"brokers is empty"}, inFile: true},
		{name: "empty brokers list", args: []string{"run"}, config: "brokers: []\n", want: []string{"brokers: set", "names no broker"}, inFile: true},
		{name: "empty brokers list, dry run", args: []string{"run", "--dry-run"}, config: "brokers: []\n", want: []string{"brokers: set", "names no broker"}, inFile: true},
		{name: "brokers of commas", args: []string{"run"}, config: "brokers: ' , '\n", want: []string{"brokers: set", "names no broker"}, inFile: true},
		{name: "empty MICROBATCH_BROKERS", args: []string{"run"}, env: []string{"MICROBATCH_BROKERS="}, want: []string{"MICROBATCH_BROKERS", "names no broker"}},
		{name: "empty --brokers", args: []string{"run", "--brokers", ""}, want: []string{"--brokers", "names no broker"}},
		{name: "bench with empty MICROBATCH_BROKERS", args: []string{"bench", "--strategies", "txn"}, env: []string{"MICROBATCH_BROKERS="}, want: []string{"MICROBATCH_BROKERS", "names no broker"}},
		{name: "map in broker's topic list", args: []string{"broker", "--listen", "127.0.0.1:0"}, config: "topic: [a, {b: c}]\n", want: []string{"topic is a list holding a map"}, inFile: true},
		{name: "list for verify's expect-events", args: []string{"verify"}, config: "expect-events: [1]\n", want: []string{"expect-events is a list"}, inFile: true},
		{name: "offsets show json: yes", args: []string{"offsets", "show", "--brokers", unreachable}, config: "json: yes\n", want: []string{`json: "yes" is not true or false`}, inFile: true},
		// A value that does not parse names where it was written, as an
		// unknown key does.
		{name: "interval: abc", args: []string{"run"}, config: "interval: abc\n", want: []string{`interval: "abc" is not a duration`}, inFile: true},
		{name: "interval: 0s", args: []string{"run"}, config: "interval: 0s\n", want: []string{"interval: must be positive"}, inFile: true},
		{name: "log-level: loud", args: []string{"run"}, config: "log-level: loud\n", want: []string{`log-level: "loud" is not one of`}, inFile: true},
		{name: "MICROBATCH_INTERVAL=abc", args: []string{"run"}, env: []string{"MICROBATCH_INTERVAL=abc"}, want: []string{`interval (MICROBATCH_INTERVAL): "abc" is not a duration`}},
		{name: "MICROBATCH_INTERVAL=abc over the file", args: []string{"run"}, config: "interval: 1s\n", env: []string{"MICROBATCH_INTERVAL=abc"}, want: []string{`interval (MICROBATCH_INTERVAL): "abc" is not a duration`}},
		{name: "MICROBATCH_MAX_BATCH_RECORDS=0", args: []string{"run"}, env: []string{"MICROBATCH_MAX_BATCH_RECORDS=0"}, want: []string{"max-batch-records (MICROBATCH_MAX_BATCH_RECORDS): must be positive"}},
		{name: "MICROBATCH_JSON=yes", args: []string{"offsets", "show", "--brokers", unreachable}, env: []string{"MICROBATCH_JSON=yes"}, want: []string{`json (MICROBATCH_JSON): "yes" is not true or false`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := c.args
			var file string
			if c.config != "" {
				file = writeFile(t, dir, "mb.yaml", c.config)
				args = append(args, "--config", file)
			}
			want := c.want
			if c.inFile {
				want = append(want, "config file "+file)
			}
			r := systemtest.Run(t, dir, systemtest.Env(c.env...), time.Minute, args...)
			checkConfigError(t, r, want...)
			checkNoDemo(t, dir, r)
		})
	}
}

// TestCLIOneConfigFile: one microbatch.yaml with run's keys (and produce's
// partition count) serves produce, run --dry-run, run, verify, offsets
// show and offsets reset: each takes its keys and ignores the others'.
// `partitions` is produce's partition count; offsets reset reads its
// --partitions from the command line only.
func TestCLIOneConfigFile(t *testing.T) {
	t.Parallel()
	brokers := kafkaForTest(t)
	dir := t.TempDir()
	topic, job := systemtest.UniqueName(t, "t"), systemtest.UniqueName(t, "j")
	cfg := writeFile(t, dir, "microbatch.yaml", fmt.Sprintf(`# one file for every command
brokers: %s
topic: %s
job: %s
sink: sqlite://%s/sink.db
strategy: txn
start-from: earliest
interval: 100ms
until-idle: 1s
max-batch-records: 5000
partitions: 2
`, brokers, topic, job, dir))
	mustOK := func(args ...string) systemtest.Result {
		t.Helper()
		r := systemtest.Run(t, dir, nil, 3*time.Minute, append(args, "--config", cfg)...)
		if r.Code != 0 {
			t.Fatalf("microbatch %s --config microbatch.yaml: %s", strings.Join(args, " "), r)
		}
		return r
	}

	r := mustOK("produce", "--count", "3000", "--keys", "50")
	m := systemtest.ExpectedRE.FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("produce printed no expected totals:\n%s", r)
	}
	if !strings.Contains(mustOK("run", "--dry-run").Stdout, "settings OK, Kafka and the sink reached") {
		t.Errorf("run --dry-run did not reach Kafka and the sink")
	}
	checkNoDemo(t, dir, mustOK("run"))
	if r := mustOK("verify", "--expect-events", m[1], "--expect-amount", m[2]); !strings.Contains(r.Stdout, "OK: exactly once") {
		t.Errorf("verify: %s", r)
	}
	var show struct {
		Partitions []struct{} `json:"partitions"`
		Lag        int64      `json:"lag"`
	}
	if err := json.Unmarshal([]byte(mustOK("offsets", "show", "--json").Stdout), &show); err != nil {
		t.Fatalf("offsets show --json: %v", err)
	}
	if len(show.Partitions) != 2 || show.Lag != 0 {
		t.Errorf("offsets show: %d partitions, lag %d; want 2 and 0", len(show.Partitions), show.Lag)
	}

	// partitions: 2 in the file (and in the environment) is produce's
	// count, not "reset partition 2": every partition is reset.
	resetLines := regexp.MustCompile(`(?m)^  (\d+): `)
	for _, env := range [][]string{nil, {"MICROBATCH_PARTITIONS=1"}} {
		r := systemtest.Run(t, dir, systemtest.Env(env...), time.Minute, "offsets", "reset", "--to", "earliest", "--config", cfg)
		if got := resetLines.FindAllStringSubmatch(r.Stdout, -1); r.Code != 0 || len(got) != 2 {
			t.Errorf("offsets reset --to earliest (env %v) with the shared file: want both partitions reset\n%s", env, r)
		}
	}
	// On the command line, --partitions picks partitions.
	r = mustOK("offsets", "reset", "--to", "latest", "--partitions", "1")
	if got := resetLines.FindAllStringSubmatch(r.Stdout, -1); len(got) != 1 || got[0][1] != "1" {
		t.Errorf("offsets reset --partitions 1: want partition 1 alone\n%s", r)
	}
}

// settingsCommands lists the commands (as argument paths) whose --help
// shows a --config flag, walking `microbatch … --help`: every command that
// reads settings, without a hand-kept list.
func settingsCommands(t *testing.T) [][]string {
	t.Helper()
	cmdLine := regexp.MustCompile(`^  (\S+)\s`)
	var out [][]string
	var walk func(path []string)
	walk = func(path []string) {
		r := systemtest.Run(t, t.TempDir(), nil, time.Minute, append(path, "--help")...)
		if r.Code != 0 {
			t.Fatalf("microbatch %s --help: %s", strings.Join(path, " "), r)
		}
		if regexp.MustCompile(`(?m)^\s+--config `).MatchString(r.Stdout) {
			out = append(out, path)
		}
		_, subs, ok := strings.Cut(r.Stdout, "Available Commands:\n")
		if !ok {
			return
		}
		for _, line := range strings.Split(subs, "\n") {
			m := cmdLine.FindStringSubmatch(line)
			if m == nil {
				break
			}
			if m[1] != "help" && m[1] != "completion" {
				walk(append(append([]string(nil), path...), m[1]))
			}
		}
	}
	walk(nil)
	return out
}

// TestCLIConfigUnknownKey: a key that no command knows is exit 2 in every
// command, named with the closest known key; the other commands' keys
// around it are not what the error is about.
func TestCLIConfigUnknownKey(t *testing.T) {
	t.Parallel()
	cmds := settingsCommands(t)
	if len(cmds) < 7 {
		t.Fatalf("found %d commands with --config (%v); want run, broker, produce, verify, bench, offsets show and reset", len(cmds), cmds)
	}
	for _, path := range cmds {
		t.Run(strings.Join(path, "-"), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := writeFile(t, dir, "mb.yaml", "interval: 1s\ncount: 5\nlisten: 127.0.0.1:0\njson: true\nexpect-events: 1\nstrategies: [txn]\ntopik: events\n")
			r := systemtest.Run(t, dir, nil, time.Minute, append(append([]string(nil), path...), "--config", cfg)...)
			checkConfigError(t, r, `unknown key "topik"`, `did you mean "topic"`, "config file "+cfg)
			checkNoDemo(t, dir, r)
		})
	}
}
