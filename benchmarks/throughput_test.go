package benchmarks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// Workload of the throughput benchmark (issue #2): 4 partitions, 1,000 keys,
// 1M events unless MICROBATCH_BENCH_EVENTS says otherwise.
const (
	benchPartitions = 4
	benchKeys       = 1000
	benchSeed       = 7
)

func benchEvents(b *testing.B) int64 {
	if s := os.Getenv("MICROBATCH_BENCH_EVENTS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("MICROBATCH_BENCH_EVENTS=%q is not a positive number", s)
		}
		return n
	}
	return 1_000_000
}

// BenchmarkTxnVsRawConsume reads the same topic twice per iteration: once
// with a bare sarama consumer that only counts records (the ceiling), once
// with `txn` into MariaDB (a fresh job, so it does all the work). It reports
// both rates and their ratio. Run with -benchtime=1x; see README.md.
func BenchmarkTxnVsRawConsume(b *testing.B) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	sink := testutil.NeedServer(b, testutil.EnvMySQL)
	events := benchEvents(b)
	topic := fmt.Sprintf("bench-txn-%d-p%d-k%d-s%d", events, benchPartitions, benchKeys, benchSeed)
	ensureData(b, brokers, topic, events)

	var rawRate, txnRate float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw := rawConsume(b, brokers, topic)
		txn := runTxn(b, brokers, topic, sink, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), events, nil)
		rawRate += float64(events) / raw.Seconds()
		txnRate += float64(events) / txn.Seconds()
		b.Logf("iteration %d: raw consume %v (%.0f ev/s), txn %v (%.0f ev/s)", i, raw.Round(time.Millisecond),
			float64(events)/raw.Seconds(), txn.Round(time.Millisecond), float64(events)/txn.Seconds())
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(rawRate/n, "raw_events/s")
	b.ReportMetric(txnRate/n, "txn_events/s")
	b.ReportMetric(txnRate/rawRate, "txn/raw")
}

// ensureData fills topic with events once; later runs reuse it.
func ensureData(b *testing.B, brokers []string, topic string, events int64) {
	b.Helper()
	if err := kafkautil.EnsureTopic(brokers, topic, benchPartitions); err != nil {
		b.Fatal(err)
	}
	have := testutil.EndOffsets(b, brokers, topic)
	var n int64
	for _, e := range have {
		n += e
	}
	if n >= events {
		return
	}
	start := time.Now()
	_, err := kafkautil.Produce(context.Background(), kafkautil.ProduceOptions{
		Brokers: brokers, Topic: topic, Count: events - n, Skip: n, Keys: benchKeys, Seed: benchSeed,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("produced %d events into %s in %v", events-n, topic, time.Since(start).Round(time.Millisecond))
}

// rawConsume reads every partition from the start to its end offset with
// the same sarama settings the job uses, touching nothing but the offset
// (consumeAll, which `microbatch bench` uses too).
func rawConsume(b *testing.B, brokers []string, topic string) time.Duration {
	b.Helper()
	d, _, err := consumeAll(context.Background(), brokers, topic)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// runTxn runs the txn strategy on a fresh job and returns the time from
// start until the batch that consumed the last event committed (the idle
// wait before exit is not counted).
func runTxn(b *testing.B, brokers []string, topic, sink, job string, events int64, tr *strategies.Transform) time.Duration {
	b.Helper()
	var records atomic.Int64
	var doneAt atomic.Int64
	start := time.Now()
	res, err := strategies.Run(context.Background(), strategies.Config{
		Strategy: strategies.StrategyTxn, Brokers: brokers, Topic: topic, Job: job, Sink: sink,
		Interval: 100 * time.Millisecond, UntilIdle: 300 * time.Millisecond, Transform: tr,
		OnProgress: func(p batch.Progress) {
			if records.Add(p.Records) >= events && doneAt.Load() == 0 {
				doneAt.Store(time.Now().UnixNano())
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	if res.Records != events {
		b.Fatalf("txn processed %d records, want %d", res.Records, events)
	}
	return time.Duration(doneAt.Load() - start.UnixNano())
}
