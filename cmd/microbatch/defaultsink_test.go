package main_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/systemtest"
)

// TestCLIVerifyDefaultSink: without --sink, verify reads where run wrote
// for the same --strategy — for checkpoint mode the output files, not the
// SQLite file of the batch strategies.
func TestCLIVerifyDefaultSink(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	dir := t.TempDir()
	const events = 3000
	r := systemtest.Run(t, dir, nil, 5*time.Minute, "run", "--strategy", "checkpoint", "--demo-events", strconv.Itoa(events),
		"--demo-rate", "0", "--checkpoint-interval", "200ms", "--until-idle", "1s")
	if r.Code != 0 || !strings.Contains(r.Stdout, "OK: exactly once") {
		t.Fatalf("checkpoint demo: %s", r)
	}
	want := event.ExpectedTotals(1, 1000, events) // the demo's sequence: seed 1, 1,000 keys
	r = systemtest.Run(t, dir, nil, time.Minute, "verify", "--strategy", "checkpoint",
		"--expect-events", strconv.FormatInt(want.Events, 10), "--expect-amount", strconv.FormatInt(want.Amount, 10))
	if r.Code != 0 || !strings.Contains(r.Stdout, "in files in microbatch-output ") || !strings.Contains(r.Stdout, "OK: exactly once") {
		t.Fatalf("verify --strategy checkpoint without --sink: want the files in microbatch-output and \"OK: exactly once\"\n%s", r)
	}
}
