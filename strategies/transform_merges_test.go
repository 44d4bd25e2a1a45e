package strategies_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
)

// A per-column transform (a SQL job's shape): COUNT, a SUM of nothing
// (NULL), MIN of a decimal, MAX of an integer, a replaced NULL.
func perColumnTransform(table string, lo func(amount int64) any) *strategies.Transform {
	u := writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"n", "s", "lo", "hi", "last"},
		Merges: []writers.Merge{writers.MergeAdd, writers.MergeAdd, writers.MergeMin, writers.MergeMax, writers.MergeReplace}}
	return strategies.NewTransform(u,
		func(rec *batch.Record) (userEvent, error) {
			var ev userEvent
			return ev, json.Unmarshal(rec.Value, &ev)
		},
		func(evs []userEvent) [][]any {
			rows := make([][]any, len(evs))
			for i, ev := range evs {
				rows[i] = []any{ev.Key, 1, nil, lo(ev.Amount), ev.Amount, nil}
			}
			return rows
		})
}

// TestTransformPerColumnIdempotent runs a per-column transform into Redis:
// nil values are accepted and stored as no value, the least and the
// greatest per key are exact.
func TestTransformPerColumnIdempotent(t *testing.T) {
	brokers, dsn := kfake.brokers(t), redisSink.dsn(t)
	topic, job := newTopic(t, brokers), uniqueName(t, "trpc")
	openRedisTransformSink(t, dsn, brokers, job, topic, "agg") // drops the job's keys at the end
	const count, seed = 600, 23
	produce(t, brokers, topic, seed, 0, count)
	type want struct {
		n      int64
		lo, hi int64
	}
	wants := map[string]*want{}
	g := event.NewGenerator(seed, testKeys)
	for range count {
		_, k, a := g.Next()
		w := wants[k]
		if w == nil {
			w = &want{lo: a, hi: a}
			wants[k] = w
		}
		w.n++
		w.lo, w.hi = min(w.lo, a), max(w.hi, a)
	}
	cfg := baseConfig(t, brokers, topic, job, dsn)
	cfg.Strategy = strategies.StrategyIdempotent
	cfg.Transform = perColumnTransform("agg", func(a int64) any { return fmt.Sprintf("%d.25", a) })
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if _, err := strategies.Run(ctx, cfg); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cols := map[string]map[string]string{}
	for _, c := range []string{"n", "s", "lo", "hi", "last"} {
		got, err := redisJobOf(t, r, job).Rows(t.Context(), "agg", c)
		if err != nil {
			t.Fatal(err)
		}
		cols[c] = got
	}
	if len(cols["s"]) != 0 || len(cols["last"]) != 0 {
		t.Errorf("NULL columns hold values: s %v, last %v", cols["s"], cols["last"])
	}
	if len(cols["n"]) != len(wants) {
		t.Errorf("%d keys counted, want %d", len(cols["n"]), len(wants))
	}
	for k, w := range wants {
		if got := [3]string{cols["n"][k], cols["lo"][k], cols["hi"][k]}; got != [3]string{fmt.Sprint(w.n), fmt.Sprintf("%d.25", w.lo), fmt.Sprint(w.hi)} {
			t.Errorf("key %s: n, lo, hi = %q, want %d, %d.25, %d", k, got, w.n, w.lo, w.hi)
		}
	}
}

// A per-column transform whose added or compared column holds a float
// stops with ErrConfig naming the column, whatever the sink.
func TestTransformPerColumnBadValue(t *testing.T) {
	brokers := kfake.brokers(t)
	topic := newTopic(t, brokers)
	produce(t, brokers, topic, 29, 0, 50)
	dsn := sqliteSink.dsn(t)
	w := sinktest.OpenSQL(t, dsn)
	if _, err := w.DB().Exec("CREATE TABLE adds (k TEXT PRIMARY KEY, n INTEGER, s, lo, hi, last TEXT)"); err != nil {
		t.Fatal(err)
	}
	adds := writers.Upsert{Table: "adds", Keys: []string{"k"}, Values: []string{"n", "s"}, Merges: []writers.Merge{writers.MergeAdd, writers.MergeAdd}}
	cfg := baseConfig(t, brokers, topic, uniqueName(t, "trpb"), dsn)
	cfg.Transform = strategies.NewTransform(adds,
		func(rec *batch.Record) (userEvent, error) {
			var ev userEvent
			return ev, json.Unmarshal(rec.Value, &ev)
		},
		func(evs []userEvent) [][]any {
			rows := make([][]any, len(evs))
			for i, ev := range evs {
				rows[i] = []any{ev.Key, nil, float64(ev.Amount) / 2}
			}
			return rows
		})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if _, err := strategies.Run(ctx, cfg); !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), "adds.s") {
		t.Fatalf("Run = %v, want ErrConfig naming adds.s", err)
	}
	// MergeMin on SQLite is refused at start.
	cfg.Transform = perColumnTransform("adds", func(a int64) any { return a })
	if _, err := strategies.Run(ctx, cfg); !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), "adds.lo") && !strings.Contains(err.Error(), "column lo") {
		t.Fatalf("Run with MergeMin on SQLite = %v, want ErrConfig naming lo", err)
	}
}
