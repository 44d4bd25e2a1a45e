package main_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestReadmeRealServers runs the commands of the README's "Pointing it at
// real servers" as written — with a dev broker for kafka1:9092 and a fresh
// MariaDB database for the sink — and checks their output against the
// README's "# -> " lines: produce's totals, verify's OK for txn, and the
// at-least-once run killed at its crash point, whose verify must show
// duplicates (the README says it does).
func TestReadmeRealServers(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	sink := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	b := systemtest.StartBroker(t)
	replace := map[string]string{"kafka1:9092": b.Addr, "mysql://app:secret@db1:3306/analytics": sink}
	dir := t.TempDir()
	var crashed, duplicated bool
	for _, c := range testutil.DocCommands(t, "../../README.md", "Pointing it at real servers") {
		if slices.Equal(c.Args, []string{"go", "build", "-o", "microbatch", "./cmd/microbatch"}) {
			continue // the test's binary is built so
		}
		if c.Args[0] != "./microbatch" {
			t.Fatalf("README line %d: %s: want go build or ./microbatch", c.Line, c)
		}
		args := slices.Clone(c.Args[1:])
		for i, a := range args {
			if r, ok := replace[a]; ok {
				args[i] = r
			}
		}
		r := systemtest.Run(t, dir, systemtest.Env(c.Env...), 5*time.Minute, args...)
		crash := slices.ContainsFunc(c.Env, func(kv string) bool { return strings.HasPrefix(kv, "MICROBATCH_CRASH_AT=") })
		switch {
		case crash && r.Code != -1:
			t.Fatalf("README line %d: %s: not killed at its crash point (exit %d)\n%s", c.Line, c, r.Code, r)
		case crash:
			crashed = true
		case r.Code != 0:
			t.Fatalf("README line %d: %s: exit %d\n%s", c.Line, c, r.Code, r)
		}
		for _, want := range c.Output {
			// "…" in the README stands for a number that varies.
			re := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(want), "…", `(\d+)`))
			m := re.FindStringSubmatch(r.Stdout)
			if m == nil {
				t.Fatalf("README line %d: %s printed\n%s\nwithout the README's %q", c.Line, c, r.Stdout, want)
			}
			if strings.Contains(want, "… duplicates") {
				if m[1] == "0" {
					t.Fatalf("README line %d: %s: no duplicates after the crash\n%s", c.Line, c, r)
				}
				duplicated = true
				t.Logf("%s duplicates", m[1])
			}
		}
		t.Logf("README line %d: %s: exit %d", c.Line, c, r.Code)
	}
	if !crashed || !duplicated {
		t.Fatalf("the README's commands crashed=%v, showed duplicates=%v: want an at-least-once run killed at a crash point and its duplicates", crashed, duplicated)
	}
}
