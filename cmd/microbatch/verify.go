package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// errDiffers makes verify exit 1 after it printed the comparison.
var errDiffers = errors.New("sink differs from expectation")

func verifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Compare what the sink holds for a job with the expected totals; exit 1 if they differ",
		Args:  cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	fs.String("sink", "sqlite://microbatch.db", "sink DSN (mysql://user:pass@host:port/db or sqlite://path)")
	fs.String("job", "default", "job name")
	fs.Int64("expect-events", 0, "events the sink should hold")
	fs.Int64("expect-amount", 0, "sum of amount the sink should hold")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		events, err := s.int64("expect-events")
		if err != nil {
			return err
		}
		amount, err := s.int64("expect-amount")
		if err != nil {
			return err
		}
		target, err := writers.ParseSQLDSN(s.str("sink"))
		if err != nil {
			return configError{err}
		}
		// Opening a missing SQLite file would create an empty one.
		if target.File != "" {
			if _, err := os.Stat(target.File); err != nil {
				return fmt.Errorf("sink %s: %w", target.Display, err)
			}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		defer cancel()
		w, err := writers.OpenSQL(ctx, s.str("sink"))
		if err != nil {
			return err
		}
		defer w.Close()
		got, err := strategies.ReadSinkTotals(ctx, w, s.str("job"))
		if err != nil {
			return err
		}
		if !printComparison(cmd.OutOrStdout(), w.String(), s.str("job"), got, events, amount) {
			return errDiffers
		}
		return nil
	}
	return cmd
}

// printComparison writes the sink's totals next to the expected ones and
// reports whether they match.
func printComparison(out io.Writer, sink, job string, got strategies.SinkTotals, events, amount int64) bool {
	ok := got.Events == events && got.Amount == amount
	verdict := "OK: exactly once"
	switch {
	case ok:
	case got.Events > events:
		verdict = fmt.Sprintf("DIFFERS: %d events too many (duplicates)", got.Events-events)
	case got.Events < events:
		verdict = fmt.Sprintf("DIFFERS: %d events missing (losses)", events-got.Events)
	default:
		verdict = "DIFFERS: same event count, different amount"
	}
	fmt.Fprintf(out, "job %s in %s\n", job, sink)
	fmt.Fprintf(out, "  %-13s %15s %15s\n", "", "sink", "expected")
	fmt.Fprintf(out, "  %-13s %15d %15d\n", "events", got.Events, events)
	fmt.Fprintf(out, "  %-13s %15d %15d\n", "amount", got.Amount, amount)
	fmt.Fprintf(out, "  %-13s %15d\n", "keys", got.Keys)
	fmt.Fprintf(out, "  %-13s %15d\n", "dead letters", got.DeadLetters)
	fmt.Fprintf(out, "%s\n", verdict)
	return ok
}
