package strategies_test

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// TestRetriesLostConnections cuts every connection between the job and its
// sink every 100ms while batches commit: transactions (txn on MariaDB) and
// contribution writes and folds (idempotent on Redis) lose their connection
// before, during and after they are applied. The run must retry (the
// progress reports show it did), never stop, and end exactly once.
func TestRetriesLostConnections(t *testing.T) {
	for _, c := range []struct {
		strategy string
		sink     sinkTarget
	}{
		{strategies.StrategyTxn, mariaDB},
		{strategies.StrategySingle, mariaDB},
		{strategies.StrategyIdempotent, redisSink},
	} {
		t.Run(c.strategy, func(t *testing.T) {
			testRetriesLostConnections(t, c.strategy, c.sink.dsn(t))
		})
	}
}

func testRetriesLostConnections(t *testing.T, strategy, upstream string) {
	brokers := kfake.brokers(t)
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testutil.StartCutProxy(t, u.Host)
	u.Host = proxy.Addr()
	dsn := u.String()

	topic := newTopic(t, brokers)
	job := uniqueName(t, "job")
	const events = 100_000
	exp := produce(t, brokers, topic, integrationSeed, 0, events)

	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategy
	cfg.MaxBatchRecords = 2_000 // many small transactions: many chances to be cut
	cfg.Interval = 20 * time.Millisecond
	var retries atomic.Int64
	stop := make(chan struct{})
	var cutter sync.WaitGroup
	var once sync.Once
	cfg.OnProgress = func(p batch.Progress) {
		retries.Add(int64(p.Retries))
		// Start cutting once the job is past start-up, so that every cut
		// lands in the batch loop.
		once.Do(func() {
			cutter.Add(1)
			go func() {
				defer cutter.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						proxy.CutAll()
					}
				}
			}()
		})
	}
	res := runJob(t, cfg)
	close(stop)
	cutter.Wait()

	t.Logf("%d connections cut, %d retries in %d batches", proxy.Cuts.Load(), retries.Load(), res.Batches)
	if retries.Load() == 0 {
		t.Fatalf("nothing was retried: the cuts never landed inside a write (%d cuts)", proxy.Cuts.Load())
	}
	got, _, err := strategies.ReadTotals(context.Background(), upstream, job)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != exp.Events || !got.AmountIs(exp.Amount) {
		t.Fatalf("sink holds events=%d amount=%d, want %d %d", got.Events, got.Amount, exp.Events, exp.Amount)
	}
	if strategy != strategies.StrategyIdempotent {
		w := sinktest.OpenSQL(t, upstream)
		checkPerKey(t, readPerKey(t, w, job), expectedPerKey(integrationSeed, 0, events))
		checkOffsets(t, w, brokers, job, topic)
	}
}
