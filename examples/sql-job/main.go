// Command sql-job runs a SQL job from Go: one
// INSERT INTO <table> SELECT … FROM <topic> [WHERE …] GROUP BY … statement,
// compiled once by package sqljob and run by strategies.Run as a
// Transform, into a MySQL/MariaDB table it creates if missing:
//
//	go run ./examples/sql-job -brokers localhost:9092 \
//	    -sink 'mysql://user:pass@localhost:3306/analytics'
//
// The default statement counts the built-in events ({"id","key","amount",
// "ts"}, ts in unix milliseconds) per minute of event time and key, with
// their amount's sum, least and greatest; -sql runs any other. FROM names
// the topic. With the default `txn` strategy each partition's groups of a
// micro-batch are merged into the table (COUNT and SUM added, MIN and MAX
// kept least and greatest) in one transaction with the partition's new
// offset, so after any crash and restart every event is in its row exactly
// once. Records the query can't use go to mb_dead_letters with the reason.
//
// It prints the query's plan, one line per committed batch, and stops once
// the topic has been consumed and stayed idle for -idle. A query it can't
// run, or a sink other than MySQL/MariaDB, exits with status 2 before
// anything connects; other failures exit 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// defaultSQL is a windowed query over the built-in events. `key` is quoted:
// KEY is a reserved word in MySQL's grammar.
const defaultSQL = "INSERT INTO per_minute SELECT TUMBLE(ts, '1m') AS minute, `key`, " +
	"COUNT(*) AS events, SUM(amount) AS amount, MIN(amount) AS smallest, MAX(amount) AS largest " +
	"FROM events GROUP BY minute, `key`"

// usageError is a flag the program refuses before it starts (exit 2).
type usageError string

func (e usageError) Error() string { return string(e) }

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka bootstrap brokers, comma separated")
	sink := flag.String("sink", "", "MySQL/MariaDB sink, mysql://user:pass@host:3306/db (SQLite can't keep the exact sums)")
	job := flag.String("job", "sql-job", "job name: offsets are stored per job")
	sql := flag.String("sql", defaultSQL, "the job: INSERT INTO <table> SELECT … FROM <topic> [WHERE …] GROUP BY … (docs/sql-jobs.md)")
	strategy := flag.String("strategy", string(strategies.StrategyTxn), "delivery strategy: txn, single, checkpoint (exactly once); at-least-once, at-most-once (the controls)")
	maxBatch := flag.Int64("max-batch", 0, "most records per partition and batch (0: the default)")
	interval := flag.Duration("interval", 0, "time between batches (0: the default)")
	idle := flag.Duration("idle", 2*time.Second, "stop once the topic was consumed and idle this long")
	instance := flag.String("instance-id", "", "static group membership: a restart with the same id gets its partitions back at once, instead of after the session timeout of the process it replaces")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, config{
		brokers: *brokers, sink: *sink, job: *job, sql: *sql, strategy: *strategy, instance: *instance,
		maxBatch: *maxBatch, interval: *interval, idle: *idle,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sql-job:", err)
		if errors.As(err, new(usageError)) || errors.Is(err, sqljob.ErrQuery) || errors.Is(err, strategies.ErrConfig) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type config struct {
	brokers, sink, job, sql, strategy, instance string
	maxBatch                                    int64
	interval, idle                              time.Duration
}

func run(ctx context.Context, c config) error {
	if err := checkSink(c.sink); err != nil {
		return err
	}
	// Compiled once: a query microbatch can't run is refused here, with the
	// construct and its place, before anything connects.
	q, err := sqljob.Compile(c.sql, sqljob.Options{})
	if err != nil {
		return err
	}
	fmt.Print(q.Plan())
	if err := ensureTable(ctx, c.sink, q); err != nil {
		return err
	}

	res, err := strategies.Run(ctx, strategies.Config{
		Strategy:        strategies.Strategy(c.strategy),
		Brokers:         strings.Split(c.brokers, ","),
		Topic:           q.Topic(),
		Job:             c.job,
		Sink:            c.sink,
		Transform:       strategies.SQLTransform(q),
		MaxBatchRecords: c.maxBatch,
		Interval:        c.interval,
		UntilIdle:       c.idle,
		Group:           strategies.GroupConfig{InstanceID: c.instance},
		OnProgress: func(p batch.Progress) {
			fmt.Printf("batch %d committed: %d records, %d dead letters, lag %d\n", p.BatchID, p.Records, p.DeadLetters, p.Lag)
		},
		CrashPoint: crashHook(),
	})
	if err != nil {
		return err
	}
	fmt.Printf("done: %d batches, %d records, %d dead letters into %s\n", res.Batches, res.Records, res.DeadLetters, q.Table())
	return nil
}

// checkSink refuses what this program can't write a SQL job to: SQLite has
// no exact decimal type, so a sum with a fraction would be rounded there.
func checkSink(sink string) error {
	if sink == "" {
		return usageError("-sink: none given; want mysql://user:pass@host:3306/db")
	}
	t, err := sqlsink.ParseDSN(sink)
	if err != nil {
		return usageError("-sink: " + err.Error())
	}
	if t.Dialect != offsets.MySQL {
		return usageError("-sink " + t.Display + ": a SQL job needs MySQL/MariaDB (SQLite has no exact decimal type for its sums, MIN and MAX); want mysql://user:pass@host:3306/db")
	}
	return nil
}

// ensureTable creates the query's table if it is missing and checks an
// existing one (columns, types, primary key): Run doesn't create it.
func ensureTable(ctx context.Context, sink string, q *sqljob.Query) error {
	w, err := sqlsink.Open(ctx, sink)
	if err != nil {
		return fmt.Errorf("opening sink: %w", err)
	}
	defer w.Close()
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		return fmt.Errorf("preparing table %s: %w", q.Table(), err)
	}
	return nil
}

// crashHook reads SQL_JOB_CRASH_AT=<point>:<n>. TEST HOOK, not for
// production: the process SIGKILLs itself the n-th time the strategy
// reaches crash point <point> (strategies.CrashPoints, e.g.
// after-write-before-offsets: a partition's groups written in its open
// transaction, its offset not). examples_test.go uses it to show that the
// restart counts every event once. Without the variable: nil.
func crashHook() func(string) {
	point, count, _ := strings.Cut(os.Getenv("SQL_JOB_CRASH_AT"), ":")
	n, err := strconv.ParseInt(count, 10, 64)
	if point == "" || err != nil || n < 1 {
		return nil
	}
	var reached atomic.Int64 // called from several partition tasks at once
	return func(p string) {
		if p == point && reached.Add(1) == n {
			fmt.Printf("test hook: SIGKILL at %s (%d)\n", p, n)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
