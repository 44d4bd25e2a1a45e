package strategies_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// A user-defined job: page views counted per page into the program's own
// table, each partition's counts committed with its offsets (txn). The
// empty record is dead-lettered with the decoder's reason.
func ExampleNewTransform() {
	ctx := context.Background()
	// An in-process broker with a topic of page views (in production:
	// your Kafka).
	broker, err := devbroker.Start(devbroker.Options{Topics: []string{"views"}, Partitions: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()
	if err := send(broker.Addrs(), "views", "/home", "/pricing", "/home", "", "/about", "/home"); err != nil {
		fmt.Println(err)
		return
	}

	dir, _ := os.MkdirTemp("", "transform-example")
	defer os.RemoveAll(dir)
	sink := "sqlite://" + filepath.Join(dir, "views.db")
	w, err := sqlsink.Open(ctx, sink)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	if _, err := w.DB().ExecContext(ctx, `CREATE TABLE page_views (page TEXT PRIMARY KEY, views INTEGER NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	type view struct{ page string }
	views := strategies.NewTransform(
		writers.Upsert{Table: "page_views", Keys: []string{"page"}, Values: []string{"views"}, Merge: writers.MergeAdd},
		func(rec *batch.Record) (view, error) {
			if len(rec.Value) == 0 {
				return view{}, errors.New("empty page")
			}
			return view{page: string(rec.Value)}, nil // string() copies
		},
		func(vs []view) [][]any {
			n := map[string]int{}
			for _, v := range vs {
				n[v.page]++
			}
			rows := make([][]any, 0, len(n))
			for page, c := range n {
				rows = append(rows, []any{page, c})
			}
			return rows // sorted by the strategy before writing
		})

	res, err := strategies.Run(ctx, strategies.Config{
		Strategy: strategies.StrategyTxn, Brokers: broker.Addrs(), Topic: "views",
		Job: "page-views", Sink: sink, Transform: views,
		Interval: 200 * time.Millisecond, UntilIdle: time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d records, %d dead letter\n", res.Records, res.DeadLetters)
	rows, _ := w.DB().QueryContext(ctx, `SELECT page, views FROM page_views ORDER BY page`)
	defer rows.Close()
	for rows.Next() {
		var page string
		var n int
		_ = rows.Scan(&page, &n)
		fmt.Println(page, n)
	}
	// Output:
	// 5 records, 1 dead letter
	// /about 1
	// /home 3
	// /pricing 1
}

func send(brokers []string, topic string, values ...string) error {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	for _, v := range values {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}); err != nil {
			return err
		}
	}
	return nil
}
