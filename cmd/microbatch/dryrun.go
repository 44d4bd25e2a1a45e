package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// dryRun prints what `run` would do with cfg: the checked settings, the
// servers reached, and each partition's stored position and first batch.
func dryRun(ctx context.Context, cfg strategies.Config) error {
	if len(cfg.Brokers) == 0 {
		check := cfg
		check.Brokers = []string{"embedded"}
		if err := check.Validate(); err != nil {
			return configError{err}
		}
		fmt.Println("dry run: settings OK; without --brokers, run starts the embedded demo broker and fills its topic")
		return nil
	}
	p, err := strategies.DryRun(ctx, cfg)
	if errors.Is(err, strategies.ErrConfig) || errors.Is(err, writers.ErrBadDSN) {
		return configError{err}
	}
	if err != nil {
		return err
	}
	fmt.Printf("dry run: settings OK, Kafka and the sink reached; nothing written\n")
	fmt.Printf("  strategy  %s (%s)\n", p.Strategy, p.Guarantee)
	fmt.Printf("  topic     %s at %s, %d partitions\n", p.Topic, strings.Join(cfg.Brokers, ","), len(p.Partitions))
	members := "no live members"
	if len(p.Members) > 0 {
		members = fmt.Sprintf("%d live members: %s", len(p.Members), strings.Join(p.Members, ", "))
	}
	fmt.Printf("  group     %s (%s)\n", p.Group, members)
	fmt.Printf("  sink      %s\n", p.Sink)
	if p.Note != "" {
		fmt.Printf("  note      %s\n", p.Note)
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\tstored\tlog start\tlog end\tfirst batch\t")
	for _, pp := range p.Partitions {
		stored := "-"
		if pp.Stored >= 0 {
			stored = fmt.Sprint(pp.Stored)
		}
		first := "nothing to read"
		switch {
		case pp.Stored > pp.End:
			first = "none: past the log end, run stops (exit 1; see offsets show)"
		case pp.Stored >= 0 && pp.Stored < pp.Start:
			first = "none: before the log start, run stops (exit 1; see offsets show)"
		case pp.To > pp.From:
			first = fmt.Sprintf("[%d, %d)", pp.From, pp.To)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t\n", pp.Partition, stored, pp.Start, pp.End, first)
	}
	return tw.Flush()
}
