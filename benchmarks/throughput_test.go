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
	"github.com/microbatch/microbatch/internal/event"
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

// benchFormats are the event formats the format-taking benchmarks run as
// sub-benchmarks (BenchmarkTxnVsRawConsume/wide): all of them, or the one
// MICROBATCH_BENCH_FORMAT names.
func benchFormats(b *testing.B) []event.Format {
	s := os.Getenv("MICROBATCH_BENCH_FORMAT")
	if s == "" {
		return event.Formats
	}
	f, err := event.ParseFormat(s)
	if err != nil {
		b.Fatalf("MICROBATCH_BENCH_FORMAT: %v", err)
	}
	return []event.Format{f}
}

// benchFormat is the one format of the benchmarks that are not run per
// format: MICROBATCH_BENCH_FORMAT, or compact.
func benchFormat(b *testing.B) event.Format {
	if os.Getenv("MICROBATCH_BENCH_FORMAT") == "" {
		return event.FormatCompact
	}
	return benchFormats(b)[0]
}

// benchTopic names the throughput benchmarks' topic of events in format f.
// Compact keeps the name it had before formats, so its topic is reused.
func benchTopic(events int64, f event.Format) string {
	t := fmt.Sprintf("bench-txn-%d-p%d-k%d-s%d", events, benchPartitions, benchKeys, benchSeed)
	if f != event.FormatCompact {
		t += "-" + string(f)
	}
	return t
}

// BenchmarkTxnVsRawConsume reads the same topic twice per iteration: once
// with the raw-consume ceiling (consumeAll, which `microbatch bench` uses
// too: it only counts records), once with `txn` into MariaDB (a fresh job,
// so it does all the work). It reports both rates and their ratio, one
// sub-benchmark per event format. Run with -benchtime=1x; see README.md.
func BenchmarkTxnVsRawConsume(b *testing.B) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	sink := testutil.NeedServer(b, testutil.EnvMySQL)
	events := benchEvents(b)
	for _, f := range benchFormats(b) {
		b.Run(string(f), func(b *testing.B) {
			topic := benchTopic(events, f)
			ensureData(b, brokers, topic, events, f)
			b.Logf("raw consume: %s", DefaultRawSettings)
			var rawRate, txnRate float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				raw := rawConsume(b, brokers, topic)
				txn := runTxn(b, brokers, topic, sink, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), events, nil)
				rawRate += float64(events) / raw.Seconds()
				txnRate += float64(events) / txn.Seconds()
				b.Logf("%s iteration %d: raw consume %v (%.0f ev/s), txn %v (%.0f ev/s)", f, i, raw.Round(time.Millisecond),
					float64(events)/raw.Seconds(), txn.Round(time.Millisecond), float64(events)/txn.Seconds())
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(rawRate/n, "raw_events/s")
			b.ReportMetric(txnRate/n, "txn_events/s")
			b.ReportMetric(txnRate/rawRate, "txn/raw")
		})
	}
}

// ensureData fills topic with events in format f once; later runs reuse it.
func ensureData(b *testing.B, brokers []string, topic string, events int64, f event.Format) {
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
		Brokers: brokers, Topic: topic, Count: events - n, Skip: n, Keys: benchKeys, Seed: benchSeed, Format: f,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("produced %d events into %s in %v", events-n, topic, time.Since(start).Round(time.Millisecond))
}

// rawConsume reads every partition from the start to its end offset with
// the raw-consume ceiling (consumeAll, which `microbatch bench` uses too).
func rawConsume(b *testing.B, brokers []string, topic string) time.Duration {
	b.Helper()
	r, err := consumeAll(context.Background(), brokers, topic, DefaultRawSettings)
	if err != nil {
		b.Fatal(err)
	}
	return r.Duration
}

// runTxn runs the txn strategy on a fresh job and returns the time from
// start until the batch that consumed the last event committed (the idle
// wait before exit is not counted).
func runTxn(b *testing.B, brokers []string, topic, sink, job string, events int64, tr *strategies.Transform) time.Duration {
	b.Helper()
	return runStrategy(b, strategies.StrategyTxn, brokers, topic, sink, job, events, tr)
}

