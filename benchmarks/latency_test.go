package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
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
	latencyStartWait = 2 * time.Second  // job warm-up before production starts
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
	for _, interval := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, time.Second, 5 * time.Second} {
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
		cfg.Strategy, cfg.Checkpoint.Interval, cfg.Checkpoint.StateDir = strategies.StrategyCheckpoint, interval, stateDir
		cfg.Checkpoint.Timeout = 30 * time.Second
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
	if _, err := kafkautil.Produce(context.Background(), kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: catchUpEvents, Keys: benchKeys, Seed: benchSeed, Format: benchFormat(b)}); err != nil {
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
	var latErr error
	var prodStart atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		mctx, cancel := context.WithTimeout(context.Background(), latencyDuration+time.Minute)
		defer cancel()
		if kind == "checkpoint-kafka" {
			lat, latErr = topicLatencies(mctx, brokers, topic+"-out", total)
			return
		}
		w := sinktest.OpenSQL(b, mysql)
		lat, latErr = countLatencies(mctx, sqlCounter(w, job), total, latencyRate, func() time.Time { return time.Unix(0, prodStart.Load()) })
	}()
	prodStart.Store(time.Now().UnixNano())
	if _, err := kafkautil.Produce(context.Background(), kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: total, Keys: benchKeys, Seed: benchSeed, Format: benchFormat(b), Rate: latencyRate}); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	cancel()
	if err := <-jobDone; err != nil {
		b.Fatal(err)
	}
	if latErr != nil {
		b.Fatal(latErr)
	}
	slices.Sort(lat)
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(rate, "catchup_events/s")
	b.ReportMetric(p(0.50), "p50_ms")
	b.ReportMetric(p(0.99), "p99_ms")
	b.Logf("%s interval %s: catch-up %.0f events/s; latency p50 %.0f ms, p99 %.0f ms (%d records)", kind, interval, rate, p(0.5), p(0.99), len(lat))
}
