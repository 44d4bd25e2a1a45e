package main_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/systemtest"
)

// TestCheckpointKafkaTxnTimeoutConfig: a Kafka transaction timeout the
// broker could hit while a pre-committed transaction waits for its commit
// (checkpoint interval + checkpoint timeout + restart time) is refused at
// start-up, as a configuration error.
func TestCheckpointKafkaTxnTimeoutConfig(t *testing.T) {
	systemtest.Binary(t)
	base := []string{"run", "--strategy", string(strategies.StrategyCheckpoint), "--brokers", unreachable, "--sink", "kafka://" + unreachable + "/out"}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"1s with the defaults", []string{"--kafka-txn-timeout", "1s"}, []string{"transaction timeout", "1s"}},
		// Interval 500ms + checkpoint timeout 300ms + restart 200ms: a
		// pre-committed transaction may wait 1s; equal is not enough.
		{"1s for a 1s wait", []string{"--kafka-txn-timeout", "1s", "--checkpoint-interval", "500ms", "--checkpoint-timeout", "300ms", "--max-restart-time", "200ms"},
			[]string{"transaction timeout", "1s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := systemtest.Run(t, t.TempDir(), nil, time.Minute, slices.Concat(base, c.args)...)
			checkConfigError(t, r, c.want...)
		})
	}
	// Just above the need, the same settings pass validation and the run
	// fails only on the unreachable broker.
	r := systemtest.Run(t, t.TempDir(), nil, time.Minute, slices.Concat(base,
		[]string{"--kafka-txn-timeout", "1001ms", "--checkpoint-interval", "500ms", "--checkpoint-timeout", "300ms", "--max-restart-time", "200ms",
			"--connect-timeout", "1s"})...)
	if r.Code != 3 || strings.Contains(r.Stderr, "transaction timeout") {
		t.Errorf("a transaction timeout above the need: want exit 3 on the unreachable broker, not a timeout complaint\n%s", r)
	}
}