// runStrategy is runTxn with another micro-batch strategy.
func runStrategy(b *testing.B, strategy strategies.Strategy, brokers []string, topic, sink, job string, events int64, tr *strategies.Transform) time.Duration {
	b.Helper()
	return runStrategyCfg(b, strategies.Config{
		Strategy: strategy, Brokers: brokers, Topic: topic, Job: job, Sink: sink,
		Interval: 100 * time.Millisecond, Transform: tr,
	}, events)
}

// runStrategyCfg runs cfg (a fresh job) until it is idle for 300 ms and
// returns the time from start until the batch that consumed the last of
// events committed.
func runStrategyCfg(b *testing.B, cfg strategies.Config, events int64) time.Duration {
	b.Helper()
	var records atomic.Int64
	var doneAt atomic.Int64
	start := time.Now()
	cfg.UntilIdle = 300 * time.Millisecond
	cfg.OnProgress = func(p batch.Progress) {
		if records.Add(p.Records) >= events && doneAt.Load() == 0 {
			doneAt.Store(time.Now().UnixNano())
		}
	}
	res, err := strategies.Run(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if res.Records != events {
		b.Fatalf("%s processed %d records, want %d", cfg.Strategy, res.Records, events)
	}
	return time.Duration(doneAt.Load() - start.UnixNano())
}

// BenchmarkTxnVsNoGuarantee reads the same topic three ways per iteration:
// the no-guarantee pipeline (noguarantee.go, the bar `microbatch bench`
// reports: kgo + fastjson + a per-key fold in memory, nothing written),
// `txn` and `at-least-once` into MariaDB (fresh jobs). It reports the
// three rates and the ratios txn/no-guarantee and txn/at-least-once, one
// sub-benchmark per format, spaced and wide unless
// MICROBATCH_BENCH_FORMAT names one. The pipeline's fold is checked
// against the produced totals every iteration. Run with -benchtime=1x.
func BenchmarkTxnVsNoGuarantee(b *testing.B) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	sink := testutil.NeedServer(b, testutil.EnvMySQL)
	events := benchEvents(b)
	formats := []event.Format{event.FormatSpaced, event.FormatWide}
	if os.Getenv("MICROBATCH_BENCH_FORMAT") != "" {
		formats = benchFormats(b)
	}
	for _, f := range formats {
		b.Run(string(f), func(b *testing.B) {
			topic := benchTopic(events, f)
			ensureData(b, brokers, topic, events, f)
			want := expectedPerKey(Workload{Events: events, Keys: benchKeys, Seed: benchSeed})
			b.Logf("no-guarantee pipeline: %s", DefaultNoGuaranteeSettings)
			var ngRate, txnRate, aloRate float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ng, err := noGuaranteeConsume(context.Background(), brokers, topic, DefaultNoGuaranteeSettings)
				if err != nil {
					b.Fatal(err)
				}
				if err := foldExact(ng.Totals, want); err != nil {
					b.Fatalf("no-guarantee pipeline: %v", err)
				}
				job := fmt.Sprintf("bench-ng-%d-%d", time.Now().UnixNano(), i)
				txn := runTxn(b, brokers, topic, sink, job+"-txn", events, nil)
				alo := runStrategy(b, strategies.StrategyAtLeastOnce, brokers, topic, sink, job+"-alo", events, nil)
				ngRate += ng.EventsPerSec()
				txnRate += float64(events) / txn.Seconds()
				aloRate += float64(events) / alo.Seconds()
				b.Logf("%s iteration %d: no-guarantee %v (%.0f ev/s), txn %v (%.0f ev/s), at-least-once %v (%.0f ev/s)", f, i,
					ng.Duration.Round(time.Millisecond), ng.EventsPerSec(), txn.Round(time.Millisecond), float64(events)/txn.Seconds(),
					alo.Round(time.Millisecond), float64(events)/alo.Seconds())
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(ngRate/n, "no-guarantee_events/s")
			b.ReportMetric(txnRate/n, "txn_events/s")
			b.ReportMetric(aloRate/n, "at-least-once_events/s")
			b.ReportMetric(txnRate/ngRate, "txn/no-guarantee")
			b.ReportMetric(txnRate/aloRate, "txn/at-least-once")
		})
	}
}
