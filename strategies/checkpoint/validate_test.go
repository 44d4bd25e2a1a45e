package checkpoint_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// TestValidateTexts: every refusal of checkpoint mode's settings, made
// through strategies.Config as the CLI makes it, is an ErrConfig with the
// text users have always read (a contract: scripts and docs quote them).
func TestValidateTexts(t *testing.T) {
	const prefix = "strategies: invalid configuration: "
	u := writers.Upsert{Table: "t1", Keys: []string{"k"}, Values: []string{"n"}, Merge: writers.MergeAdd}
	transform := strategies.NewTransform(u,
		func(rec *batch.Record) (string, error) { return string(rec.Key), nil },
		func(ks []string) [][]any { return nil })
	for _, c := range []struct {
		name string
		set  func(*strategies.Config)
		want string // "" for none
	}{
		{"valid", func(*strategies.Config) {}, ""},
		{"parallelism", func(c *strategies.Config) { c.Checkpoint.OperatorParallelism = 65 }, "operator-parallelism 65 is outside 1..64"},
		{"interval", func(c *strategies.Config) { c.Checkpoint.Interval = 5 * time.Millisecond }, "checkpoint-interval 5ms is below 10ms"},
		{"timeout", func(c *strategies.Config) { c.Checkpoint.Timeout = -time.Second }, "checkpoint-timeout -1s must be positive"},
		{"restart", func(c *strategies.Config) { c.Checkpoint.MaxRestartTime = -time.Second }, "max-restart-time -1s must be positive"},
		{"backend", func(c *strategies.Config) { c.Checkpoint.StateBackend = "disk" }, `state-backend "disk": want file or memory`},
		{"mode", func(c *strategies.Config) { c.Checkpoint.SinkMode = "3pc" }, `sink-mode "3pc": want 2pc or wal`},
		{"kafka user", func(c *strategies.Config) { c.Sink = "kafka://u:p@h:9092/out" },
			"sink: a kafka:// sink takes no user or password: it reaches Kafka with the --kafka-tls and --kafka-sasl-* settings"},
		{"kafka topic", func(c *strategies.Config) { c.Sink = "kafka://h:9092" }, "sink: want kafka://host:port[,host:port]/topic"},
		{"kafka wal", func(c *strategies.Config) {
			c.Sink, c.Checkpoint.SinkMode = "kafka://h:9092/out", strategies.SinkModeWAL
		},
			"sink: --sink-mode wal needs an SQL sink (mysql://, postgres:// or sqlite://), not kafka://"},
		{"file dir", func(c *strategies.Config) { c.Sink = "file://" }, "sink: want file:///absolute/dir or file://relative/dir"},
		{"file wal", func(c *strategies.Config) { c.Checkpoint.SinkMode = strategies.SinkModeWAL },
			"sink: --sink-mode wal needs an SQL sink (mysql://, postgres:// or sqlite://), not file://"},
		{"redis", func(c *strategies.Config) { c.Sink = "redis://h:6379/0" },
			"sink: checkpoint mode writes to kafka://, mysql:// (XA), postgres:// (prepared transactions), file:// or, with --sink-mode wal, mysql://, postgres:// or sqlite://; redis:// is for --strategy idempotent"},
		{"sqlite xa", func(c *strategies.Config) { c.Sink = "sqlite:///tmp/x.db" },
			"sink: SQLite has no two-phase commit (XA): use a mysql:// or postgres:// sink, or --sink-mode wal"},
		{"postgres 2pc", func(c *strategies.Config) { c.Sink = "postgres://u:p@h:5432/db" }, ""},
		{"postgres wal", func(c *strategies.Config) {
			c.Sink, c.Checkpoint.SinkMode = "postgresql://u:p@h:5432/db", strategies.SinkModeWAL
		}, ""},
		{"xa job", func(c *strategies.Config) { c.Sink, c.Job = "mysql://u:p@h:3306/db", strings.Repeat("j", 65) },
			`job "` + strings.Repeat("j", 65) + `": the XA sink names its transactions after the job: use at most 64 characters`},
		{"kafka txn timeout", func(c *strategies.Config) { c.Sink, c.Checkpoint.KafkaTxnTimeout = "kafka://h:9092/out", time.Second },
			"(need: max(checkpoint interval, checkpoint timeout) + checkpoint timeout + max restart time; raise --kafka-txn-timeout or lower the others)"},
		{"transform to files", func(c *strategies.Config) { c.Transform = transform },
			`transform: checkpoint mode writes a Transform's rows, upserts into table "t1", to an SQL sink: mysql:// (XA), postgres:// (prepared transactions), or mysql://, postgres:// or sqlite:// with --sink-mode wal; a file:// sink takes the built-in job's per-event output only`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := strategies.Config{Strategy: strategies.StrategyCheckpoint, Brokers: []string{"h:9092"}, Topic: "in", Job: "j", Sink: "file:///tmp/out"}
			cfg.SetDefaults()
			c.set(&cfg)
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case c.want == "":
			case !errors.Is(err, strategies.ErrConfig) || !strings.HasPrefix(err.Error(), prefix):
				t.Fatalf("Validate = %v, want an ErrConfig", err)
			case strings.HasPrefix(c.want, "(") && !strings.HasSuffix(err.Error(), c.want):
				t.Fatalf("Validate = %q, want it to end in %q", err, c.want)
			case !strings.HasPrefix(c.want, "(") && err.Error() != prefix+c.want:
				t.Fatalf("Validate = %q, want %q", err, prefix+c.want)
			}
		})
	}
}
