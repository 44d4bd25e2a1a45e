package main_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestReadmeQuickstart runs the commands of the README's Quickstart as a
// newcomer types them (go run ./cmd/microbatch is the test's binary), in
// one fresh directory in order — the embedded broker's log and the SQLite
// file carry over — and checks each exits 0 and prints the README's
// "# -> " lines.
func TestReadmeQuickstart(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	dir := t.TempDir()
	cmds := testutil.DocCommands(t, "../../README.md", "Quickstart")
	if len(cmds) < 2 {
		t.Fatalf("the README's Quickstart has %d commands, want the built-in job's and the SQL job's", len(cmds))
	}
	for _, c := range cmds {
		if !slices.Equal(c.Args[:3], []string{"go", "run", "./cmd/microbatch"}) {
			t.Fatalf("README line %d: %s: want go run ./cmd/microbatch", c.Line, c)
		}
		r := systemtest.Run(t, dir, systemtest.Env(c.Env...), 5*time.Minute, c.Args[3:]...)
		if r.Code != 0 {
			t.Fatalf("README line %d: %s: exit %d\n%s", c.Line, c, r.Code, r)
		}
		for _, want := range c.Output {
			if !strings.Contains(r.Stdout, want) {
				t.Fatalf("README line %d: %s printed\n%s\nwithout the README's %q", c.Line, c, r.Stdout, want)
			}
		}
		t.Logf("README line %d: %s: exit 0", c.Line, c)
	}
}
