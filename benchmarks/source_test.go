package benchmarks

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/record"
)

// BenchmarkSourceRead measures the job's read path alone: batch.KafkaSource
// reading the throughput benchmark's topic (all partitions in parallel,
// each record's value touched, nothing else done), next to the raw-consume
// ceiling in the same iteration. It reports both rates and their ratio,
// one sub-benchmark per event format; run it with -cpuprofile to see what
// decoding the fetch responses costs. Run with -benchtime=1x or more.
func BenchmarkSourceRead(b *testing.B) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	events := benchEvents(b)
	for _, f := range benchFormats(b) {
		b.Run(string(f), func(b *testing.B) {
			topic := benchTopic(events, f)
			ensureData(b, brokers, topic, events, f)
			var rawRate, srcRate float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				raw := rawConsume(b, brokers, topic)
				src := sourceRead(b, brokers, topic, events)
				rawRate += float64(events) / raw.Seconds()
				srcRate += float64(events) / src.Seconds()
				b.Logf("%s iteration %d: raw consume %v (%.0f ev/s), KafkaSource %v (%.0f ev/s)", f, i, raw.Round(time.Millisecond),
					float64(events)/raw.Seconds(), src.Round(time.Millisecond), float64(events)/src.Seconds())
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(rawRate/n, "raw_events/s")
			b.ReportMetric(srcRate/n, "source_events/s")
			b.ReportMetric(srcRate/rawRate, "source/raw")
		})
	}
}

// sourceRead reads every partition of topic whole with a fresh
// batch.KafkaSource, one Read per partition, all at once, and returns the
// time it took. It fails unless it saw events records.
func sourceRead(b *testing.B, brokers []string, topic string, events int64) time.Duration {
	b.Helper()
	client, err := sarama.NewClient(brokers, kafkautil.Config("bench-source"))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	bounds, err := src.Bounds(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var n, sum atomic.Int64
	start := time.Now()
	var g errgroup.Group
	for _, p := range src.Partitions() {
		bd := bounds[p]
		g.Go(func() error {
			var cnt, bytes int64
			err := src.Read(ctx, record.Range{Topic: topic, Partition: p, From: bd.Start, To: bd.End}, func(r *batch.Record) error {
				cnt++
				if len(r.Value) > 0 {
					bytes += int64(r.Value[len(r.Value)-1])
				}
				return nil
			})
			n.Add(cnt)
			sum.Add(bytes)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if n.Load() < events {
		b.Fatalf("KafkaSource read %d records, want %d", n.Load(), events)
	}
	return took
}
