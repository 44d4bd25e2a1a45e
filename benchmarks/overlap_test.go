package benchmarks

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// BenchmarkTxnVsAtLeastOnce drains the same backlog three ways per
// iteration, in turn: the raw-consume ceiling, `txn` and `at-least-once`
// into MariaDB (fresh jobs, --interval 100ms, default batch size). It
// reports each rate, txn/at-least-once, txn/raw, and the CPU this process
// spent per event on each (steadier than rates on a shared machine). One
// sub-benchmark per event format; MICROBATCH_BENCH_TOPIC names an existing
// topic to read instead of the throughput benchmark's (it must hold
// MICROBATCH_BENCH_EVENTS events, e.g. a `microbatch bench` workload
// topic). Run with -benchtime=3x; see README.md (issue 28).
func BenchmarkTxnVsAtLeastOnce(b *testing.B) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	sink := testutil.NeedServer(b, testutil.EnvMySQL)
	events := benchEvents(b)
	for _, f := range benchFormats(b) {
		b.Run(string(f), func(b *testing.B) {
			topic := os.Getenv("MICROBATCH_BENCH_TOPIC")
			if topic == "" {
				topic = benchTopic(events, f)
				ensureData(b, brokers, topic, events, f)
			}
			var rate, cpu [3]float64 // raw, txn, at-least-once
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var took [3]time.Duration
				var used [3]time.Duration
				for k := range 3 {
					before := cpuUsed(b)
					switch k {
					case 0:
						took[k] = rawConsume(b, brokers, topic)
					case 1:
						took[k] = runTxn(b, brokers, topic, sink, fmt.Sprintf("bench-ov-txn-%d-%d", time.Now().UnixNano(), i), events, nil)
					case 2:
						took[k] = runStrategy(b, strategies.StrategyAtLeastOnce, brokers, topic, sink, fmt.Sprintf("bench-ov-alo-%d-%d", time.Now().UnixNano(), i), events, nil)
					}
					used[k] = cpuUsed(b) - before
					rate[k] += float64(events) / took[k].Seconds()
					cpu[k] += float64(used[k].Microseconds()) / float64(events)
				}
				b.Logf("%s iteration %d: raw %.0f ev/s (%.2f CPU µs/ev), txn %.0f ev/s (%.2f), at-least-once %.0f ev/s (%.2f): txn/alo %.3f, txn/raw %.3f",
					f, i, float64(events)/took[0].Seconds(), float64(used[0].Microseconds())/float64(events),
					float64(events)/took[1].Seconds(), float64(used[1].Microseconds())/float64(events),
					float64(events)/took[2].Seconds(), float64(used[2].Microseconds())/float64(events),
					took[2].Seconds()/took[1].Seconds(), took[0].Seconds()/took[1].Seconds())
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(rate[0]/n, "raw_events/s")
			b.ReportMetric(rate[1]/n, "txn_events/s")
			b.ReportMetric(rate[2]/n, "alo_events/s")
			b.ReportMetric(rate[1]/rate[2], "txn/alo")
			b.ReportMetric(rate[1]/rate[0], "txn/raw")
			b.ReportMetric(cpu[1]/n, "txn_cpu_µs/ev")
			b.ReportMetric(cpu[2]/n, "alo_cpu_µs/ev")
		})
	}
}

// cpuUsed is the user and system CPU time this process has used so far.
func cpuUsed(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
