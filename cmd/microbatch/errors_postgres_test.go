package main_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestCLIPostgres: the built-in job into PostgreSQL, over TLS
// (sslmode=verify-full with the test CA) and verified; and each way of not
// reaching it gives its documented exit code with one line that never
// shows the password: a wrong password 5, an unreachable server 3, a bad
// DSN 2.
func TestCLIPostgres(t *testing.T) {
	t.Parallel()
	pg := testutil.NeedServer(t, testutil.EnvPostgres)
	pgTLS := testutil.NeedServer(t, testutil.EnvPostgresTLS)
	b := systemtest.StartBroker(t)
	topic := systemtest.UniqueName(t, "pg")
	events, amount := systemtest.Produce(t, b.Addr, topic, 1, 0, 500)
	dir := t.TempDir()

	t.Run("TLS", func(t *testing.T) {
		// A database of its own: tables the TLS user creates in the
		// shared one are its, and would refuse the plain user elsewhere.
		fresh, err := url.Parse(testutil.FreshPostgresDatabase(t, pg))
		if err != nil {
			t.Fatal(err)
		}
		tlsURL, err := url.Parse(pgTLS)
		if err != nil {
			t.Fatal(err)
		}
		tlsURL.Path = fresh.Path
		pgTLS := tlsURL.String()
		job := systemtest.UniqueName(t, "pgtls")
		r := systemtest.Run(t, dir, nil, time.Minute, "run", "--brokers", b.Addr, "--topic", topic, "--job", job, "--sink", pgTLS, "--until-idle", "1s")
		if r.Code != 0 {
			t.Fatalf("run over TLS: %s", r)
		}
		v := systemtest.Run(t, dir, nil, time.Minute, "verify", "--sink", pgTLS, "--job", job,
			"--expect-events", strconv.FormatInt(events, 10), "--expect-amount", strconv.FormatInt(amount, 10))
		if v.Code != 0 || !strings.Contains(v.Stdout, "OK: exactly once") {
			t.Fatalf("verify: %s", v)
		}
		if strings.Contains(r.Stderr+v.Stdout+v.Stderr, "mbpass") {
			t.Errorf("the password appears in the output")
		}
	})

	wrongPass := strings.Replace(pg, ":mbpass@", ":mbpass-wrong@", 1)
	if wrongPass == pg {
		t.Fatalf("can't make a wrong password from %q", pg)
	}
	for _, tc := range []struct {
		name string
		sink string
		code int
		want []string
	}{
		{"wrong password", wrongPass, 5, []string{"access denied", "password authentication failed", "postgres://mb:xxxxx@"}},
		{"unreachable", "postgres://mb:mbpass-wrong@127.0.0.1:1/db?sslmode=disable", 3, []string{"unreachable", "postgres://mb:xxxxx@127.0.0.1:1/db"}},
		{"bad DSN", "postgres://mb:mbpass-wrong@127.0.0.1:notaport/db", 2, []string{"sink", "port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := systemtest.Run(t, dir, nil, time.Minute, "run", "--brokers", b.Addr, "--topic", topic, "--sink", tc.sink,
				"--connect-timeout", "1s", "--until-idle", "1s")
			if r.Code != tc.code {
				t.Fatalf("exit %d, want %d; %s", r.Code, tc.code, r)
			}
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q does not say %q", last, w)
				}
			}
			if strings.Contains(r.Stderr+r.Stdout, "mbpass-wrong") {
				t.Errorf("the password appears in the output: %s", r)
			}
		})
	}
}
