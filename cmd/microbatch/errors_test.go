package main_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
)

// TestCLIServerErrors: each way of not reaching what a job needs gives one
// line naming the problem (and the address, never the password) and its
// documented exit code, after a bounded wait where waiting can help.
func TestCLIServerErrors(t *testing.T) {
	t.Parallel()

	mysql := testutil.NeedServer(t, testutil.EnvMySQL)
	b := startBroker(t)
	topic := uniqueName(t, "errs")
	produceCLI(t, b.addr, topic, 1, 0, 100)
	dir := t.TempDir()
	sqlite := "sqlite://" + dir + "/sink.db"
	wrongPass := strings.Replace(mysql, "@", "x@", 1) // the password with an x appended
	if wrongPass == mysql {
		t.Fatalf("can't make a wrong password from %q", mysql)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		want     []string
		minWait  time.Duration
		password string // must not appear
	}{
		{name: "broker unreachable", args: []string{"--brokers", "127.0.0.1:1", "--sink", sqlite, "--connect-timeout", "2s"},
			code: 3, want: []string{"unreachable after 2s", "127.0.0.1:1", "connect-timeout"}, minWait: 2 * time.Second},
		{name: "database unreachable", args: []string{"--brokers", b.addr, "--topic", topic, "--sink", "mysql://mb:secretpw@127.0.0.1:1/db", "--connect-timeout", "1s"},
			code: 3, want: []string{"unreachable", "mysql://mb:xxxxx@127.0.0.1:1/db"}, minWait: time.Second, password: "secretpw"},
		{name: "redis unreachable", args: []string{"--brokers", b.addr, "--topic", topic, "--strategy", "idempotent", "--sink", "redis://:secretpw@127.0.0.1:1/0", "--connect-timeout", "1s"},
			code: 3, want: []string{"unreachable", "127.0.0.1:1"}, password: "secretpw"},
		{name: "missing topic", args: []string{"--brokers", b.addr, "--topic", "no-such-topic", "--sink", sqlite},
			code: 4, want: []string{`no such topic "no-such-topic"`, "create the topic"}},
		{name: "wrong database password", args: []string{"--brokers", b.addr, "--topic", topic, "--sink", wrongPass},
			code: 5, want: []string{"access denied", "Access denied for user"}, password: passwordOf(wrongPass)},
		{name: "sink does not match strategy", args: []string{"--brokers", b.addr, "--topic", topic, "--strategy", "idempotent", "--sink", sqlite},
			code: 2, want: []string{"idempotent", "Redis"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := runBin(t, dir, nil, time.Minute, append([]string{"run", "--until-idle", "1s"}, tc.args...)...)
			took := time.Since(start)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; %s", r.code, tc.code, r)
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "microbatch: ") {
				t.Errorf("last line %q is not the one-line error", last)
			}
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q does not say %q", last, w)
				}
			}
			if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
				t.Errorf("a stack trace: %s", r.stderr)
			}
			if tc.password != "" && (strings.Contains(r.stderr, tc.password) || strings.Contains(r.stdout, tc.password)) {
				t.Errorf("the password appears in the output: %s", r)
			}
			if took < tc.minWait {
				t.Errorf("gave up after %s, before the connect timeout %s", took, tc.minWait)
			}
		})
	}

	t.Run("dry run", func(t *testing.T) {
		r := runBin(t, dir, nil, time.Minute, "run", "--dry-run", "--brokers", b.addr, "--topic", topic, "--sink", sqlite, "--job", "dry")
		if r.code != 0 {
			t.Fatalf("exit %d; %s", r.code, r)
		}
		for _, w := range []string{"settings OK", "txn (exactly-once)", "no live members", "partition", "[0, "} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("dry run output lacks %q:\n%s", w, r.stdout)
			}
		}
		// --metrics-addr is checked too: an address in use is a config
		// error (exit 2) naming the flag.
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		inUse := runBin(t, dir, nil, time.Minute, "run", "--dry-run", "--brokers", b.addr, "--topic", topic, "--sink", sqlite, "--job", "dry",
			"--metrics-addr", busy.Addr().String())
		if inUse.code != 2 || !strings.Contains(inUse.stderr, "metrics-addr") {
			t.Errorf("dry run with --metrics-addr in use: want exit 2 naming metrics-addr; %s", inUse)
		}
		// Nothing written: a real run afterwards starts from the beginning
		// and reads all 100 events.
		run := runBin(t, dir, nil, time.Minute, "run", "--brokers", b.addr, "--topic", topic, "--sink", sqlite, "--job", "dry", "--until-idle", "1s")
		if run.code != 0 || !strings.Contains(run.stderr, "records=100 ") {
			t.Errorf("run after the dry run: %s", run)
		}
	})
}

// passwordOf returns the password of a mysql://user:pass@… DSN.
func passwordOf(dsn string) string {
	rest, _, _ := strings.Cut(strings.TrimPrefix(dsn, "mysql://"), "@")
	_, pass, _ := strings.Cut(rest, ":")
	return pass
}
