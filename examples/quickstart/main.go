// Command quickstart runs the built-in per-key totals job with the `txn`
// strategy through the Go API instead of the CLI:
//
//	go run ./examples/quickstart -brokers localhost:9092 -topic events \
//	    -sink sqlite://quickstart.db
//
// It stops once the topic has been consumed and stayed idle for 2 seconds,
// and prints one line per committed batch.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/strategies"
)

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka bootstrap brokers, comma separated")
	topic := flag.String("topic", "events", "topic to read")
	sink := flag.String("sink", "sqlite://quickstart.db", "SQL sink DSN")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := strategies.Run(ctx, strategies.Config{
		Strategy:  strategies.StrategyTxn,
		Brokers:   strings.Split(*brokers, ","),
		Topic:     *topic,
		Job:       "quickstart",
		Sink:      *sink,
		UntilIdle: 2 * time.Second,
		OnProgress: func(p batch.Progress) {
			fmt.Printf("batch %d: %d records, lag %d\n", p.BatchID, p.Records, p.Lag)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
	fmt.Printf("done: %d batches, %d records, %d dead letters\n", res.Batches, res.Records, res.DeadLetters)
}
