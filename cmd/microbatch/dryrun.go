package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
)

// dryRunJob is `run --dry-run`: a SQL job's plan (and, for a SQL sink,
// the run's table check, creating nothing), --metrics-addr checked by
// binding it for a moment, then the library's dry run reports.
func dryRunJob(ctx context.Context, s *settings, cfg strategies.Config, q *sqljob.Query) error {
	if q != nil {
		// First, as it needs nothing to connect (a topic not created yet
		// still shows its plan); printed only: the dry run creates
		// nothing, the table included.
		printSQLPlan(os.Stdout, q, cfg)
		if !isRedisDSN(cfg.Sink) {
			// The run's check, in the run's order: settings, then the
			// table (exit 2 with the reason when it does not fit).
			check := cfg
			if len(check.Brokers) == 0 {
				check.Brokers = []string{"embedded"}
			}
			if err := check.Validate(); err != nil {
				return configError{err}
			}
			note, err := checkSQLTable(ctx, q, cfg.Sink, cfg.ConnectTimeout)
			if err != nil {
				return err
			}
			fmt.Printf("  table check: %s\n", note)
		}
	}
	check := cfg
	check.Logger = nil
	stop, err := startStatus(s, &check)
	if err != nil {
		return err
	}
	stop()
	if err := dryRun(ctx, cfg); err != nil || q == nil || isRedisDSN(cfg.Sink) {
		return err
	}
	// Last, as in the run: the strategy claims the table once Kafka and
	// the topic answered.
	return checkSQLClaim(ctx, q, cfg.Job, cfg.Sink, cfg.ConnectTimeout)
}

// printSQLPlan prints a SQL job's plan as its sink keeps it: a SQL table
// (its DDL), or with a redis:// sink the hashes the job writes, one per
// value column, and the integer-sums rule.
func printSQLPlan(w io.Writer, q *sqljob.Query, cfg strategies.Config) {
	fmt.Fprintf(w, "SQL job: %s\n", q.SQL())
	if !isRedisDSN(cfg.Sink) {
		fmt.Fprint(w, indent(q.Plan(), "  "))
		return
	}
	// Plan's head (topic, fields read, filter, key) holds for every sink;
	// its table, columns and DDL are SQL's.
	head, _, _ := strings.Cut(q.Plan(), "columns:\n")
	for _, line := range strings.SplitAfter(head, "\n") {
		if line != "" && !strings.HasPrefix(line, "table:") {
			fmt.Fprint(w, "  "+line)
		}
	}
	var keys []string
	for _, c := range q.Columns() {
		if c.Key {
			keys = append(keys, c.Name)
		}
	}
	field := "the value of " + keys[0] + " as text"
	if len(keys) > 1 {
		field = "the texts of " + strings.Join(keys, ", ") + ", each prefixed by its length in bytes and a colon (\"2:eu10:2026-11-30\")"
	}
	for _, c := range q.Columns() {
		if c.Key && c.Window > 0 {
			field += "; a window as its UTC start, " + sqljob.WindowLayout
		}
	}
	fmt.Fprintf(w, "  Redis hashes (table %s), one per value column: field = %s\n", q.Table(), field)
	for _, c := range q.Columns() {
		if c.Key {
			continue
		}
		rule := c.Rule()
		switch rule {
		case "add":
			rule = "merged by adding (HINCRBY: integers only)"
		case "least":
			rule = "merged by keeping the least (exact decimal)"
		case "greatest":
			rule = "merged by keeping the greatest (exact decimal)"
		}
		fmt.Fprintf(w, "    %-40s %-28s %s\n", redissink.RowsKey(cfg.Job, q.Table(), c.Name), c.Expr, rule)
	}
	if q.RowJob() {
		fmt.Fprintf(w, "  values: each key's latest record's, as text (HSET)%s\n", map[bool]string{true: "; a tombstone's key is removed from every hash (HDEL)"}[q.Tombstones()])
	} else {
		fmt.Fprintf(w, "  sums: integers only, exact at any size; a record whose SUM argument has digits after the point is dead-lettered (\"this sink sums integers only\"); MIN and MAX keep decimals exactly\n")
	}
	fmt.Fprintf(w, "  dead letters: mb:{%s}:dead:%s:<partition>, offset → dead letter; positions: %s (see docs/redis-layout.md)\n",
		cfg.Job, q.Topic(), redissink.OffsetsKey(cfg.Job))
}

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
	checkpoint := p.Strategy == strategies.StrategyCheckpoint
	stoppedHint := "see offsets show"
	firstCol := "first batch"
	if checkpoint {
		// Its positions are the newest complete checkpoint's, as a run's
		// restore reads them; a stream reads on from there.
		stoppedHint, firstCol = "see the checkpoints in --state-dir", "reads"
		switch {
		case p.StateDir == "":
			fmt.Printf("  state     memory: no checkpoint survives a run; a new job, each partition from --start-from\n")
		case p.Checkpoint == nil:
			fmt.Printf("  state     no checkpoint of job %s in %s: a new job, each partition from --start-from\n", cfg.Job, p.StateDir)
		default:
			fmt.Printf("  state     checkpoint %d of job %s in %s (taken %s): the run resumes from it\n",
				p.Checkpoint.ID, cfg.Job, p.StateDir, p.Checkpoint.Time.UTC().Format(time.RFC3339))
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "partition\tstored\tlog start\tlog end\t%s\t\n", firstCol)
	for _, pp := range p.Partitions {
		stored := "-"
		if pp.Stored >= 0 {
			stored = fmt.Sprint(pp.Stored)
		}
		first := "nothing to read"
		switch {
		case pp.Stored > pp.End:
			first = "none: past the log end, run stops (exit 1; " + stoppedHint + ")"
		case pp.Stored >= 0 && pp.Stored < pp.Start:
			first = "none: before the log start, run stops (exit 1; " + stoppedHint + ")"
		case pp.To > pp.From:
			first = fmt.Sprintf("[%d, %d)", pp.From, pp.To)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t\n", pp.Partition, stored, pp.Start, pp.End, first)
	}
	return tw.Flush()
}
