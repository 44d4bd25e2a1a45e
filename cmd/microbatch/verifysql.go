package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// verify --sql: recompute a SQL job from Kafka and compare it with its
// sink, group by group.
//
// The job's committed positions are read where its strategy keeps them
// (as `offsets show` reads them; checkpoint mode: the newest checkpoint in
// --state-dir), the topic read-committed from each partition's log start
// up to them, and the query evaluated over those records in memory. That
// is what the sink must hold: every record before a committed position
// exactly once (at-least-once may hold some twice, at-most-once may miss
// some — which verify reports as differences; it judges by the result, not
// by the strategy's promise). Memory is one accumulator per group, never a
// record: the records are aggregated as they are read, the sink's rows
// compared as they are read (Redis: its hashes, one per value column).
//
// OK means all of: the job has positions (a job name that never ran, or a
// --strategy whose store is not where the job kept them, has none: nothing
// could be checked); the records the recomputation rejects are exactly
// those the sink holds dead letters for (count and partition/offset set);
// not every record read was rejected (a job that wrote only dead letters
// is not right, whatever its 0 groups match); and every group matches.

// sqlVerify is what verify --sql is about.
type sqlVerify struct {
	q        *sqljob.Query
	oj       offsetsJob // job, topic (the query's), group, sink, strategy, Kafka
	stateDir string     // checkpoint mode's checkpoints
	show     int
}

// sqlVerifySettings reads verify's settings for --sql.
func sqlVerifySettings(s *settings) (sqlVerify, error) {
	var v sqlVerify
	strategy, err := choice(s, "strategy", strategies.Strategies...)
	if err != nil {
		return v, err
	}
	dsn := s.str("sink")
	if dsn == "" {
		return v, badConfig("sink: verify --sql needs the job's --sink (mysql://…, or redis://… for --strategy idempotent)")
	}
	if err := strategies.CheckSink(dsn); err != nil {
		return v, configError{fmt.Errorf("sink: %w", err)}
	}
	// As offsets show: a Redis sink means the idempotent strategy unless
	// another is named.
	if isRedisDSN(dsn) && !s.given("strategy") {
		strategy = strategies.StrategyIdempotent
	}
	if s.given("expect-events") || s.given("expect-amount") {
		return v, badConfig("verify --sql recomputes what the sink must hold from Kafka: leave --expect-events and --expect-amount out (they are for the built-in job)")
	}
	if v.q, err = compileSQL(s, strategy, dsn); err != nil {
		return v, err
	}
	if strategy == strategies.StrategyIdempotent && !isRedisDSN(dsn) {
		return v, badConfig("strategy idempotent writes to Redis: want --sink redis://…")
	}
	if strategy != strategies.StrategyIdempotent && isRedisDSN(dsn) {
		return v, badConfig("sink: a redis:// sink goes with --strategy idempotent (strategy %s writes to SQL)", strategy)
	}
	show, err := s.int64("show")
	if err != nil {
		return v, err
	}
	v.show = int(min(show, 1<<20))
	v.oj = offsetsJob{job: s.str("job"), topic: v.q.Topic(), group: s.str("group"), strategy: strategy,
		brokers: kafkautil.SplitBrokers(s.str("brokers"))}
	if len(v.oj.brokers) == 0 {
		return v, badConfig("brokers: verify --sql reads the topic: give the job's --brokers")
	}
	if v.oj.job == "" {
		return v, badConfig("job: must not be empty")
	}
	if v.oj.group == "" {
		v.oj.group = v.oj.job
	}
	if strategy == strategies.StrategyCheckpoint {
		if v.stateDir = s.str("state-dir"); v.stateDir == "" {
			return v, badConfig("state-dir: checkpoint mode keeps its positions in its checkpoints: give the job's --state-dir")
		}
	}
	if v.oj.kafka, err = kafkaSecurity(s); err != nil {
		return v, err
	}
	if v.oj.sink, err = sinkDSN(s, dsn); err != nil {
		return v, err
	}
	if v.oj.connectTimeout, err = s.duration("connect-timeout"); err != nil {
		return v, err
	}
	return v, nil
}

