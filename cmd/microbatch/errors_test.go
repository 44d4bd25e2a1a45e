package main_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestCLIServerErrors: each way of not reaching what a job needs gives one
// line naming the problem (and the address, never the password) and its
// documented exit code, after a bounded wait where waiting can help.
func TestCLIServerErrors(t *testing.T) {
	t.Parallel()

	mysql := testutil.NeedServer(t, testutil.EnvMySQL)
	b := systemtest.StartBroker(t)
	topic := systemtest.UniqueName(t, "errs")
	systemtest.Produce(t, b.Addr, topic, 1, 0, 100)
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
		{name: "database unreachable", args: []string{"--brokers", b.Addr, "--topic", topic, "--sink", "mysql://mb:secretpw@127.0.0.1:1/db", "--connect-timeout", "1s"},
			code: 3, want: []string{"unreachable", "mysql://mb:xxxxx@127.0.0.1:1/db"}, minWait: time.Second, password: "secretpw"},
		{name: "redis unreachable", args: []string{"--brokers", b.Addr, "--topic", topic, "--strategy", "idempotent", "--sink", "redis://:secretpw@127.0.0.1:1/0", "--connect-timeout", "1s"},
			code: 3, want: []string{"unreachable", "127.0.0.1:1"}, password: "secretpw"},
		{name: "missing topic", args: []string{"--brokers", b.Addr, "--topic", "no-such-topic", "--sink", sqlite},
			code: 4, want: []string{`no such topic "no-such-topic"`, "create the topic"}},
		{name: "wrong database password", args: []string{"--brokers", b.Addr, "--topic", topic, "--sink", wrongPass},
			code: 5, want: []string{"access denied", "Access denied for user"}, password: passwordOf(wrongPass)},
		{name: "sink does not match strategy", args: []string{"--brokers", b.Addr, "--topic", topic, "--strategy", "idempotent", "--sink", sqlite},
			code: 2, want: []string{"idempotent", "Redis"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := systemtest.Run(t, dir, nil, time.Minute, append([]string{"run", "--until-idle", "1s"}, tc.args...)...)
			took := time.Since(start)
			if r.Code != tc.code {
				t.Fatalf("exit %d, want %d; %s", r.Code, tc.code, r)
			}
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "microbatch: ") {
				t.Errorf("last line %q is not the one-line error", last)
			}
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q does not say %q", last, w)
				}
			}
			if strings.Contains(r.Stderr, "goroutine ") || strings.Contains(r.Stderr, "panic") {
				t.Errorf("a stack trace: %s", r.Stderr)
			}
			if tc.password != "" && (strings.Contains(r.Stderr, tc.password) || strings.Contains(r.Stdout, tc.password)) {
				t.Errorf("the password appears in the output: %s", r)
			}
			if took < tc.minWait {
				t.Errorf("gave up after %s, before the connect timeout %s", took, tc.minWait)
			}
		})
	}

	t.Run("dry run", func(t *testing.T) {
		r := systemtest.Run(t, dir, nil, time.Minute, "run", "--dry-run", "--brokers", b.Addr, "--topic", topic, "--sink", sqlite, "--job", "dry")
		if r.Code != 0 {
			t.Fatalf("exit %d; %s", r.Code, r)
		}
		for _, w := range []string{"settings OK", "txn (exactly-once)", "no live members", "partition", "[0, "} {
			if !strings.Contains(r.Stdout, w) {
				t.Errorf("dry run output lacks %q:\n%s", w, r.Stdout)
			}
		}
		// --metrics-addr is checked too: an address in use is a config
		// error (exit 2) naming the flag.
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		inUse := systemtest.Run(t, dir, nil, time.Minute, "run", "--dry-run", "--brokers", b.Addr, "--topic", topic, "--sink", sqlite, "--job", "dry",
			"--metrics-addr", busy.Addr().String())
		if inUse.Code != 2 || !strings.Contains(inUse.Stderr, "metrics-addr") {
			t.Errorf("dry run with --metrics-addr in use: want exit 2 naming metrics-addr; %s", inUse)
		}
		// Nothing written: a real run afterwards starts from the beginning
		// and reads all 100 events.
		run := systemtest.Run(t, dir, nil, time.Minute, "run", "--brokers", b.Addr, "--topic", topic, "--sink", sqlite, "--job", "dry", "--until-idle", "1s")
		if run.Code != 0 || !strings.Contains(run.Stderr, "records=100 ") {
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
