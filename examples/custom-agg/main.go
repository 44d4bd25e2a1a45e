// Command custom-agg runs a user-defined job with the `txn` strategy: per
// minute of event time and per key, the number of events and their amount
// sum, added to the program's own table:
//
//	go run ./examples/custom-agg -brokers localhost:9092 -topic events \
//	    -sink sqlite://custom-agg.db
//
// The input is the built-in events ({"id","key","amount","ts"}, ts in unix
// milliseconds). Each partition's rows of a micro-batch commit in one
// transaction with the partition's new offset, so after any crash and
// restart every event is counted in its minute exactly once. Records that
// are not events go to mb_dead_letters.
//
// It stops once the topic has been consumed and stayed idle for -idle,
// and prints one line per committed batch.
package main

import (
	"context"
	"encoding/json"
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
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// event is what decode makes of a record.
type event struct {
	Key    string `json:"key"`
	Amount int64  `json:"amount"`
	TS     int64  `json:"ts"` // unix milliseconds
}

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka bootstrap brokers, comma separated")
	topic := flag.String("topic", "events", "topic to read")
	sink := flag.String("sink", "sqlite://custom-agg.db", "SQL sink DSN (mysql://… or sqlite://…)")
	job := flag.String("job", "custom-agg", "job name: offsets are stored per job")
	table := flag.String("table", "minute_totals", "table to add the per-minute totals to (created if missing)")
	maxBatch := flag.Int64("max-batch", 0, "most records per partition and batch (0: the default)")
	interval := flag.Duration("interval", 0, "time between batches (0: the default)")
	idle := flag.Duration("idle", 2*time.Second, "stop once the topic was consumed and idle this long")
	instance := flag.String("instance-id", "", "static group membership: a restart with the same id gets its partitions back at once, instead of after the session timeout of the process it replaces")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *brokers, *topic, *sink, *job, *table, *instance, *maxBatch, *interval, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "custom-agg:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, brokers, topic, sink, job, table, instance string, maxBatch int64, interval, idle time.Duration) error {
	u := writers.Upsert{
		Table:  table,
		Keys:   []string{"window_start", "event_key"},
		Values: []string{"events", "amount"},
		Merge:  writers.MergeAdd, // a batch's rows are added to what is there
	}
	if err := createTable(ctx, sink, u); err != nil {
		return err
	}
	const minute = int64(time.Minute / time.Millisecond)
	transform := strategies.NewTransform(u,
		// decode: one record into an event; an error dead-letters it.
		func(rec *batch.Record) (event, error) {
			var ev event
			if err := json.Unmarshal(rec.Value, &ev); err != nil {
				return ev, err
			}
			if ev.Key == "" || ev.TS <= 0 {
				return ev, errors.New("event without key or ts")
			}
			return ev, nil
		},
		// rows: a partition's events of one batch, summed per (minute, key).
		// Deterministic, as it must be: a retried batch calls it again.
		func(evs []event) [][]any {
			type win struct {
				start int64
				key   string
			}
			sums := map[win][2]int64{}
			var order []win
			for _, ev := range evs {
				w := win{ev.TS - ev.TS%minute, ev.Key}
				s, ok := sums[w]
				if !ok {
					order = append(order, w)
				}
				sums[w] = [2]int64{s[0] + 1, s[1] + ev.Amount}
			}
			rows := make([][]any, 0, len(order))
			for _, w := range order {
				rows = append(rows, []any{w.start, w.key, sums[w][0], sums[w][1]})
			}
			return rows
		})

	res, err := strategies.Run(ctx, strategies.Config{
		Strategy:        strategies.StrategyTxn,
		Brokers:         strings.Split(brokers, ","),
		Topic:           topic,
		Job:             job,
		Sink:            sink,
		Transform:       transform,
		MaxBatchRecords: maxBatch,
		Interval:        interval,
		UntilIdle:       idle,
		Group:           strategies.GroupConfig{InstanceID: instance},
		OnProgress: func(p batch.Progress) {
			fmt.Printf("batch %d committed: %d records, %d dead letters, lag %d\n", p.BatchID, p.Records, p.DeadLetters, p.Lag)
		},
		CrashPoint: crashHook(),
	})
	if err != nil {
		return err
	}
	fmt.Printf("done: %d batches, %d records, %d dead letters\n", res.Batches, res.Records, res.DeadLetters)
	return nil
}

// crashHook reads CUSTOM_AGG_CRASH_AT=<point>:<n>. TEST HOOK, not for
// production: the process SIGKILLs itself the n-th time the strategy
// reaches crash point <point> (strategies.CrashPoints, e.g.
// after-write-before-offsets: a partition's rows written in its open
// transaction, its offset not). examples_test.go uses it to show that the
// restart counts every event once. Without the variable: nil.
func crashHook() func(string) {
	point, count, _ := strings.Cut(os.Getenv("CUSTOM_AGG_CRASH_AT"), ":")
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

// createTable creates the job's table if missing: Run doesn't, the table
// is the user's. The statement works on MySQL/MariaDB and SQLite.
func createTable(ctx context.Context, sink string, u writers.Upsert) error {
	if err := u.Validate(); err != nil {
		return err
	}
	w, err := sqlsink.Open(ctx, sink)
	if err != nil {
		return err
	}
	defer w.Close()
	_, err = w.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+u.Table+` (
  window_start BIGINT NOT NULL,
  event_key VARCHAR(255) NOT NULL,
  events BIGINT NOT NULL,
  amount BIGINT NOT NULL,
  PRIMARY KEY (window_start, event_key))`)
	if err != nil {
		return fmt.Errorf("creating %s: %w", u.Table, err)
	}
	return nil
}
