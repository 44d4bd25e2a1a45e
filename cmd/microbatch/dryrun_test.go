package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/systemtest"
)

// TestCLIDryRunCreatesNothing: a dry run writes nothing, so a SQLite sink
// that does not exist yet is not created (opening it would): the plan says
// the run will, every partition from its start. A missing directory, which
// the run could not create the file in, fails as the run would.
func TestCLIDryRunCreatesNothing(t *testing.T) {
	t.Parallel()
	b := systemtest.StartBroker(t)
	topic := systemtest.UniqueName(t, "dry")
	systemtest.Produce(t, b.Addr, topic, 1, 0, 200)
	for _, s := range []string{string(strategies.StrategyTxn), string(strategies.StrategySingle), string(strategies.StrategyAtLeastOnce), string(strategies.StrategyAtMostOnce)} {
		t.Run(s, func(t *testing.T) {
			dir := t.TempDir()
			r := systemtest.Run(t, dir, nil, time.Minute, "run", "--dry-run", "--brokers", b.Addr, "--topic", topic, "--job", "dry",
				"--strategy", s, "--sink", "sqlite://sink.db")
			if r.Code != 0 || !strings.Contains(r.Stdout, "does not exist yet") || !strings.Contains(r.Stdout, "[0, ") {
				t.Errorf("dry run: want exit 0, a note that the file does not exist yet and a first batch from 0\n%s", r)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				t.Errorf("the dry run left %s in its directory", e.Name())
			}
		})
	}
	t.Run("missing directory", func(t *testing.T) {
		dir := t.TempDir()
		r := systemtest.Run(t, dir, nil, time.Minute, "run", "--dry-run", "--brokers", b.Addr, "--topic", topic, "--job", "dry",
			"--sink", "sqlite://"+filepath.Join("nodir", "sink.db"))
		if r.Code != 1 || !strings.Contains(r.Stderr, "directory nodir does not exist") {
			t.Errorf("dry run into a missing directory: want exit 1 naming it\n%s", r)
		}
		if _, err := os.Stat(filepath.Join(dir, "nodir")); err == nil {
			t.Error("the dry run created the directory")
		}
	})
}
