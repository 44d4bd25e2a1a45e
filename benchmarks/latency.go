package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// How latency is measured (results.md repeats it): events are produced at
// a steady rate while the job runs, each with ts = the time it was sent.
//
//   - Sinks that hold totals (SQL, Redis): a poller reads the visible event
//     count every pollEvery; event k, scheduled at start + k/rate, is
//     visible once the count reached k+1. Latency = that time − schedule.
//   - Sinks that hold records (Kafka, files): each output record carries
//     the input's ts; latency = the time the reader first sees the record
//     (read-committed consumer, or the committed file appearing) − ts.
const pollEvery = 10 * time.Millisecond

// counter returns the number of events visible in a sink.
type counter func(ctx context.Context) (int64, error)

// sqlCounter counts the job's events in mb_totals.
func sqlCounter(w *sqlsink.Writer, job string) counter {
	return func(ctx context.Context) (int64, error) {
		var n int64
		err := w.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(events), 0) FROM mb_totals WHERE job = ?`, job).Scan(&n)
		return n, err
	}
}

// redisCounter counts the job's events in its totals hash (the fold
// updates the totals atomically, so the sum never shows half a batch).
func redisCounter(r *redissink.Sink, job string) counter {
	return func(ctx context.Context) (int64, error) {
		vals, err := r.Client().HVals(ctx, redissink.EventsKey(job)).Result()
		if err != nil {
			return 0, err
		}
		var n int64
		for _, v := range vals {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("events hash value %q: %w", v, err)
			}
			n += x
		}
		return n, nil
	}
}

// countLatencies polls count until total events are visible (or ctx ends)
// and returns, for event k, when the count first reached k+1, as latency
// against its schedule start + k/rate. start is read once the poll is done
// (the producer sets it when it starts).
func countLatencies(ctx context.Context, count counter, total int64, rate float64, start func() time.Time) ([]time.Duration, error) {
	visible := make([]time.Time, 0, total)
	for int64(len(visible)) < total {
		n, err := count(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("only %d of %d events visible: %w", len(visible), total, ctx.Err())
			}
			return nil, err
		}
		now := time.Now()
		for int64(len(visible)) < min(n, total) {
			visible = append(visible, now)
		}
		select {
		case <-ctx.Done():
			if int64(len(visible)) < total {
				return nil, fmt.Errorf("only %d of %d events visible: %w", len(visible), total, ctx.Err())
			}
		case <-time.After(pollEvery):
		}
	}
	t0 := start()
	lat := make([]time.Duration, len(visible))
	for k, v := range visible {
		lat[k] = v.Sub(t0.Add(time.Duration(float64(k) / rate * float64(time.Second))))
	}
	return lat, nil
}

// topicLatencies reads topic read-committed from the start until total
// output records arrived and returns now − ts for each.
func topicLatencies(ctx context.Context, brokers []string, topic string, total int64) ([]time.Duration, error) {
	client, err := sarama.NewClient(brokers, kafkautil.Config("microbatch-bench-latency"))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, err
	}
	msgs := make(chan *sarama.ConsumerMessage, 1024)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(done)
		wg.Wait()
	}()
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pc.Close()
			for {
				select {
				case m := <-pc.Messages():
					select {
					case msgs <- m:
					case <-done:
						return
					}
				case <-pc.Errors(): // sarama retries by itself
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
				return nil, fmt.Errorf("output record %q: %w", m.Value, err)
			}
			out = append(out, now.Sub(time.UnixMilli(o.TS)))
		case <-ctx.Done():
			return nil, fmt.Errorf("only %d of %d output records: %w", len(out), total, ctx.Err())
		}
	}
	return out, nil
}

// fileLatencies polls dir for committed output files of job and returns
// now − ts for each record in them, until total records were seen.
func fileLatencies(ctx context.Context, dir, job string, total int64) ([]time.Duration, error) {
	seen := map[string]bool{}
	out := make([]time.Duration, 0, total)
	var o event.Output
	for int64(len(out)) < total {
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		now := time.Now()
		for _, e := range entries {
			name := e.Name()
			if !e.Type().IsRegular() || !strings.HasPrefix(name, job+"-") || !strings.HasSuffix(name, ".jsonl") || seen[name] {
				continue
			}
			seen[name] = true
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
				if line == "" || strings.HasPrefix(line, `{"dead_letter":`) {
					continue
				}
				if err := json.Unmarshal([]byte(line), &o); err != nil {
					return nil, fmt.Errorf("%s: %q: %w", name, line, err)
				}
				out = append(out, now.Sub(time.UnixMilli(o.TS)))
			}
		}
		select {
		case <-ctx.Done():
			if int64(len(out)) < total {
				return nil, fmt.Errorf("only %d of %d output records: %w", len(out), total, ctx.Err())
			}
		case <-time.After(pollEvery):
		}
	}
	return out, nil
}

// Percentiles of a latency sample, in milliseconds.
type Percentiles struct {
	P50     float64 `json:"p50_ms"`
	P95     float64 `json:"p95_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
	Samples int     `json:"samples"`
}

func percentiles(lat []time.Duration) Percentiles {
	if len(lat) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	q := func(f float64) float64 {
		return float64(s[int(f*float64(len(s)-1))]) / float64(time.Millisecond)
	}
	return Percentiles{P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: q(1), Samples: len(s)}
}
