package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// errDiffers makes verify exit 1 after it printed the comparison.
var errDiffers = errors.New("sink differs from expectation")

func verifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Compare what the sink holds for a job with the expected totals (or, with --sql, with the query recomputed from Kafka); exit 1 if they differ",
		Long: `Compare what the sink holds for a job with what it should hold; exit 1 if
they differ.

The built-in job: give the totals produce printed (--expect-events,
--expect-amount); the comparison is judged by the strategy's promise.

A SQL job (--sql, the query the job ran, and --brokers): verify reads the
job's committed positions from where its strategy keeps them (checkpoint
mode: the newest checkpoint in --state-dir), reads the topic read-committed
from the start up to them, evaluates the query in memory and compares it
with the sink group by group: matching, missing, extra and different
groups, the first --show differences listed. Run it on a stopped or idle
job: the positions, the topic and the sink are read one after the other.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	fs.String("sink", "", "the job's sink DSN: "+strategies.SinkFormsHelp()+" (empty: run's default for --strategy, "+defaultSink+"; checkpoint: "+defaultCheckpointSink+")")
	fs.String("job", "default", "job name")
	fs.String("strategy", string(strategies.StrategyTxn), "strategy the job ran with; verify judges by its promise: "+strings.Join(names(strategies.Strategies), ", "))
	fs.Int64("expect-events", 0, "events the sink should hold")
	fs.String("expect-amount", "0", "sum of amount the sink should hold (an integer of any size and sign)")
	addSQLFlags(fs, "the SQL job to check (as given to run --sql): recompute it from Kafka and compare it with the sink group by group")
	fs.String("brokers", "", "with --sql: the job's Kafka bootstrap brokers, comma separated")
	markList(fs, "brokers")
	fs.String("topic", "", "with --sql: the job's topic (the query's FROM; if given, it must agree)")
	fs.String("group", "", "with --sql, at-least-once and at-most-once: the job's consumer group, where their positions are (empty: the job name)")
	fs.String("state-dir", strategies.DefaultStateDir, "with --sql, checkpoint: the job's state dir, where its positions are")
	fs.Int64("show", 10, "with --sql: list the first N differences")
	addKafkaSecurityFlags(fs)
	addSinkSecurityFlags(fs)
	addConnectTimeoutFlag(fs)
	cmd.RunE = classified(func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		if text, err := s.sqlText(); err != nil {
			return err
		} else if text != "" {
			v, err := sqlVerifySettings(s)
			if err != nil {
				return err
			}
			ok, err := verifySQL(cmd.Context(), cmd.OutOrStdout(), v)
			if err == nil && !ok {
				err = errDiffers
			}
			return explainNoTopic(err, v.q)
		}
		strategy, err := choice(s, "strategy", strategies.Strategies...)
		if err != nil {
			return err
		}
		guarantee := strategies.GuaranteeOf(strategy)
		events, err := s.int64("expect-events")
		if err != nil {
			return err
		}
		amount, err := s.bigInt("expect-amount")
		if err != nil {
			return err
		}
		dsn := s.str("sink")
		if dsn == "" {
			dsn = defaultSinkFor(strategy)
		}
		if err := strategies.CheckSink(dsn); err != nil {
			return configError{err}
		}
		// Without an expectation, "no loss" would be judged against zero.
		if !s.v.IsSet("expect-events") || !s.v.IsSet("expect-amount") {
			return badConfig("verify needs --expect-events and --expect-amount (what `produce` printed)")
		}
		// Opening a missing SQLite file would create an empty one.
		if target, err := sqlsink.ParseDSN(dsn); err == nil && target.File != "" {
			if _, err := os.Stat(target.File); err != nil {
				return fmt.Errorf("sink %s: %w", target.Display, err)
			}
		}
		kafka, err := kafkaSecurity(s)
		if err != nil {
			return err
		}
		if dsn, err = sinkDSN(s, dsn); err != nil {
			return err
		}
		timeout, err := s.duration("connect-timeout")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout+30*time.Second)
		defer cancel()
		var got strategies.SinkTotals
		var sink string
		// The read is retried while the sink does not answer. It gets the
		// command's context, not the connect timeout's: reading a large
		// Kafka output may outlast the connect timeout, and each driver
		// bounds its own dial.
		err = strategies.Connect(ctx, timeout, func(context.Context) (err error) {
			got, sink, err = strategies.ReadTotalsSecure(ctx, dsn, s.str("job"), kafka)
			return err
		})
		if err != nil {
			return err
		}
		if !printComparison(cmd.OutOrStdout(), sink, s.str("job"), guarantee, got, events, amount) {
			return errDiffers
		}
		return nil
	})
	return cmd
}

// printComparison writes what the sink holds next to what was expected,
// with the duplicates and losses the difference shows, and judges it by
// the strategy's promise: exactly-once needs both to match, at-least-once
// allows duplicates, at-most-once allows losses.
func printComparison(out io.Writer, sink, job string, g strategies.Guarantee, got strategies.SinkTotals, events int64, amount *big.Int) bool {
	dups, losses := max(got.Events-events, 0), max(events-got.Events, 0)
	sameAmount := got.Amount != nil && got.Amount.Cmp(amount) == 0
	var ok bool
	switch g {
	case strategies.AtLeastOnce:
		ok = got.Events >= events && (dups > 0 || sameAmount)
	case strategies.AtMostOnce:
		ok = got.Events <= events && (losses > 0 || sameAmount)
	default:
		ok = got.Events == events && sameAmount
	}
	fmt.Fprintf(out, "job %s in %s (promise: %s)\n", job, sink, g)
	fmt.Fprintf(out, "  %-13s %15s %15s\n", "", "found", "expected")
	fmt.Fprintf(out, "  %-13s %15d %15d\n", "events", got.Events, events)
	fmt.Fprintf(out, "  %-13s %15d %15d\n", "amount", got.Amount, amount)
	fmt.Fprintf(out, "  %-13s %15d\n", "duplicates", dups)
	fmt.Fprintf(out, "  %-13s %15d\n", "losses", losses)
	fmt.Fprintf(out, "  %-13s %15d\n", "keys", got.Keys)
	fmt.Fprintf(out, "  %-13s %15d\n", "dead letters", got.DeadLetters)
	switch {
	case !ok:
		fmt.Fprintf(out, "FAIL: the sink breaks the %s promise\n", g)
	case dups == 0 && losses == 0 && sameAmount:
		fmt.Fprintf(out, "OK: exactly once\n")
	default:
		fmt.Fprintf(out, "OK for %s: %d duplicates, %d losses\n", g, dups, losses)
	}
	return ok
}