// verifySQL is `verify --sql`: false when the sink differs.
func verifySQL(ctx context.Context, out io.Writer, v sqlVerify) (bool, error) {
	k, err := openTopic(ctx, v.oj)
	if err != nil {
		return false, err
	}
	defer k.close()
	next, where, err := v.positions(ctx, k)
	if err != nil {
		return false, err
	}
	nparts := len(k.src.Partitions())
	if len(next) == 0 {
		// Nothing to recompute: whatever the sink holds, it can't be
		// judged. Most often a --job or --strategy other than the run's.
		fmt.Fprintf(out, "job %s, table %s (strategy %s)\n", v.oj.job, v.q.Table(), v.oj.strategy)
		fmt.Fprintf(out, "FAIL: no positions found for job %q with strategy %s (%s): 0 of %d partitions, nothing was checked; check --job and --strategy%s (as given to run)\n",
			v.oj.job, v.oj.strategy, where, nparts, v.whereFlags())
		return false, nil
	}
	var (
		exp  expectation
		dl   *deadLetterMerge
		sink string
		// judge prints the rows' counts and listing: true when all match.
		judge func(io.Writer) bool
		okMsg string
	)
	if v.q.RowJob() {
		var c *rowsCheck
		if exp, c, sink, err = v.verifyRows(ctx, k, next); err != nil {
			return false, err
		}
		dl = c.dl
		judge, okMsg = c.print, fmt.Sprintf("all %d rows match", c.matching)
	} else {
		if exp, err = v.recompute(ctx, k, next); err != nil {
			return false, err
		}
		c := newComparison(v.q, exp.agg.Rows(), v.show)
		dl = newDeadLetterMerge(&exp.rejects, v.q.Topic(), exp.start)
		if sink, err = v.compareSink(ctx, c, dl, k.src.Partitions()); err != nil {
			return false, err
		}
		judge, okMsg = c.print, fmt.Sprintf("all %d groups match", c.matching)
	}
	dl.finish()
	fmt.Fprintf(out, "job %s, table %s in %s (strategy %s)\n", v.oj.job, v.q.Table(), sink, v.oj.strategy)
	fmt.Fprintf(out, "  %-18s %10d  (topic %s, from the log start up to the job's positions in %d of %d partitions)\n",
		"records read", exp.records, v.q.Topic(), len(next), nparts)
	fmt.Fprintf(out, "  %-18s %10d  (dead letters the sink holds for the job: %d)\n", "rejected", exp.rejects.n, dl.held)
	for _, n := range exp.notes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
	if dl.beforeStart > 0 {
		fmt.Fprintf(out, "  note: %d dead letters are of offsets deleted from the log: not compared\n", dl.beforeStart)
	}
	ok := judge(out)
	if p := dl.problem(); p != "" {
		ok = false
		fmt.Fprintf(out, "FAIL: %s\n", p)
	}
	if exp.records > 0 && exp.rejects.n == exp.records {
		ok = false
		fmt.Fprintf(out, "FAIL: every one of the %d records read was rejected (the first: %s): the job wrote nothing but dead letters; fix the query or the input\n",
			exp.records, exp.rejects.first)
	}
	switch {
	case !ok:
	case exp.records == 0:
		fmt.Fprintf(out, "OK: 0 records up to the job's positions, and the sink holds no row and no dead letter\n")
	default:
		fmt.Fprintf(out, "OK: %s\n", okMsg)
	}
	return ok, nil
}

// whereFlags names the other flags that say where the positions are.
func (v sqlVerify) whereFlags() string {
	switch v.oj.strategy {
	case strategies.StrategyCheckpoint:
		return " and --state-dir"
	case strategies.StrategyAtLeastOnce, strategies.StrategyAtMostOnce:
		return " and --group"
	}
	return ""
}

// positions returns the job's committed next offset per partition, and
// where they were read; a partition the job holds no position for is left
// out (nothing of it is in the sink).
func (v sqlVerify) positions(ctx context.Context, k *topicConn) (map[int32]int64, string, error) {
	if v.oj.strategy == strategies.StrategyCheckpoint {
		next, err := v.checkpointPositions(ctx)
		return next, "checkpoints in " + v.stateDir, err
	}
	store, err := openOffsetStore(ctx, v.oj, k.client)
	if err != nil {
		return nil, "", err
	}
	defer store.Close()
	stored, err := store.load(ctx, k.src.Partitions())
	if err != nil {
		return nil, "", fmt.Errorf("reading the positions of job %s: %w", v.oj.job, err)
	}
	next := make(map[int32]int64, len(stored))
	for p, sp := range stored {
		next[p] = sp.next
	}
	return next, store.String(), nil
}

