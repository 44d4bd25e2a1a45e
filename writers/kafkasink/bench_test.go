package kafkasink

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkKafkaTxn writes b.N 100-byte records in transactions of
// 10,000, each pre-committed and committed, and reports records/s and
// this process's CPU time per record (user + system, every goroutine:
// the producer's own included; on a busy machine a steadier measure than
// the rate).
func BenchmarkKafkaTxn(b *testing.B) {
	for _, target := range kafkaTxnTargets {
		b.Run(target.name, func(b *testing.B) {
			brokers := target.start(b)
			ctx := b.Context()
			topic := kafkaTxnTopic(b, brokers)
			w := newTestTxn(b, brokers, kafkaTxnName(b, "txn"))
			if err := w.Recover(ctx, nil); err != nil {
				b.Fatal(err)
			}
			value := bytes.Repeat([]byte("x"), 100)
			const perTxn = 10000
			b.ResetTimer()
			cpu0 := processCPU(b)
			txn := int64(0)
			for i := 0; i < b.N; {
				txn++
				if err := w.Begin(ctx, txn); err != nil {
					b.Fatal(err)
				}
				for j := 0; j < perTxn && i < b.N; j, i = j+1, i+1 {
					if err := w.Write(ctx, topic, fmt.Appendf(nil, "k%d", i%1000), value); err != nil {
						b.Fatal(err)
					}
				}
				p, err := w.PreCommit(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Commit(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/record")
		})
	}
}

// BenchmarkKafkaTxnCheckpoint measures one checkpoint's transaction
// overhead: Begin, one record, PreCommit, Commit.
func BenchmarkKafkaTxnCheckpoint(b *testing.B) {
	for _, target := range kafkaTxnTargets {
		b.Run(target.name, func(b *testing.B) {
			brokers := target.start(b)
			ctx := b.Context()
			topic := kafkaTxnTopic(b, brokers)
			w := newTestTxn(b, brokers, kafkaTxnName(b, "txn"))
			if err := w.Recover(ctx, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if err := w.Begin(ctx, int64(i)); err != nil {
					b.Fatal(err)
				}
				if err := w.Write(ctx, topic, nil, []byte("x")); err != nil {
					b.Fatal(err)
				}
				p, err := w.PreCommit(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Commit(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// processCPU is the process's CPU time so far, user + system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
