package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// Workload of the latency benchmark (issue #4).
const (
	latencyRate      = 10_000           // events/s produced while latency is measured
	latencyDuration  = 12 * time.Second // of steady production
	catchUpEvents    = 300_000          // pre-filled events for the throughput run
	visibilityPoll   = 10 * time.Millisecond
	latencyStartWait = 2 * time.Second // job warm-up before production starts
)

// BenchmarkLatency compares checkpoint mode with txn at the same
// intervals, on the same data, in one run: per-record latency from event
// time to visible to a read-committed reader (p50/p99) under a steady
// 10,000 events/s, and catch-up throughput on 300,000 pre-filled events.
// Run with -benchtime=1x; see README.md.
//
//   - txn → MariaDB and checkpoint → MariaDB (XA): a reader polls
//     SUM(events) of mb_totals every 10 ms; event k (produced at
//     start + k/rate) is visible once the sum reaches k.
//   - checkpoint → Kafka: a read-committed consumer of the output topic
//     takes now - ts of every output record.
func BenchmarkLatency(b *testing.B) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	mysql := testutil.NeedServer(b, testutil.EnvMySQL)
	for _, interval := range []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second} {
		for _, sink := range []string{"txn-mariadb", "checkpoint-xa-mariadb", "checkpoint-kafka"} {
			b.Run(fmt.Sprintf("%s/interval=%s", sink, interval), func(b *testing.B) {
				for range b.N {
					benchLatency(b, brokers, mysql, sink, interval)
				}
			})
		}
	}
}

func latencyConfig(brokers []string, mysql, kind, topic, job string, interval time.Duration, stateDir string) strategies.Config {
	cfg := strategies.Config{Brokers: brokers, Topic: topic, Job: job, Sink: mysql, UntilIdle: 500 * time.Millisecond}
	switch kind {
	case "txn-mariadb":
		cfg.Strategy, cfg.Interval = strategies.StrategyTxn, interval
	default:
		cfg.Strategy, cfg.CheckpointInterval, cfg.StateDir = strategies.StrategyCheckpoint, interval, stateDir
		cfg.CheckpointTimeout = 30 * time.Second
		if kind == "checkpoint-kafka" {
			cfg.Sink = fmt.Sprintf("kafka://%s/%s-out", brokers[0], topic)
		}
	}
	return cfg
}