// checkpointPositions reads the newest complete checkpoint: once its sink
// transactions are committed (the run does so before it ends, a restart
// first thing), the sink holds exactly the records before its offsets.
func (v sqlVerify) checkpointPositions(ctx context.Context) (map[int32]int64, error) {
	// NewFileCheckpoints creates a missing directory: check first.
	if _, err := os.Stat(v.stateDir); err != nil {
		return nil, badConfig("state-dir: %v", err)
	}
	store, err := offsets.NewFileCheckpoints(v.stateDir, 0)
	if err != nil {
		return nil, err
	}
	c, err := store.Latest(ctx, v.oj.job)
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoints of job %s in %s: %w", v.oj.job, v.stateDir, err)
	}
	if c == nil {
		return map[int32]int64{}, nil
	}
	if c.Topic != v.q.Topic() {
		return nil, badConfig("job %s's checkpoints in %s are of topic %q, the query reads %q", v.oj.job, v.stateDir, c.Topic, v.q.Topic())
	}
	return c.Offsets, nil
}

// expectation is the query recomputed from Kafka.
type expectation struct {
	agg     *sqljob.Aggregate
	records int64
	rejects rejections
	start   map[int32]int64 // each partition's log start
	notes   []string
}

// recompute reads each partition from its log start up to next and
// aggregates the records as the job does.
func (v sqlVerify) recompute(ctx context.Context, k *topicConn, next map[int32]int64) (expectation, error) {
	exp := expectation{agg: v.q.NewAggregate()}
	err := v.readJob(ctx, k, next, &exp, func(rec *batch.Record) error {
		return exp.agg.AddRecord(rec.Value, sqljob.Meta{Key: rec.Key, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp})
	})
	return exp, err
}

// readJob reads each partition from its log start up to next into add,
// counting the records in exp and the ones add rejects (a
// *sqljob.Rejection) as dead letters to expect.
func (v sqlVerify) readJob(ctx context.Context, k *topicConn, next map[int32]int64, exp *expectation, add func(*batch.Record) error) error {
	exp.start = map[int32]int64{}
	bounds, err := k.src.Bounds(ctx)
	if err != nil {
		return fmt.Errorf("reading offsets of topic %q: %w", v.q.Topic(), err)
	}
	for p, b := range bounds {
		exp.start[p] = b.Start
	}
	for _, p := range k.src.Partitions() {
		to, ok := next[p]
		if !ok {
			continue
		}
		b := bounds[p]
		if to > b.End {
			return fmt.Errorf("job %s's position %d in partition %d is past the topic's last stable offset %d: the sink holds a job of another topic or cluster (see offsets show)", v.oj.job, to, p, b.End)
		}
		if b.Start > 0 {
			exp.notes = append(exp.notes, fmt.Sprintf("partition %d: offsets before %d were deleted from the log; the recomputation can't count them", p, b.Start))
		}
		r := record.Range{Topic: v.q.Topic(), Partition: p, From: b.Start, To: to}
		err := k.src.Read(ctx, r, func(rec *batch.Record) error {
			exp.records++
			if err := add(rec); err != nil {
				if !sqljob.IsRejection(err) {
					return fmt.Errorf("partition %d offset %d: %w", p, rec.Offset, err)
				}
				exp.rejects.add(p, rec.Offset, err.Error())
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("reading %s: %w", r, err)
		}
	}
	return nil
}

// compareSink reads the sink's rows into c and its dead letters for the
// job into dl; it returns the sink's name.
func (v sqlVerify) compareSink(ctx context.Context, c *comparison, dl *deadLetterMerge, parts []int32) (string, error) {
	if isRedisDSN(v.oj.sink) {
		return v.compareRedis(ctx, c, dl, parts)
	}
	var w *sqlsink.Writer
	if err := strategies.Connect(ctx, v.oj.connectTimeout, func(actx context.Context) (err error) {
		w, err = sqlsink.Open(actx, v.oj.sink)
		return err
	}); err != nil {
		return "", err
	}
	defer w.Close()
	if err := v.compareMySQL(ctx, w, c); err != nil {
		return w.String(), err
	}
	return w.String(), v.sqlDeadLetters(ctx, w, dl)
}

// sqlDeadLetters streams the job's rows of mb_dead_letters into dl, in
// (topic, partition, offset) order.
func (v sqlVerify) sqlDeadLetters(ctx context.Context, w *sqlsink.Writer, dl *deadLetterMerge) error {
	rows, err := w.DB().QueryContext(ctx, `SELECT topic, part, off FROM mb_dead_letters WHERE job = ? ORDER BY topic, part, off`, v.oj.job)
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, "doesn't exist") || strings.Contains(msg, "no such table") || strings.Contains(msg, "does not exist") {
			return nil // no job ever ran here: no dead letters
		}
		return fmt.Errorf("reading the dead letters of job %s: %w", v.oj.job, err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic string
		var part int32
		var off int64
		if err := rows.Scan(&topic, &part, &off); err != nil {
			return fmt.Errorf("reading the dead letters of job %s: %w", v.oj.job, err)
		}
		dl.sink(topic, part, off)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the dead letters of job %s: %w", v.oj.job, err)
	}
	return nil
}

// compareMySQL reads the query's table row by row.
func (v sqlVerify) compareMySQL(ctx context.Context, w *sqlsink.Writer, c *comparison) error {
	cols := v.q.Columns()
	names := make([]string, 0, len(cols))
	pg := w.Dialect() == offsets.Postgres
	quote := func(n string) string { return quoteIn(w, n) }
	var keys []string
	for _, col := range cols {
		if col.Key {
			keys = append(keys, quote(col.Name))
		}
	}
	u := v.q.Upsert() // keys first, then values, as the rows are compared
	for i, n := range append(append([]string(nil), u.Keys...), u.Values...) {
		switch {
		case pg && i >= len(u.Keys) && !(u.Merges != nil && u.Merges[i-len(u.Keys)].Bytes()):
			// NUMERIC and BIGINT as the server's exact text (BYTEA as it is).
			names = append(names, quote(n)+"::text")
		default:
			names = append(names, quote(n))
		}
	}
	rows, err := w.DB().QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s ORDER BY %s",
		strings.Join(names, ", "), quote(v.q.Table()), strings.Join(keys, ", ")))
	if err != nil {
		return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
	}
	defer rows.Close()
	vals := make([]any, len(names))
	ptrs := make([]any, len(names))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	nk := len(u.Keys)
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
		}
		key := make([]any, nk)
		for i := range nk {
			switch x := vals[i].(type) {
			case []byte:
				key[i] = string(x)
			case time.Time: // a window's start, as sqljob's rows give it
				// The job wrote UTC text; the driver reads it as that wall
				// clock in the DSN's loc: its fields are the text, whatever loc.
				key[i] = x.Format(sqljob.WindowLayout)
			default:
				key[i] = x
			}
		}
		id, err := redissink.RowField(key)
		if err != nil {
			return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
		}
		c.sinkRow(id, showKey(key), vals[nk:])
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
	}
	c.finish(false)
	return nil
}

