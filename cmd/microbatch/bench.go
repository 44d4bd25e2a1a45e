package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/microbatch/microbatch/benchmarks"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/redact"
)

func benchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run every strategy on the same data, with and without crashes; write a table, JSON and a chart",
		Long: `Run the guarantee matrix: every strategy drains the same pre-produced topic
(throughput, CPU, peak RSS), then runs under steady production (latency), then
is SIGKILLed at random and at each of its crash points while input keeps
arriving (duplicates, losses, recovery time). Three references are
measured in the same run:

  raw consume (ceiling)       the fastest bare reader: counts records, decodes
                              nothing (best of three reads)
  no-guarantee pipeline       the bar: franz-go reading, fastjson parsing,
                              per-key totals folded in memory, nothing written
                              or committed (best of three reads, its totals
                              checked against the produced ones); every
                              strategy's "× no-guarantee" is its rate over it
  per-record baseline         a hand-written consumer upserting each record

Strategies run as ` + "`microbatch run`" + ` subprocesses of this binary. Without
--brokers a dev broker (kfake) is started and stopped; strategies whose sink
is not given (--mysql, --postgres, --redis) are skipped, and the results
say so. With --postgres the pg-* strategies (pg-txn, pg-single,
pg-at-least-once, pg-at-most-once, pg-checkpoint-2pc with prepared
transactions, pg-checkpoint-wal) run the same runs into PostgreSQL.

Writes results.md, results.json and chart.svg to --out, and every run's log
to --out/logs. Progress goes to stderr.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	fs.StringSlice("strategies", nil, "strategies to run, comma separated (empty: all): "+strings.Join(benchmarks.Names, ", "))
	fs.StringSlice("phases", nil, "runs each strategy gets, comma separated (empty: all): "+strings.Join(benchmarks.Phases, ", ")+" (raw consume always runs; the no-guarantee pipeline and the per-record baseline with throughput)")
	fs.Int64("events", benchmarks.DefaultEvents, "events in the throughput workload")
	fs.Int64("keys", benchmarks.DefaultKeys, "distinct event keys")
	fs.Int32("partitions", benchmarks.DefaultPartitions, "partitions of the bench's topics")
	fs.Duration("interval", benchmarks.DefaultInterval, "batch interval of every run (also the checkpoint interval)")
	fs.Int("crashes", benchmarks.DefaultCrashes, "random SIGKILLs per strategy in the fault run (the crash points come on top)")
	fs.String("brokers", "", "Kafka bootstrap brokers, comma separated (set nowhere: start a dev broker)")
	markList(fs, "brokers")
	fs.String("mysql", "", "MySQL/MariaDB sink DSN for txn, single, the controls, checkpoint-xa/-wal and the baseline (a sqlite:// path works for all but XA; empty: skip them)")
	fs.String("postgres", "", "PostgreSQL sink DSN (postgres://…) for the pg-* strategies: pg-txn, pg-single, the pg- controls, pg-checkpoint-2pc/-wal (empty: skip them)")
	fs.String("redis", "", "Redis DSN for idempotent (empty: skip it)")
	fs.String("out", benchmarks.DefaultOut, "directory for results.md, results.json, chart.svg and logs/")
	fs.Float64("latency-rate", benchmarks.DefaultLatencyRate, "events/s produced while latency is measured")
	fs.Duration("latency-duration", benchmarks.DefaultLatencyDuration, "how long latency is measured")
	fs.Float64("feed-rate", benchmarks.DefaultFeedRate, "events/s fed to the input while the fault run kills")
	fs.Int64("baseline-events", benchmarks.DefaultBaselineEvents, "records the per-record baseline consumes (at most a minute)")
	fs.Uint64("seed", benchmarks.DefaultSeed, "seed of the event sequence")
	fs.String("format", string(event.FormatCompact), "how the bench's events are written: compact, spaced (as Python's json.dumps) or wide (~600-byte records among other fields)")
	fs.Uint64("kill-seed", 0, "seed of the kill timing (0: from the clock; results.json records it)")
	cmd.RunE = classified(func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		o, err := benchOptions(s)
		if err != nil {
			return err
		}
		if o.Binary, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the microbatch binary: %w", err)
		}
		if err := o.Validate(); err != nil {
			return configError{err}
		}
		o.Progress = redactWriter{cmd.ErrOrStderr()}
		o.Command = "microbatch " + strings.Join(redactArgs(os.Args[1:]), " ")
		res, err := benchmarks.Run(cmd.Context(), o)
		if errors.Is(err, benchmarks.ErrOptions) {
			return configError{err}
		}
		if res != nil && len(res.Rows) > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", strings.TrimSpace(benchmarks.Markdown(res, "")))
		}
		return err
	})
	return cmd
}

// benchOptions reads the bench's settings.
func benchOptions(s *settings) (benchmarks.Options, error) {
	// Empty Brokers starts a dev broker: only when brokers is set nowhere.
	brokers, _, err := s.brokers()
	if err != nil {
		return benchmarks.Options{}, err
	}
	o := benchmarks.Options{
		Strategies: s.list("strategies"),
		Phases:     s.list("phases"),
		Brokers:    brokers,
		MySQL:      s.str("mysql"),
		Postgres:   s.str("postgres"),
		Redis:      s.str("redis"),
		Out:        s.str("out"),
	}
	if o.Workload.Events, err = s.int64("events"); err != nil {
		return o, err
	}
	keys, err := s.int64("keys")
	if err != nil {
		return o, err
	}
	o.Workload.Keys = int(keys)
	if o.Workload.Partitions, err = s.partitions("partitions"); err != nil {
		return o, err
	}
	if o.Workload.Seed, err = s.uint64("seed"); err != nil {
		return o, err
	}
	if o.Workload.Format, err = eventFormat(s); err != nil {
		return o, err
	}
	if o.Interval, err = s.duration("interval"); err != nil {
		return o, err
	}
	crashes, err := s.int64("crashes")
	if err != nil {
		return o, err
	}
	o.Crashes = int(crashes)
	if crashes == 0 {
		o.Crashes = -1 // none; zero would mean the default
	}
	if o.LatencyRate, err = s.float("latency-rate"); err != nil {
		return o, err
	}
	if o.LatencyDuration, err = s.duration("latency-duration"); err != nil {
		return o, err
	}
	if o.FeedRate, err = s.float("feed-rate"); err != nil {
		return o, err
	}
	if o.BaselineEvents, err = s.int64("baseline-events"); err != nil {
		return o, err
	}
	if o.KillSeed, err = s.uint64("kill-seed"); err != nil {
		return o, err
	}
	// Zero would silently mean "the default" to the library: refuse it.
	for _, c := range []struct {
		name string
		zero bool
	}{
		{"events", o.Workload.Events == 0}, {"keys", keys == 0}, {"interval", o.Interval == 0}, {"latency-rate", o.LatencyRate == 0},
		{"latency-duration", o.LatencyDuration == 0}, {"feed-rate", o.FeedRate == 0}, {"baseline-events", o.BaselineEvents == 0},
	} {
		if c.zero {
			return o, badConfig("%s: must be positive", c.name)
		}
	}
	if o.Workload.Seed == 0 {
		return o, badConfig("seed: must be positive")
	}
	return o, nil
}

// redactArgs hides the password of the DSNs given to --mysql, --postgres and --redis,
// for the command line in the results.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		for _, flag := range []string{"mysql", "postgres", "redis"} {
			switch {
			case (a == "--"+flag || a == "-"+flag) && i+1 < len(out):
				out[i+1] = redact.DSN(out[i+1])
			case strings.HasPrefix(a, "--"+flag+"="):
				out[i] = "--" + flag + "=" + redact.DSN(strings.TrimPrefix(a, "--"+flag+"="))
			}
		}
	}
	return out
}
