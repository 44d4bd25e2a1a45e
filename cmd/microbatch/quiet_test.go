package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/systemtest"
)

// TestCLIQuietDemo: -q is "warnings and errors only: no progress, no
// summary" (docs/configuration.md): the demo's report is the summary, so
// a quiet demo run that passes prints nothing at all, where the same run
// without -q prints its report. Both the built-in job and a SQL job.
func TestCLIQuietDemo(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	for name, extra := range map[string][]string{
		"built-in": nil,
		"sql": {"--sink", "sqlite://sql.db",
			"--sql", "INSERT INTO per_key SELECT `key`, COUNT(*) AS n, SUM(amount) AS amount FROM events GROUP BY `key`"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append([]string{"run", "--demo-events", "300", "--demo-rate", "0", "--interval", "100ms", "--until-idle", "1s"}, extra...)
			r := systemtest.Run(t, dir, nil, 3*time.Minute, append(args, "-q")...)
			if r.Code != 0 || r.Stdout != "" || strings.Contains(r.Stderr, "INFO") || strings.Contains(r.Stderr, "level=info") {
				t.Errorf("run -q: want exit 0, nothing on stdout and no info lines\n%s", r)
			}
			// The same run again, not quiet: the report shows (the events
			// are in, so it is at once).
			r = systemtest.Run(t, dir, nil, 3*time.Minute, args...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "OK") {
				t.Errorf("run without -q: want exit 0 and the report\n%s", r)
			}
		})
	}
}