// compareRedis reads the job's hashes, one per value column: a group's
// value of a column is its field in that column's hash, NULL where it has
// none. A group whose values are all NULL has no field anywhere.
func (v sqlVerify) compareRedis(ctx context.Context, c *comparison, dl *deadLetterMerge, parts []int32) (string, error) {
	var r *redissink.Sink
	if err := strategies.Connect(ctx, v.oj.connectTimeout, func(actx context.Context) (err error) {
		r, err = redissink.Open(actx, v.oj.sink)
		return err
	}); err != nil {
		return "", err
	}
	defer r.Close()
	j, err := r.Job(v.oj.job)
	if err != nil {
		return r.String(), err
	}
	u := v.q.Upsert()
	// field -> the group's values; memory: the sink's groups.
	got := map[string][]any{}
	for ci, col := range u.Values {
		hash, err := j.Rows(ctx, u.Table, col)
		if err != nil {
			return r.String(), err
		}
		for f, val := range hash {
			vals := got[f]
			if vals == nil {
				vals = make([]any, len(u.Values))
				got[f] = vals
			}
			vals[ci] = val
		}
	}
	for f, vals := range got {
		c.sinkRow(f, strconv.Quote(f), vals)
	}
	c.finish(true)
	return r.String(), v.redisDeadLetters(ctx, j, dl, parts)
}

// redisDeadLetters streams the job's dead letters of the topic's
// partitions (mb:{job}:dead:…) into dl.
func (v sqlVerify) redisDeadLetters(ctx context.Context, j *redissink.Job, dl *deadLetterMerge, parts []int32) error {
	parts = slices.Sorted(slices.Values(parts))
	for _, p := range parts {
		offs, err := j.DeadLetterOffsets(ctx, v.q.Topic(), p)
		if err != nil {
			return err
		}
		for _, off := range offs {
			dl.sink(v.q.Topic(), p, off)
		}
	}
	return nil
}

// comparison holds the expected groups and what the sink's rows made of
// them.
type comparison struct {
	q                                   *sqljob.Query
	want                                [][]any // expected rows: keys, then values
	nk                                  int
	index                               map[string]int // RowField of the keys -> want's index
	seen                                []bool
	sinkRows                            int
	matching, missing, extra, different int
	listing
}

// difference is one line of the listing: a column that differs, or a
// whole group missing or extra (column "-").
type difference struct{ key, column, want, got string }

