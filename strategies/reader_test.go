package strategies_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/redissink"
)

// TestReaderSeesWholeBatches polls the sink while a job runs and checks,
// in every snapshot, that the events counted in the totals (plus dead
// letters) equal the records below the stored offsets. The input is
// produced without transactions, so offsets are dense and every offset is
// one record: a snapshot that showed a batch half applied, or applied
// without its offsets (or the reverse), would break the equality.
func TestReaderSeesWholeBatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		strategy strategies.Strategy
		sink     sinkTarget
	}{
		{strategies.StrategyTxn, mariaDB},
		{strategies.StrategySingle, mariaDB},
		{strategies.StrategyIdempotent, redisSink},
	} {
		t.Run(string(c.strategy), func(t *testing.T) {
			t.Parallel()
			testReaderSeesWholeBatches(t, c.strategy, c.sink)
		})
	}
}

// testReaderSeesWholeBatches reads the sink over and over while strategy
// runs: each snapshot's totals must match its offsets.
func testReaderSeesWholeBatches(t *testing.T, strategy strategies.Strategy, sink sinkTarget) {
	dsn := sink.dsn(t)
	brokers := kfake.brokers(t)
	topic := newTopic(t, brokers)
	job := uniqueName(t, "job")
	const events = 60_000
	produce(t, brokers, topic, integrationSeed, 0, events)

	snapshot := sqlSnapshot
	if strategy == strategies.StrategyIdempotent {
		snapshot = redisSnapshot
	}
	read := snapshot(t, dsn, job)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var polls, midway int
	var polled atomic.Int64 // snapshots finished
	readerGone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(readerGone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			counted, below, err := read()
			if err != nil {
				t.Errorf("reading the sink: %v", err)
				return
			}
			polls++
			polled.Store(int64(polls))
			if counted != below {
				t.Errorf("snapshot %d: totals count %d events (with dead letters), offsets cover %d records", polls, counted, below)
				return
			}
			if below > 0 && below < events {
				midway++
			}
		}
	}()
	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategy
	cfg.MaxBatchRecords = 1_000 // many small batches to catch in between
	cfg.Interval = 10 * time.Millisecond
	// The first batches wait after their commit for a snapshot
	// that began after it, so that mid-run snapshots are taken
	// however little CPU the reader gets; the rest run free.
	var committed int
	cfg.OnProgress = func(batch.Progress) {
		if committed++; committed > midRunSnapshots {
			return
		}
		// The snapshot in flight may have begun before the commit.
		want := polled.Load() + 2
		for deadline := time.Now().Add(time.Minute); polled.Load() < want; time.Sleep(time.Millisecond) {
			select {
			case <-readerGone: // it failed the test
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Errorf("the reader took no snapshot within a minute of batch %d's commit", committed)
				return
			}
		}
	}
	res := runJob(t, cfg)
	close(stop)
	wg.Wait()
	t.Logf("%d snapshots, %d of them mid-run, over %d batches", polls, midway, res.Batches)
	if midway < midRunSnapshots {
		t.Fatalf("only %d snapshots were taken mid-run: the test saw too little", midway)
	}
	if counted, below, err := read(); err != nil || counted != events || below != events {
		t.Fatalf("at the end: %d counted, %d below offsets (%v), want %d", counted, below, err, events)
	}
}

// midRunSnapshots is how many snapshots the reader must take mid-run.
const midRunSnapshots = 3

var redisSink = sinkTarget{"Redis", func(t testing.TB) string { return testutil.NeedServer(t, testutil.EnvRedis) }}

// sqlSnapshot reads totals, dead letters and offsets in one read-only
// transaction (one snapshot in InnoDB's REPEATABLE READ).
func sqlSnapshot(t *testing.T, dsn, job string) func() (counted, below int64, err error) {
	w := sinktest.OpenSQL(t, dsn)
	return func() (int64, int64, error) {
		tx, err := w.DB().BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
		if err != nil {
			return 0, 0, err
		}
		defer tx.Rollback()
		var events, dead, below sql.NullInt64
		if err := tx.QueryRow(`SELECT SUM(events) FROM mb_totals WHERE job = ?`, job).Scan(&events); err != nil {
			return 0, 0, err
		}
		if err := tx.QueryRow(`SELECT COUNT(*) FROM mb_dead_letters WHERE job = ?`, job).Scan(&dead); err != nil {
			return 0, 0, err
		}
		if err := tx.QueryRow(`SELECT SUM(next_offset) FROM mb_offsets WHERE job = ?`, job).Scan(&below); err != nil {
			return 0, 0, err
		}
		return events.Int64 + dead.Int64, below.Int64, nil
	}
}

// redisSnapshot reads the users' totals hash and the offsets in one MULTI,
// which Redis executes atomically.
func redisSnapshot(t *testing.T, dsn, job string) func() (counted, below int64, err error) {
	r, err := redissink.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return func() (int64, int64, error) {
		var totals, offs *redis.MapStringStringCmd
		_, err := r.Client().TxPipelined(context.Background(), func(p redis.Pipeliner) error {
			totals = p.HGetAll(context.Background(), redissink.EventsKey(job))
			offs = p.HGetAll(context.Background(), "mb:{"+job+"}:offsets")
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		sum := func(m map[string]string) (n int64) {
			for _, v := range m {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
			return n
		}
		return sum(totals.Val()), sum(offs.Val()), nil
	}
}