func benchLatency(b *testing.B, brokers []string, mysql, kind string, interval time.Duration) {
	stamp := time.Now().UnixNano()
	// Throughput: drain a pre-filled topic.
	topic := fmt.Sprintf("bench-lat-%d", stamp)
	if err := kafkautil.EnsureTopic(brokers, topic, benchPartitions); err != nil {
		b.Fatal(err)
	}
	if _, err := kafkautil.Produce(context.Background(), kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: catchUpEvents, Keys: benchKeys, Seed: benchSeed}); err != nil {
		b.Fatal(err)
	}
	var records atomic.Int64
	var doneAt atomic.Int64
	cfg := latencyConfig(brokers, mysql, kind, topic, fmt.Sprintf("lat-tp-%d", stamp), interval, b.TempDir())
	cfg.OnProgress = func(p batch.Progress) {
		if records.Add(p.Records) >= catchUpEvents && doneAt.Load() == 0 {
			doneAt.Store(time.Now().UnixNano())
		}
	}
	start := time.Now()
	if _, err := strategies.Run(context.Background(), cfg); err != nil {
		b.Fatal(err)
	}
	if records.Load() != catchUpEvents {
		b.Fatalf("processed %d of %d", records.Load(), catchUpEvents)
	}
	rate := catchUpEvents / time.Duration(doneAt.Load()-start.UnixNano()).Seconds()

	// Latency: steady production into a fresh topic while the job runs.
	topic = fmt.Sprintf("bench-lat-live-%d", stamp)
	if err := kafkautil.EnsureTopic(brokers, topic, benchPartitions); err != nil {
		b.Fatal(err)
	}
	job := fmt.Sprintf("lat-live-%d", stamp)
	cfg = latencyConfig(brokers, mysql, kind, topic, job, interval, b.TempDir())
	cfg.UntilIdle = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobDone := make(chan error, 1)
	go func() {
		_, err := strategies.Run(ctx, cfg)
		jobDone <- err
	}()
	time.Sleep(latencyStartWait)
	total := int64(latencyRate * latencyDuration.Seconds())
	var lat []time.Duration
	var visible []time.Time
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if kind == "checkpoint-kafka" {
			lat = kafkaLatencies(b, brokers, topic+"-out", total)
		} else {
			visible = sqlVisibility(b, mysql, job, total)
		}
	}()
	prodStart := time.Now()
	if _, err := kafkautil.Produce(context.Background(), kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: total, Keys: benchKeys, Seed: benchSeed, Rate: latencyRate}); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	cancel()
	if err := <-jobDone; err != nil {
		b.Fatal(err)
	}
	// For SQL, counted from the production schedule (the reader only sees
	// sums; Produce paces event k to start + k/rate).
	for k, v := range visible {
		lat = append(lat, v.Sub(prodStart.Add(time.Duration(float64(k)/latencyRate*float64(time.Second)))))
	}
	slices.Sort(lat)
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(rate, "catchup_events/s")
	b.ReportMetric(p(0.50), "p50_ms")
	b.ReportMetric(p(0.99), "p99_ms")
	b.Logf("%s interval %s: catch-up %.0f events/s; latency p50 %.0f ms, p99 %.0f ms (%d records)", kind, interval, rate, p(0.5), p(0.99), len(lat))
}

// sqlVisibility polls the job's visible event count until it reaches total
// and returns, for event k, when the count first reached k+1.
func sqlVisibility(b *testing.B, dsn, job string, total int64) []time.Time {
	w := sinktest.OpenSQL(b, dsn)
	out := make([]time.Time, 0, total)
	deadline := time.Now().Add(latencyDuration + time.Minute)
	for int64(len(out)) < total {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d events visible", len(out), total)
		}
		var n int64
		if err := w.DB().QueryRow(`SELECT COALESCE(SUM(events), 0) FROM mb_totals WHERE job = ?`, job).Scan(&n); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		for int64(len(out)) < min(n, total) {
			out = append(out, now)
		}
		time.Sleep(visibilityPoll)
	}
	return out
}

// kafkaLatencies reads the output topic read-committed until total output
// records arrived and returns now - ts for each.
func kafkaLatencies(b *testing.B, brokers []string, topic string, total int64) []time.Duration {
	deadline := time.Now().Add(latencyDuration + time.Minute)
	// The job creates the output topic; wait for it.
	var client sarama.Client
	for {
		var err error
		if client, err = sarama.NewClient(brokers, kafkautil.Config("bench-latency-reader")); err != nil {
			b.Fatal(err)
		}
		if parts, err := client.Partitions(topic); err == nil && len(parts) > 0 {
			break
		}
		client.Close()
		if time.Now().After(deadline) {
			b.Fatalf("output topic %s never appeared", topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		b.Fatal(err)
	}
	defer consumer.Close()
	parts, _ := client.Partitions(topic)
	msgs := make(chan *sarama.ConsumerMessage, 1024)
	done := make(chan struct{})
	defer close(done)
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			b.Fatal(err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-done:
					return
				}
			}
		}()
	}
	out := make([]time.Duration, 0, total)
	var o event.Output
	for int64(len(out)) < total {
		select {
		case m := <-msgs:
			now := time.Now()
			if err := json.Unmarshal(m.Value, &o); err != nil {
				b.Fatal(err)
			}
			out = append(out, now.Sub(time.UnixMilli(o.TS)))
		case <-time.After(time.Until(deadline)):
			b.Fatalf("only %d of %d output records", len(out), total)
		}
	}
	return out
}
