package strategies

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/writers"
)

func validConfig() Config {
	return Config{
		Brokers: []string{"127.0.0.1:9092"},
		Sink:    "sqlite://mb.db",
	}
}

func TestConfigDefaults(t *testing.T) {
	c := validConfig()
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate of a defaulted config: %v", err)
	}
	if c.Strategy != StrategyTxn || c.Topic != DefaultTopic || c.Job != DefaultJob || c.StartFrom != StartEarliest ||
		c.Interval != DefaultInterval || c.MaxBatchRecords != DefaultMaxBatchRecords || c.Logger == nil ||
		c.Group.ID != c.Job || c.Group.Assignment != AssignSticky || c.Group.SessionTimeout != DefaultSessionTimeout || c.Group.RebalanceTimeout != DefaultRebalanceTimeout {
		t.Errorf("defaults not applied: %+v", c)
	}
	// Explicit values survive SetDefaults.
	c = validConfig()
	c.Topic, c.Job, c.StartFrom, c.Interval, c.MaxBatchRecords = "t", "j", StartLatest, time.Minute, 5
	c.SetDefaults()
	if c.Topic != "t" || c.Job != "j" || c.StartFrom != StartLatest || c.Interval != time.Minute || c.MaxBatchRecords != 5 {
		t.Errorf("SetDefaults overwrote explicit values: %+v", c)
	}
}

// TestConfigValidateAppliesDefaults: Validate judges the configuration with
// its defaults applied, without changing the caller's copy.
func TestConfigValidateAppliesDefaults(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate of a config with only brokers and sink: %v", err)
	}
	if c.Strategy != "" || c.Topic != "" || c.Job != "" || c.Interval != 0 {
		t.Errorf("Validate changed the caller's config: %+v", c)
	}
	c.Strategy = "nope"
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("Validate without SetDefaults accepted strategy %q: %v", c.Strategy, err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(c *Config)
		setting string // named in the error; "" = valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"all set", func(c *Config) {
			c.Strategy, c.Topic, c.Job, c.StartFrom = StrategyTxn, "my.topic-1_x", "Job.2-b_c", StartLatest
			c.Interval, c.Parallelism, c.MaxBatchRecords, c.UntilIdle = 5*time.Second, 4, 10, time.Second
		}, ""},
		{"longest job and topic", func(c *Config) { c.Job, c.Topic = strings.Repeat("j", 128), strings.Repeat("t", 249) }, ""},
		{"unknown strategy", func(c *Config) { c.Strategy = "exactly-twice" }, "strategy"},
		{"strategy is case sensitive", func(c *Config) { c.Strategy = "TXN" }, "strategy"},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "brokers"},
		{"empty broker list", func(c *Config) { c.Brokers = []string{} }, "brokers"},
		{"topic with space", func(c *Config) { c.Topic = "my topic" }, "topic"},
		{"topic with slash", func(c *Config) { c.Topic = "a/b" }, "topic"},
		{"topic too long", func(c *Config) { c.Topic = strings.Repeat("t", 250) }, "topic"},
		{"topic non-ASCII", func(c *Config) { c.Topic = "tøpic" }, "topic"},
		{"job with space", func(c *Config) { c.Job = "my job" }, "job"},
		{"job with quote", func(c *Config) { c.Job = "j'; DROP TABLE mb_totals; --" }, "job"},
		{"job too long", func(c *Config) { c.Job = strings.Repeat("j", 129) }, "job"},
		{"job with newline", func(c *Config) { c.Job = "job\n" }, "job"},
		{"bad start-from", func(c *Config) { c.StartFrom = "middle" }, "start-from"},
		{"start-from is case sensitive", func(c *Config) { c.StartFrom = "Earliest" }, "start-from"},
		{"no sink", func(c *Config) { c.Sink = "" }, "sink"},
		{"negative interval", func(c *Config) { c.Interval = -time.Second }, "interval"},
		{"negative parallelism", func(c *Config) { c.Parallelism = -1 }, "parallelism"},
		{"negative max-batch-records", func(c *Config) { c.MaxBatchRecords = -100 }, "max-batch-records"},
		{"negative until-idle", func(c *Config) { c.UntilIdle = -time.Millisecond }, "until-idle"},
		{"group settings", func(c *Config) {
			c.Group.ID, c.Group.Assignment, c.Group.InstanceID = "other.group", AssignRoundRobin, "host-1"
			c.Group.SessionTimeout, c.Group.RebalanceTimeout = time.Second, 5*time.Second
		}, ""},
		{"group with space", func(c *Config) { c.Group.ID = "my group" }, "group"},
		{"unknown assignment strategy", func(c *Config) { c.Group.Assignment = "cooperative-sticky" }, "assignment-strategy"},
		{"session timeout too short", func(c *Config) { c.Group.SessionTimeout = 50 * time.Millisecond }, "session-timeout"},
		{"rebalance shorter than session", func(c *Config) { c.Group.SessionTimeout, c.Group.RebalanceTimeout = 30*time.Second, 20*time.Second }, "rebalance-timeout"},
		{"rebalance shorter than a batch", func(c *Config) { c.Interval, c.Group.RebalanceTimeout = time.Minute, time.Minute }, "rebalance-timeout"},
		{"instance id with slash", func(c *Config) { c.Group.InstanceID = "a/b" }, "instance-id"},
		{"append into Redis", func(c *Config) {
			c.Strategy, c.Sink = StrategyIdempotent, "redis://127.0.0.1:6379/0"
			c.Transform = NewTransform(writers.Upsert{Table: "t", Values: []string{"v"}, Merge: writers.MergeAppend},
				func(*batch.Record) (string, error) { return "", nil }, func([]string) [][]any { return nil })
		}, "transform"},
		{"SQL job into PostgreSQL in checkpoint mode", func(c *Config) {
			c.Strategy, c.Sink = StrategyCheckpoint, "postgres://u:p@127.0.0.1:5432/db"
			c.Transform = NewTransform(writers.Upsert{Table: "t", Keys: []string{"k"}, Values: []string{"v"}, Merge: writers.MergeReplace},
				func(*batch.Record) (string, error) { return "", nil }, func([]string) [][]any { return nil })
		}, ""},
		{"SQL job into PostgreSQL in checkpoint mode, write-ahead", func(c *Config) {
			c.Strategy, c.Sink = StrategyCheckpoint, "postgres://u:p@127.0.0.1:5432/db"
			c.Checkpoint.SinkMode = SinkModeWAL
			c.Transform = NewTransform(writers.Upsert{Table: "t", Values: []string{"v"}, Merge: writers.MergeAppend},
				func(*batch.Record) (string, error) { return "", nil }, func([]string) [][]any { return nil })
		}, ""},
		{"upsert into Redis", func(c *Config) {
			c.Strategy, c.Sink = StrategyIdempotent, "redis://127.0.0.1:6379/0"
			c.Transform = NewTransform(writers.Upsert{Table: "t", Keys: []string{"k"}, Values: []string{"v"}, Merge: writers.MergeReplace},
				func(*batch.Record) (string, error) { return "", nil }, func([]string) [][]any { return nil })
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mod(&c)
			c.SetDefaults()
			err := c.Validate()
			if tc.setting == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate of %+v = nil, want an error naming %q", c, tc.setting)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("Validate error %v does not wrap ErrConfig", err)
			}
			msg := strings.TrimPrefix(err.Error(), ErrConfig.Error())
			if !strings.Contains(msg, tc.setting) {
				t.Errorf("Validate error %q does not name %q", err, tc.setting)
			}
		})
	}
}