func newComparison(q *sqljob.Query, want [][]any, show int) *comparison {
	c := &comparison{q: q, want: want, nk: len(q.Upsert().Keys), index: make(map[string]int, len(want)), seen: make([]bool, len(want)), listing: listing{show: show}}
	for i, row := range want {
		id, err := redissink.RowField(row[:c.nk])
		if err != nil {
			panic(err) // a query's keys are strings or times: never
		}
		c.index[id] = i
	}
	return c
}

// listing is the differences verify lists: the first show of them, and
// how many more there were.
type listing struct {
	show  int
	diffs []difference
	more  int
}

func (l *listing) note(d difference) {
	if len(l.diffs) < l.show {
		l.diffs = append(l.diffs, d)
	} else {
		l.more++
	}
}

// print writes the listing under header (its columns, tab-separated).
func (l *listing) print(out io.Writer, header string) {
	if len(l.diffs) > 0 {
		tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
		fmt.Fprintln(tw, header)
		for _, d := range l.diffs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", d.key, d.column, d.want, d.got)
		}
		_ = tw.Flush()
	}
	if l.more > 0 {
		fmt.Fprintf(out, "  … and %d more (--show)\n", l.more)
	}
}

// sinkRow compares one group the sink holds: id is its RowField, key its
// text for people, vals its values in the order of the query's Upsert.
func (c *comparison) sinkRow(id, key string, vals []any) {
	c.sinkRows++
	i, ok := c.index[id]
	if !ok {
		c.extra++
		c.note(difference{key: key, column: "-", want: "(no such group)", got: "(row)"})
		return
	}
	c.seen[i] = true
	u := c.q.Upsert()
	same := true
	for j, val := range vals {
		want, got := sqljob.Canonical(c.want[i][c.nk+j]), sqljob.Canonical(val)
		if u.Merges != nil && u.Merges[j].Bytes() { // MIN/MAX of strings: the exact bytes ("1.50" is not "1.5")
			want, got = textValue(c.want[i][c.nk+j]), textValue(val)
		}
		if want != got {
			same = false
			c.note(difference{key: key, column: u.Values[j], want: showValue(want), got: showValue(got)})
		}
	}
	if same {
		c.matching++
	} else {
		c.different++
	}
}

// finish counts the expected groups the sink has no row for. With
// absentIsNull (Redis), one whose values are all NULL matches: such a group
// has no field in any hash.
func (c *comparison) finish(absentIsNull bool) {
	for i, seen := range c.seen {
		if seen {
			continue
		}
		allNull := true
		for _, v := range c.want[i][c.nk:] {
			allNull = allNull && v == nil
		}
		if absentIsNull && allNull {
			c.matching++
			continue
		}
		c.missing++
		c.note(difference{key: showKey(c.want[i][:c.nk]), column: "-", want: "(row)", got: "(no row)"})
	}
}

// print writes the counts and, if any group differs, a FAIL line and the
// listing; it reports whether every group matches (the OK line is the
// caller's, who judges more than the groups).
func (c *comparison) print(out io.Writer) bool {
	fmt.Fprintf(out, "  %-18s %10d\n", "groups recomputed", len(c.want))
	fmt.Fprintf(out, "  %-18s %10d\n", "groups in the sink", c.sinkRows)
	fmt.Fprintf(out, "  %-18s %10d\n", "matching", c.matching)
	fmt.Fprintf(out, "  %-18s %10d  (recomputed, not in the sink)\n", "missing", c.missing)
	fmt.Fprintf(out, "  %-18s %10d  (in the sink only)\n", "extra", c.extra)
	fmt.Fprintf(out, "  %-18s %10d\n", "different", c.different)
	bad := c.missing + c.extra + c.different
	if bad == 0 {
		return true
	}
	fmt.Fprintf(out, "FAIL: %d of %d groups differ (%d missing, %d extra, %d different)\n", bad, len(c.want)+c.extra, c.missing, c.extra, c.different)
	c.listing.print(out, "  key\tcolumn\twant\tgot")
	return false
}

// showKey is a group's key values for people: quoted (a window's start
// too, as sqljob.WindowLayout text), several in parentheses.
func showKey(keys []any) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		switch x := k.(type) {
		case string:
			parts[i] = strconv.Quote(x)
		default:
			parts[i] = fmt.Sprint(x)
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// showValue is a canonical value for people: NULL for none.
func showValue(v string) string {
	if v == "" {
		return "NULL"
	}
	return v
}

// textValue is a MIN/MAX text column's value for comparing: the string
// quoted (byte for byte), or NULL.
func textValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return strconv.Quote(string(x))
	case string:
		return strconv.Quote(x)
	}
	return fmt.Sprint(v)
}
