package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/strategies"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ctx, stop := signalContext()
	defer stop()
	// go-redis prints to stderr through a process-wide logger of its own;
	// a command's one error line says what failed (run hands go-redis's
	// lines to its logger at debug level: newOutput).
	redis.SetLogger(redisLog{slog.New(slog.DiscardHandler)})
	root := rootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && !errors.Is(err, errDiffers) { // verify printed its comparison
		// Every message that names a DSN hides its password already; this
		// catches one that slipped through (a library's own error text).
		fmt.Fprintln(os.Stderr, "microbatch:", redact.Text(oneLine(err)))
	}
	return exitCode(err)
}

// exitAllDeadLetters: run --until-idle read records and dead-lettered every
// one of them.
const exitAllDeadLetters = 6

// exitCode maps what a command returned to the exit codes docs/operations.md
// lists. It is the only such mapping: every subcommand's errors come
// here, those from talking to servers classified by strategies.Classify
// (run by strategies.Run itself, the others by classified).
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errDiffers):
		return exitFailure
	case isConfigError(err) || isUsageError(err):
		return exitConfig
	case errors.Is(err, strategies.ErrUnreachable):
		return exitNoServer
	case errors.Is(err, strategies.ErrNoTopic):
		return exitNoTopic
	case errors.Is(err, strategies.ErrDenied):
		return exitDenied
	case errors.As(err, new(allDeadLettersError)):
		return exitAllDeadLetters
	default:
		return exitFailure
	}
}

// rootCmd is the command tree. It is also where the config file's keys
// come from (fileKeys).
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "microbatch",
		Short:         "Exactly-once micro-batches from Kafka into SQL",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(runCmd(), brokerCmd(), produceCmd(), verifyCmd(), benchCmd())
	root.AddCommand(offsetsCmd())
	return root
}

// classified wraps the RunE of a subcommand that talks to Kafka or a sink
// itself (produce, verify, offsets, bench, broker): whatever it returns is
// classified as run's start-up errors are, so a refused password, a
// server that does not answer or a failed TLS handshake gets the same
// exit code in every subcommand.
func classified(runE func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := runE(cmd, args)
		if isConfigError(err) {
			return err // the command's own verdict
		}
		return strategies.Classify(err)
	}
}

// signalContext is cancelled by the first SIGINT/SIGTERM, which asks for a
// graceful stop (the batch in flight commits or rolls back). A second
// signal exits at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			fmt.Fprintln(os.Stderr, "microbatch: second signal, exiting without waiting")
			os.Exit(exitSignaled)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// isUsageError recognises cobra's own flag and argument errors.
func isUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "invalid argument", "flag needs an argument", "accepts ", "requires "} {
		if len(msg) >= len(p) && (msg[:len(p)] == p) {
			return true
		}
	}
	return false
}

// oneLine keeps an error on one line: joined errors (sarama joins one per
// broker) are separated by "; ".
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
