package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies"
)

func produceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Write deterministic events to a topic and print the totals a sink should end with",
		Args:  cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	fs.String("brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma separated")
	markList(fs, "brokers")
	fs.String("topic", "events", "topic to write to (created if missing)")
	fs.Int32("partitions", 4, "partitions of the topic if it has to be created")
	fs.Int64("count", 100000, "number of events")
	fs.Int64("keys", 1000, "number of distinct keys")
	fs.Float64("rate", 0, "events per second (0 = as fast as possible)")
	fs.Uint64("seed", 1, "seed of the event sequence")
	fs.Int64("skip", 0, "continue the sequence after this many events")
	fs.String("format", string(event.FormatCompact), "how each event is written: compact, spaced (as Python's json.dumps) or wide (~600-byte records among other fields)")
	addKafkaSecurityFlags(fs)
	addConnectTimeoutFlag(fs)
	cmd.RunE = classified(func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		opts := kafkautil.ProduceOptions{Brokers: kafkautil.SplitBrokers(s.str("brokers")), Topic: s.str("topic")}
		if len(opts.Brokers) == 0 {
			return badConfig("brokers: none given")
		}
		if opts.Format, err = eventFormat(s); err != nil {
			return err
		}
		if opts.Security, err = kafkaSecurity(s); err != nil {
			return err
		}
		if opts.Count, err = s.int64("count"); err != nil {
			return err
		}
		if opts.Skip, err = s.int64("skip"); err != nil {
			return err
		}
		keys, err := s.int64("keys")
		if err != nil {
			return err
		}
		if keys < 1 {
			return badConfig("keys: want at least 1")
		}
		opts.Keys = int(keys)
		if opts.Rate, err = s.float("rate"); err != nil {
			return err
		}
		if opts.Seed, err = s.uint64("seed"); err != nil {
			return err
		}
		parts, err := s.partitions("partitions")
		if err != nil {
			return err
		}
		timeout, err := s.duration("connect-timeout")
		if err != nil {
			return err
		}
		if err := strategies.Connect(cmd.Context(), timeout, func(context.Context) error {
			return opts.Security.EnsureTopic(opts.Brokers, opts.Topic, parts)
		}); err != nil {
			return err
		}
		exp, err := kafkautil.Produce(cmd.Context(), opts)
		if err != nil {
			// Some events may be in the topic; what a sink should hold is
			// unknown, so no expectation is printed.
			return fmt.Errorf("%w (after queueing %d events; the topic may hold some of them)", err, exp.Events)
		}
		fmt.Printf("produced %d events to %s: expected events=%d amount=%d\n", exp.Events, opts.Topic, exp.Events, exp.Amount)
		return nil
	})
	return cmd
}

// eventFormat reads --format (produce, bench).
func eventFormat(s *settings) (event.Format, error) {
	f, err := event.ParseFormat(s.str("format"))
	if err != nil {
		return "", badConfig("format: %v", err)
	}
	return f, nil
}