// TestStrategyNames: the typed names keep the values `--strategy` and the
// other flags have always taken (the CLI's contract), and every strategy
// but checkpoint (a pipeline of its own) has a type Run can pick.
func TestStrategyNames(t *testing.T) {
	if got := strings.Join(strategyNames(), " "); got != "txn single idempotent checkpoint at-least-once at-most-once" {
		t.Errorf("strategy names %q", got)
	}
	for _, pair := range [][2]string{
		{string(StartEarliest), "earliest"}, {string(StartLatest), "latest"},
		{string(AssignSticky), "sticky"}, {string(AssignRange), "range"}, {string(AssignRoundRobin), "roundrobin"},
		{string(StateBackendFile), "file"}, {string(StateBackendMemory), "memory"},
		{string(SinkMode2PC), "2pc"}, {string(SinkModeWAL), "wal"},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%q, want %q", pair[0], pair[1])
		}
	}
	for _, s := range Strategies {
		newStrategy, ok := batchStrategies[s]
		if ok == (s == StrategyCheckpoint) {
			t.Errorf("strategy %s: in batchStrategies %v", s, ok)
			continue
		}
		if ok && newStrategy(newRunEnv(validConfig())) == nil {
			t.Errorf("strategy %s: no type", s)
		}
	}
	if len(batchStrategies) != len(Strategies)-1 {
		t.Errorf("batchStrategies has %d entries, want %d", len(batchStrategies), len(Strategies)-1)
	}
}
