package main_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestBrokerLimits: a setting outside the broker's bounds is refused at
// start-up, by run and by run --dry-run alike, with exit 2 and both
// numbers — a Kafka transaction timeout above transaction.max.timeout.ms,
// a session timeout below group.min.session.timeout.ms or above
// group.max.session.timeout.ms — on Apache Kafka and on the dev broker;
// settings within the bounds pass. (Before, the dry run said "settings
// OK" and the checkpoint run gave up after 5 restarts with exit 1.)
func TestBrokerLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		brokers    func(t *testing.T) string
		maxSession string // the broker's group.max.session.timeout.ms, and a minute more
		maxMs      string
		above      string
	}{
		{"ApacheKafka", func(t *testing.T) string { return testutil.NeedServer(t, testutil.EnvKafka) }, "30m0s", "1800000", "31m0s"},
		{"kfake", func(t *testing.T) string { return systemtest.StartBroker(t).Addr }, "5m0s", "300000", "6m0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers := c.brokers(t)
			topic := systemtest.UniqueName(t, "limits")
			systemtest.Produce(t, brokers, topic, 3, 0, 100)
			dir := t.TempDir()
			common := []string{"--brokers", brokers, "--topic", topic, "--job", systemtest.UniqueName(t, "j"), "--until-idle", "1s"}
			checkpoint := func(timeout string) []string {
				return []string{"--strategy", "checkpoint", "--sink", "kafka://" + brokers + "/" + systemtest.UniqueName(t, "out"),
					"--state-dir", t.TempDir(), "--kafka-txn-timeout", timeout}
			}
			sqlite := []string{"--sink", "sqlite://" + dir + "/sink.db"}
			for _, tc := range []struct {
				name string
				args []string
				want string // "": within the bounds
			}{
				{"TxnTimeoutAboveMax", checkpoint("20m"),
					"kafka-txn-timeout 20m0s is above the broker's transaction.max.timeout.ms 900000 (15m0s)"},
				{"SessionBelowMin", append([]string{"--session-timeout", "200ms"}, sqlite...),
					"session-timeout 200ms is below the broker's group.min.session.timeout.ms 500 (500ms)"},
				{"SessionAboveMax", append([]string{"--session-timeout", c.above, "--rebalance-timeout", c.above}, sqlite...),
					"session-timeout " + c.above + " is above the broker's group.max.session.timeout.ms " + c.maxMs + " (" + c.maxSession + ")"},
				{"TxnTimeoutWithin", checkpoint("14m"), ""},
				{"SessionWithin", append([]string{"--session-timeout", "1s"}, sqlite...), ""},
			} {
				for _, mode := range []string{"dry-run", "run"} {
					args := append([]string{"run"}, common...)
					args = append(args, tc.args...)
					if mode == "dry-run" {
						args = append(args, "--dry-run")
					}
					r := systemtest.Run(t, dir, nil, 3*time.Minute, args...)
					switch {
					case tc.want == "" && r.Code != 0:
						t.Errorf("%s %s: %s\nwant exit 0: the setting is within the broker's bounds", tc.name, mode, r)
					case tc.want != "" && (r.Code != 2 || !strings.Contains(r.Stderr, tc.want)):
						t.Errorf("%s %s: %s\nwant exit 2 and %q", tc.name, mode, r, tc.want)
					case tc.want != "" && strings.Contains(r.Stderr, "job started"):
						t.Errorf("%s %s: the refusal came after the job started:\n%s", tc.name, mode, r)
					}
				}
			}
			if _, err := os.Stat(dir + "/sink.db"); err != nil {
				t.Errorf("the runs within the bounds left no sink: %v", err)
			}
		})
	}
}
