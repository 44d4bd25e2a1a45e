package main_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
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

// TestCheckpointSQLSinkConnectTimeout: --connect-timeout bounds how long
// checkpoint mode waits for an SQL sink that does not answer, as it does
// for every other strategy (it waited the 30 s default whatever was set).
// The sink's port refuses every connection, so start-up keeps retrying
// until the timeout it was given.
func TestCheckpointSQLSinkConnectTimeout(t *testing.T) {
	t.Parallel()
	b := systemtest.StartBroker(t)
	topic := systemtest.UniqueName(t, "ckpt-timeout")
	if err := kafkautil.EnsureTopic([]string{b.Addr}, topic, 1); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"2pc", "wal"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			began := time.Now()
			r := systemtest.Run(t, dir, nil, 2*time.Minute, "run", "--strategy", string(strategies.StrategyCheckpoint),
				"--brokers", b.Addr, "--topic", topic, "--job", "timeout", "--sink-mode", mode,
				"--sink", "mysql://mb:pw@"+unreachable+"/db", "--state-dir", filepath.Join(dir, "state"), "--connect-timeout", "1s")
			took := time.Since(began)
			if r.Code != 3 {
				t.Fatalf("want exit 3 (the sink did not answer)\n%s", r)
			}
			// The default is 30 s: well under it means the flag counted,
			// with room for a slow start on a busy machine.
			if limit := strategies.DefaultConnectTimeout * 2 / 3; took >= limit {
				t.Errorf("exit 3 after %s with --connect-timeout 1s: want well under the %s default (under %s)", took.Round(time.Millisecond), strategies.DefaultConnectTimeout, limit)
			}
		})
	}
}
