package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// offsetsTimeout bounds one show or reset once Kafka and the sink answer: a
// handful of round trips. The waits for them to answer (--connect-timeout
// each) come on top: see offsetsJob.timeout.
const offsetsTimeout = 60 * time.Second

// offsetsCmd is `microbatch offsets`: where a job stands in its topic (show), and moving
// a stopped job elsewhere (reset). The positions live where the strategy
// keeps them: mb_offsets in a SQL sink (txn, single), the offsets hash in
// Redis (idempotent), the consumer group's committed offsets (the
// at-least-once and at-most-once controls). Checkpoint mode keeps them in
// its checkpoints, which this command does not touch.
func offsetsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "offsets",
		Short: "Show a job's stored offsets and lag, or reset a stopped job to other offsets",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(offsetsShowCmd(), offsetsResetCmd())
	return cmd
}

func addOffsetsFlags(fs *pflag.FlagSet) {
	fs.String("brokers", "", "Kafka bootstrap brokers, comma separated (required)")
	markList(fs, "brokers")
	fs.String("topic", strategies.DefaultTopic, "the job's topic (with --sql or --sql-file: the query's FROM; if given, it must agree)")
	addSQLFlags(fs, "the SQL job (as given to run --sql): its FROM names the topic")
	fs.String("job", strategies.DefaultJob, "job name")
	fs.String("sink", defaultSink, "the job's sink DSN (mysql://…, sqlite://path, redis://host:port/db)")
	fs.String("strategy", "", "strategy the job runs with: txn, single, idempotent, at-least-once, at-most-once (empty: idempotent for redis://, else txn)")
	fs.String("group", "", "the job's Kafka consumer group (empty: the job name)")
	addKafkaSecurityFlags(fs)
	addSinkSecurityFlags(fs)
	addConnectTimeoutFlag(fs)
}

func offsetsShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print each partition's stored next offset, epoch and batch, the log's end and the lag",
		Args:  cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	addOffsetsFlags(fs)
	fs.Bool("json", false, "print JSON instead of a table")
	cmd.RunE = classified(func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		oj, err := offsetsJobFrom(s)
		if err != nil {
			return err
		}
		asJSON, err := s.boolean("json")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), oj.timeout())
		defer cancel()
		k, err := openTopic(ctx, oj)
		if err != nil {
			return err
		}
		defer k.close()
		store, err := openOffsetStore(ctx, oj, k.client)
		if err != nil {
			return err
		}
		defer store.Close()
		stored, err := store.load(ctx, k.src.Partitions())
		if err != nil {
			return err
		}
		bounds, err := k.src.Bounds(ctx)
		if err != nil {
			return fmt.Errorf("reading offsets of topic %q: %w", oj.topic, err)
		}
		rep := newOffsetsReport(oj, store.String(), k.src.Partitions(), stored, bounds)
		if asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		rep.print(cmd.OutOrStdout())
		return nil
	})
	return cmd
}

func offsetsResetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Move a stopped job to other offsets (refused while the job's consumer group has live members)",
		Long: `Move a stopped job to other offsets: earliest, latest, an offset, or the first
offset at or after an RFC 3339 time. Refused while the job's consumer group
(--group) has live members. The reset partitions get a new epoch, so a
process of the old run still alive somewhere is fenced on them; the next
run reads from the new offsets. A rewind counts the records again.

--empty-table TABLE starts a SQL job's table over (txn and single): in
one transaction it deletes the table's rows, its owner record
(mb_sql_tables), the job's dead letters on the topic, and moves every
partition to --to (earliest: the next run recomputes the table from the
start). The table must be the job's or have no owner.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	addOffsetsFlags(fs)
	fs.String("to", "", "earliest, latest, an offset (e.g. 1500) or an RFC 3339 time (e.g. 2026-11-30T10:00:00Z) (required)")
	fs.StringSlice("partitions", nil, "partitions to reset, comma separated (empty: all); command line only: in a config file or MICROBATCH_PARTITIONS, partitions is the partition count of produce, broker and bench")
	markCommandLineOnly(fs, "partitions")
	fs.String("empty-table", "", "a SQL job's table to empty in the same transaction, with its owner record and the job's dead letters (txn, single; every partition)")
	markCommandLineOnly(fs, "empty-table")
	cmd.RunE = classified(func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		oj, err := offsetsJobFrom(s)
		if err != nil {
			return err
		}
		to, err := parseResetTarget(s.str("to"))
		if err != nil {
			return err
		}
		var only []int32
		for _, raw := range s.list("partitions") {
			n, err := strconv.ParseInt(raw, 10, 32)
			if err != nil || n < 0 {
				return badConfig("partitions: %q is not a partition number", raw)
			}
			only = append(only, int32(n))
		}
		emptyTable := s.str("empty-table")
		if emptyTable != "" {
			if len(only) > 0 {
				return badConfig("empty-table: resets every partition; leave --partitions out")
			}
			if oj.strategy == strategies.StrategyIdempotent {
				return badConfig("empty-table: on Redis a SQL job's rows are the job's own (mb:{job}:rows:…): run the new query with a new --job")
			}
			if oj.strategy != strategies.StrategyTxn && oj.strategy != strategies.StrategySingle {
				return badConfig("empty-table: strategy %s keeps its positions outside the SQL sink, so the table can't be emptied with them in one transaction (txn and single only): INSERT INTO a new table with a new --job instead", oj.strategy)
			}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), oj.timeout())
		defer cancel()
		k, err := openTopic(ctx, oj)
		if err != nil {
			return err
		}
		defer k.close()
		parts := k.src.Partitions()
		if len(only) > 0 {
			for _, p := range only {
				if !slices.Contains(parts, p) {
					return badConfig("partitions: topic %q has no partition %d (it has %d)", oj.topic, p, len(parts))
				}
			}
			parts = only
		}
		targets, err := to.resolve(ctx, k, parts)
		if err != nil {
			return err
		}
		if err := checkGroupStopped(k.client, oj); err != nil {
			return err
		}
		store, err := openOffsetStore(ctx, oj, k.client)
		if err != nil {
			return err
		}
		defer store.Close()
		var emptied int64
		if emptyTable != "" {
			store.(*sqlStore).emptyTable, store.(*sqlStore).emptied = emptyTable, &emptied
		}
		epoch, changes, err := store.reset(ctx, targets)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "job %s, topic %s in %s (strategy %s): reset to %s", oj.job, oj.topic, store.String(), oj.strategy, to)
		if epoch > 0 {
			fmt.Fprintf(out, ", epoch %d", epoch)
		}
		fmt.Fprintln(out)
		if emptyTable != "" {
			fmt.Fprintf(out, "  table %s emptied (%d rows deleted), with its owner record and the job's dead letters on the topic\n", emptyTable, emptied)
		}
		for _, c := range changes {
			old := "(none)"
			if c.HadRow {
				old = strconv.FormatInt(c.Old, 10)
			}
			note := ""
			if c.HadRow && c.Old == c.New {
				note = " (unchanged)"
			}
			fmt.Fprintf(out, "  %d: %s → %d%s\n", c.Partition, old, c.New, note)
		}
		return nil
	})
	return cmd
}

// offsetsJob is what both subcommands are about.
type offsetsJob struct {
	job, topic, group, sink string
	strategy                strategies.Strategy
	query                   *sqljob.Query // the SQL job whose FROM named topic; nil: --topic did
	brokers                 []string
	kafka                   kafkautil.Security
	connectTimeout          time.Duration
}

// timeout bounds a show or reset: up to the connect timeout for Kafka and
// again for the sink, then offsetsTimeout.
func (oj offsetsJob) timeout() time.Duration { return 2*oj.connectTimeout + offsetsTimeout }

func offsetsJobFrom(s *settings) (offsetsJob, error) {
	oj := offsetsJob{job: s.str("job"), topic: s.str("topic"), group: s.str("group"), sink: s.str("sink"),
		brokers: kafkautil.SplitBrokers(s.str("brokers"))}
	if len(oj.brokers) == 0 {
		return oj, badConfig("brokers: needed (the job's Kafka; the embedded demo broker is not supported here)")
	}
	var err error
	if oj.connectTimeout, err = s.duration("connect-timeout"); err != nil {
		return oj, err
	}
	if oj.kafka, err = kafkaSecurity(s); err != nil {
		return oj, err
	}
	if oj.sink, err = sinkDSN(s, oj.sink); err != nil {
		return oj, err
	}
	if oj.group == "" {
		oj.group = oj.job
	}
	if err := strategies.CheckSink(oj.sink); err != nil {
		return oj, configError{fmt.Errorf("sink: %w", err)}
	}
	redisSink := strings.HasPrefix(oj.sink, "redis://") || strings.HasPrefix(oj.sink, "rediss://")
	oj.strategy = strategies.Strategy(s.str("strategy"))
	switch oj.strategy {
	case "":
		oj.strategy = strategies.StrategyTxn
		if redisSink {
			oj.strategy = strategies.StrategyIdempotent
		}
	case strategies.StrategyCheckpoint:
		return oj, badConfig("strategy: checkpoint mode keeps its positions in its checkpoints (--state-dir), not in the sink; offsets can't show or move them")
	default:
		if !slices.Contains(strategies.Strategies, oj.strategy) {
			return oj, badConfig("strategy: %q is not one of %s", oj.strategy, strings.Join(names(strategies.Strategies), ", "))
		}
	}
	if redisSink != (oj.strategy == strategies.StrategyIdempotent) {
		return oj, badConfig("strategy %s does not go with sink %s (idempotent is the Redis strategy, the others write SQL)", oj.strategy, redact.DSN(oj.sink))
	}
	if _, err := sqlsink.ParseDSN(oj.sink); err != nil && !redisSink {
		return oj, configError{fmt.Errorf("sink: %w", err)}
	}
	if oj.query, err = compileSQL(s, oj.strategy, oj.sink); err != nil {
		return oj, err
	}
	if oj.topic = commandTopic(s, oj.query); oj.job == "" || oj.topic == "" {
		return oj, badConfig("job and topic must not be empty")
	}
	return oj, nil
}

// topicConn is a Kafka client and the job's topic.
type topicConn struct {
	client sarama.Client
	src    *batch.KafkaSource
	topic  string
}

// openTopic connects to Kafka, waiting up to the connect timeout for it to
// answer, and opens the job's topic.
func openTopic(ctx context.Context, oj offsetsJob) (*topicConn, error) {
	conf, err := oj.kafka.Config("microbatch-offsets")
	if err != nil {
		return nil, configError{err}
	}
	var client sarama.Client
	if err := strategies.Connect(ctx, oj.connectTimeout, func(context.Context) (err error) {
		client, err = oj.kafka.NewClient(oj.brokers, conf)
		return err
	}); err != nil {
		return nil, err
	}
	src, err := batch.NewKafkaSource(client, oj.topic)
	if err != nil {
		client.Close()
		return nil, explainNoTopic(err, oj.query)
	}
	return &topicConn{client: client, src: src, topic: oj.topic}, nil
}

func (k *topicConn) close() {
	_ = k.src.Close()
	_ = k.client.Close()
}

// checkGroupStopped refuses a reset while the job's consumer group has
// members: a running process would go on from where it is (and be fenced
// by the reset's epoch at its next commit, then start again from the new
// offsets — a surprise either way).
func checkGroupStopped(client sarama.Client, oj offsetsJob) error {
	members, err := strategies.GroupMembers(client, oj.group)
	if err != nil {
		return fmt.Errorf("describing consumer group %q: %w", oj.group, err)
	}
	var live []string
	for id, m := range members {
		desc := fmt.Sprintf("%s (member %s from %s", m.ClientId, id, m.ClientHost)
		if m.GroupInstanceId != nil && *m.GroupInstanceId != "" {
			desc += ", instance id " + *m.GroupInstanceId
		}
		live = append(live, desc+")")
	}
	if len(live) == 0 {
		return nil
	}
	slices.Sort(live)
	return fmt.Errorf("job %s is not stopped: consumer group %q has live members: %s; stop them first (a process killed without a graceful stop stays a member until its session times out)",
		oj.job, oj.group, strings.Join(live, ", "))
}

// resetTarget is a parsed --to.
type resetTarget struct {
	kind   string // "earliest", "latest", "offset", "time"
	offset int64
	at     time.Time
}

func (t resetTarget) String() string {
	switch t.kind {
	case "offset":
		return "offset " + strconv.FormatInt(t.offset, 10)
	case "time":
		return t.at.Format(time.RFC3339Nano)
	}
	return t.kind
}

func parseResetTarget(raw string) (resetTarget, error) {
	switch raw {
	case "":
		return resetTarget{}, badConfig("to: needed: earliest, latest, an offset or an RFC 3339 time")
	case "earliest", "latest":
		return resetTarget{kind: raw}, nil
	}
	if n, err := strconv.ParseInt(strings.ReplaceAll(raw, "_", ""), 10, 64); err == nil {
		if n < 0 {
			return resetTarget{}, badConfig("to: offset %d is negative", n)
		}
		return resetTarget{kind: "offset", offset: n}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return resetTarget{}, badConfig("to: %q is not earliest, latest, an offset or an RFC 3339 time (e.g. 2026-11-30T10:00:00Z)", raw)
	}
	return resetTarget{kind: "time", at: at}, nil
}

// resolve turns the target into an offset per partition, within the log:
// [log start, last stable offset].
func (t resetTarget) resolve(ctx context.Context, k *topicConn, parts []int32) (map[int32]int64, error) {
	bounds, err := k.src.Bounds(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading offsets of topic %q: %w", k.topic, err)
	}
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		b := bounds[p]
		switch t.kind {
		case "earliest":
			out[p] = b.Start
		case "latest":
			out[p] = b.End
		case "offset":
			if t.offset < b.Start || t.offset > b.End {
				return nil, badConfig("to: offset %d is outside partition %d's log [%d, %d]", t.offset, p, b.Start, b.End)
			}
			out[p] = t.offset
		case "time":
			// The first offset whose timestamp is at or after t; -1 if
			// there is none: everything is older, start at the end.
			off, err := k.client.GetOffset(k.topic, p, t.at.UnixMilli())
			if err != nil {
				return nil, fmt.Errorf("finding the offset of %s in %s/%d: %w", t, k.topic, p, err)
			}
			if off < 0 || off > b.End {
				off = b.End
			}
			out[p] = max(off, b.Start)
		}
	}
	return out, nil
}

// storedPosition is a partition's progress in the job's store.
type storedPosition struct {
	next, epoch, batch int64
	hasEpoch, hasBatch bool
	pending            string
}

// offsetStore is where the strategy keeps a job's positions.
type offsetStore interface {
	String() string
	Close() error
	load(ctx context.Context, parts []int32) (map[int32]storedPosition, error)
	// reset moves the partitions; epoch is 0 where the store has none.
	reset(ctx context.Context, to map[int32]int64) (epoch int64, changes []offsets.Change, err error)
}

// openOffsetStore opens where the job's positions are, waiting up to the
// connect timeout for the sink to answer.
func openOffsetStore(ctx context.Context, oj offsetsJob, client sarama.Client) (offsetStore, error) {
	switch oj.strategy {
	case strategies.StrategyIdempotent:
		var r *redissink.Sink
		if err := strategies.Connect(ctx, oj.connectTimeout, func(actx context.Context) (err error) {
			r, err = redissink.Open(actx, oj.sink)
			return err
		}); err != nil {
			return nil, err
		}
		j, err := r.Job(oj.job)
		if err != nil {
			r.Close()
			return nil, err
		}
		return &redisStore{Sink: r, job: j, topic: oj.topic}, nil
	case strategies.StrategyAtLeastOnce, strategies.StrategyAtMostOnce:
		return &groupStore{g: offsets.NewKafkaGroup(client, oj.group, oj.topic), group: oj.group}, nil
	}
	// Opening a missing SQLite file would create an empty one.
	if target, err := sqlsink.ParseDSN(oj.sink); err == nil && target.File != "" {
		if _, err := os.Stat(target.File); err != nil {
			return nil, fmt.Errorf("sink %s: %w", target.Display, err)
		}
	}
	var w *sqlsink.Writer
	if err := strategies.Connect(ctx, oj.connectTimeout, func(actx context.Context) (err error) {
		w, err = sqlsink.Open(actx, oj.sink)
		return err
	}); err != nil {
		return nil, err
	}
	return &sqlStore{Writer: w, job: oj.job, topic: oj.topic}, nil
}

type redisStore struct {
	*redissink.Sink
	job   *redissink.Job
	topic string
}

func (s *redisStore) load(ctx context.Context, _ []int32) (map[int32]storedPosition, error) {
	pos, err := s.job.Positions(ctx, s.topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]storedPosition, len(pos))
	for p, r := range pos {
		sp := storedPosition{next: r.NextOffset, epoch: r.Epoch, hasEpoch: true}
		switch {
		case r.Logged != nil && r.Pending:
			sp.pending = fmt.Sprintf("batch %d [%d, %d) not folded yet", r.Logged.BatchID, r.Logged.From, r.Logged.To)
		case r.Logged != nil && r.NextOffset == r.Logged.To:
			sp.batch, sp.hasBatch = r.Logged.BatchID, true
		}
		out[p] = sp
	}
	return out, nil
}

func (s *redisStore) reset(ctx context.Context, to map[int32]int64) (int64, []offsets.Change, error) {
	return s.job.ResetOffsets(ctx, s.topic, to)
}

// groupStore is the controls' store: the consumer group's committed
// offsets. They have no epochs, and a reset commits partition by
// partition, not atomically.
type groupStore struct {
	g     *offsets.KafkaGroup
	group string
}

func (s *groupStore) String() string { return "consumer group " + strconv.Quote(s.group) }

func (s *groupStore) Close() error { return nil }

func (s *groupStore) load(ctx context.Context, parts []int32) (map[int32]storedPosition, error) {
	committed, err := s.g.Load(ctx, parts)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]storedPosition, len(committed))
	for p, off := range committed {
		out[p] = storedPosition{next: off}
	}
	return out, nil
}

func (s *groupStore) reset(ctx context.Context, to map[int32]int64) (int64, []offsets.Change, error) {
	parts := make([]int32, 0, len(to))
	for p := range to {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	old, err := s.load(ctx, parts)
	if err != nil {
		return 0, nil, err
	}
	changes := make([]offsets.Change, 0, len(parts))
	for _, p := range parts {
		if err := s.g.Commit(ctx, p, to[p]); err != nil {
			return 0, changes, err
		}
		o, had := old[p]
		changes = append(changes, offsets.Change{Partition: p, Old: o.next, HadRow: had, New: to[p]})
	}
	return 0, changes, nil
}

// offsetsReport is `offsets show`'s answer; --json prints it as is.
type offsetsReport struct {
	Job        string            `json:"job"`
	Topic      string            `json:"topic"`
	Sink       string            `json:"sink"`
	Strategy   string            `json:"strategy"`
	Partitions []partitionReport `json:"partitions"`
	Lag        int64             `json:"lag"`
	// Note says what a run does when the job has no stored position at
	// all.
	Note string `json:"note,omitempty"`
}

// partitionReport: null next_offset for a partition the job has no
// position for yet; its lag is then the whole log (a run starts it at its
// earliest offset, or a new job at --start-from). Status says whether a
// run can go on from the position: "ok", "none" (no position),
// "past_end" or "before_start" (outside the log: a run stops, Note says
// what to do).
type partitionReport struct {
	Partition  int32  `json:"partition"`
	NextOffset *int64 `json:"next_offset"`
	Epoch      *int64 `json:"epoch"`
	BatchID    *int64 `json:"batch_id"`
	LogStart   int64  `json:"log_start"`
	LogEnd     int64  `json:"log_end"`
	Lag        int64  `json:"lag"`
	Pending    string `json:"pending,omitempty"`
	Status     string `json:"status"`
	Note       string `json:"note,omitempty"`
}

// Partition statuses of offsets show.
const (
	posOK          = "ok"
	posNone        = "none"
	posPastEnd     = "past_end"
	posBeforeStart = "before_start"
)

// newOffsetsReport puts the stored positions next to the log. What it
// says a run does with each position is what the driver does: it plans
// from the stored offset, and batch.Plan stops the run (exit 1) on one
// past the end (batch.ErrOffsetAhead) or before the start
// (batch.ErrDataLoss) of the partition's log; a partition without a
// position starts at its earliest offset, every partition of a job
// without any at --start-from (strategies' startRule).
func newOffsetsReport(oj offsetsJob, sink string, parts []int32, stored map[int32]storedPosition, bounds map[int32]batch.Bounds) offsetsReport {
	rep := offsetsReport{Job: oj.job, Topic: oj.topic, Sink: sink, Strategy: string(oj.strategy), Partitions: []partitionReport{}}
	if len(stored) == 0 {
		rep.Note = fmt.Sprintf("job %s has no stored positions: a run starts every partition at its earliest offset (--start-from earliest, the default; with --start-from latest at its log end, skipping what is there now); the lag counts the whole log",
			oj.job)
	}
	fix := func(p int32, to string) string {
		return fmt.Sprintf("microbatch offsets reset --to %s --partitions %d (with the job's --brokers, --topic, --job, --sink)", to, p)
	}
	for _, p := range parts {
		b := bounds[p]
		pr := partitionReport{Partition: p, LogStart: b.Start, LogEnd: b.End, Status: posOK}
		sp, ok := stored[p]
		switch {
		case !ok:
			pr.Status, pr.Lag = posNone, b.End-b.Start
			if len(stored) > 0 {
				pr.Note = "no stored position: a run starts it at its earliest offset"
			}
		case sp.next > b.End:
			pr.Status = posPastEnd
			pr.Note = fmt.Sprintf("next offset %d is past the log end %d (the topic was recreated, or the sink holds the job of another cluster): run stops with exit 1 (\"stored offset is past the end of the partition\") until the partition is moved: %s",
				sp.next, b.End, fix(p, "earliest|latest|<offset>"))
		case sp.next < b.Start:
			pr.Status, pr.Lag = posBeforeStart, b.End-sp.next
			pr.Note = fmt.Sprintf("next offset %d is before the log start %d (offsets %d..%d were deleted before the job read them): run stops with exit 1 (\"stored offset is before the log start\") until the partition is moved: %s skips the deleted records",
				sp.next, b.Start, sp.next, b.Start-1, fix(p, "earliest"))
		default:
			pr.Lag = b.End - sp.next
		}
		if ok {
			pr.NextOffset = &sp.next
			if sp.hasEpoch {
				pr.Epoch = &sp.epoch
			}
			if sp.hasBatch {
				pr.BatchID = &sp.batch
			}
			pr.Pending = sp.pending
		}
		rep.Lag += pr.Lag
		rep.Partitions = append(rep.Partitions, pr)
	}
	return rep
}

func (r offsetsReport) print(out io.Writer) {
	fmt.Fprintf(out, "job %s, topic %s in %s (strategy %s)\n", r.Job, r.Topic, r.Sink, r.Strategy)
	if r.Note != "" {
		fmt.Fprintln(out, r.Note)
	}
	fmt.Fprintf(out, "%9s %12s %6s %8s %12s %12s %10s\n", "partition", "next offset", "epoch", "batch", "log start", "log end", "lag")
	opt := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatInt(*v, 10)
	}
	var outside []partitionReport
	for _, p := range r.Partitions {
		line := fmt.Sprintf("%9d %12s %6s %8s %12d %12d %10d", p.Partition, opt(p.NextOffset), opt(p.Epoch), opt(p.BatchID), p.LogStart, p.LogEnd, p.Lag)
		switch p.Status {
		case posPastEnd:
			line += "  PAST THE LOG END"
			outside = append(outside, p)
		case posBeforeStart:
			line += "  BEFORE THE LOG START"
			outside = append(outside, p)
		case posNone:
			if p.Note != "" {
				line += "  " + p.Note
			}
		}
		if p.Pending != "" {
			line += "  " + p.Pending
		}
		fmt.Fprintln(out, line)
	}
	fmt.Fprintf(out, "total lag %d\n", r.Lag)
	for _, p := range outside {
		fmt.Fprintf(out, "partition %d: %s\n", p.Partition, p.Note)
	}
}
