package strategies_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/filesink"
)

// Checkpoint mode with totals past int64 (issue #14, item 5): the keyed
// state's running totals, the output records and mb_totals stay exact.

// overflowEvents are n events from id first on, as produceRaw places
// them (record i on partition i % testPartitions): "hot" (+10^12) only on
// partition 0 and "cold" (-10^12) only on partition 1, so that each key's
// events reach the operator in id order; small keys on the others.
func overflowEvents(first, n int64) (values []string, evs []event.Event) {
	for i := range n {
		id := first + i
		ev := event.Event{ID: id, TS: 1_764_489_600_000 + id}
		switch id % testPartitions {
		case 0:
			ev.Key, ev.Amount = []byte("hot"), event.MaxAbsAmount
		case 1:
			ev.Key, ev.Amount = []byte("cold"), -event.MaxAbsAmount
		default:
			ev.Key, ev.Amount = []byte("k"+strconv.FormatInt(id%testPartitions, 10)), id%100
		}
		evs = append(evs, ev)
		values = append(values, string(event.Append(nil, ev.ID, string(ev.Key), ev.Amount, ev.TS)))
	}
	return values, evs
}

var overflowSeeds = map[string][2]int64{"hot": {3, math.MaxInt64 - 100}, "cold": {2, math.MinInt64 + 100}}

func checkpointConfig(t *testing.T, brokers []string, topic, job, sink, mode, stateDir string) strategies.Config {
	cfg := baseConfig(t, brokers, topic, job, sink)
	cfg.Strategy = strategies.StrategyCheckpoint
	cfg.Checkpoint.SinkMode = strategies.SinkMode(mode)
	cfg.Checkpoint.StateDir = stateDir
	cfg.Checkpoint.OperatorParallelism = 2
	cfg.Checkpoint.Interval = 50 * time.Millisecond
	cfg.Checkpoint.Timeout = 30 * time.Second
	return cfg
}

// TestCheckpointOutputsPastInt64: a checkpoint (as older versions wrote
// it: [events, amount] numbers) seeds two keys' running totals near the
// ends of int64; events take them past. Every output record's total is
// exact, the next checkpoint keeps the totals past int64, and a second run
// restored from it goes on exactly.
func TestCheckpointOutputsPastInt64(t *testing.T) {
	brokers := startKfake(t)
	topic := newTopic(t, brokers)
	job := uniqueName(t, "ckovf")
	dir := t.TempDir()
	store, err := offsets.NewFileCheckpoints(dir+"/state", 0)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]any{"subtasks": 1, "state": overflowSeeds, "pending": nil})
	if err := store.Save(t.Context(), &offsets.Checkpoint{Job: job, ID: time.Now().UnixMilli(), Topic: topic,
		Offsets: map[int32]int64{}, Data: data, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cfg := checkpointConfig(t, brokers, topic, job, "file://"+dir+"/out", string(strategies.SinkMode2PC), dir+"/state")

	// want: per id, the key's count and total after it.
	type running struct {
		count int64
		total *big.Int
	}
	keys := map[string]*running{}
	for k, s := range overflowSeeds {
		keys[k] = &running{s[0], big.NewInt(s[1])}
	}
	want := map[int64][2]string{}
	var produced int64
	step := func(n int64) {
		values, evs := overflowEvents(produced, n)
		produced += n
		produceRaw(t, brokers, topic, values) // record i of the call on partition i % testPartitions: ids keep it
		for _, ev := range evs {
			r := keys[string(ev.Key)]
			if r == nil {
				r = &running{total: new(big.Int)}
				keys[string(ev.Key)] = r
			}
			r.count++
			r.total.Add(r.total, big.NewInt(ev.Amount))
			want[ev.ID] = [2]string{strconv.FormatInt(r.count, 10), r.total.String()}
		}
		runJob(t, cfg)
	}
	check := func(what string) {
		t.Helper()
		seen := map[int64]bool{}
		err := filesink.Read(dir+"/out", job, func(line []byte) error {
			var o event.Output
			if err := json.Unmarshal(line, &o); err != nil {
				return fmt.Errorf("output %s: %w", line, err)
			}
			if seen[o.ID] {
				return fmt.Errorf("id %d output twice", o.ID)
			}
			seen[o.ID] = true
			if got := [2]string{strconv.FormatInt(o.Count, 10), o.Total.String()}; got != want[o.ID] {
				t.Errorf("%s: id %d (%s) has count/total %v, want %v", what, o.ID, o.Key, got, want[o.ID])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(seen)) != produced {
			t.Errorf("%s: %d outputs, want %d", what, len(seen), produced)
		}
		var saved struct {
			State map[string][2]json.Number `json:"state"`
		}
		if err := json.Unmarshal(latestCheckpoint(t, dir+"/state", job).Data, &saved); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"hot", "cold"} {
			if got := saved.State[k]; string(got[0]) != strconv.FormatInt(keys[k].count, 10) || string(got[1]) != keys[k].total.String() {
				t.Errorf("%s: the checkpoint holds %s = %v, want [%d %s]", what, k, got, keys[k].count, keys[k].total)
			}
		}
	}
	step(200)
	check("after the first run")
	if keys["hot"].total.IsInt64() || keys["cold"].total.IsInt64() {
		t.Fatal("the totals stay inside int64: the test proves nothing")
	}
	step(200)
	check("after a run restored from a checkpoint past int64")
}

// TestCheckpointMbTotalsPastInt64: checkpoint mode's SQL sinks (XA on
// MariaDB, write-ahead on SQLite) add their intervals' sums to mb_totals
// seeded near the ends of int64: the totals go past exactly.
func TestCheckpointMbTotalsPastInt64(t *testing.T) {
	for _, c := range []struct {
		name, mode string
		sink       sinkTarget
	}{
		// A database of its own: mb_totals as this version creates it,
		// whatever the shared test database holds.
		{"XA", string(strategies.SinkMode2PC), sinkTarget{"MariaDB", func(t testing.TB) string {
			return testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
		}}},
		{"WAL", string(strategies.SinkModeWAL), sqliteSink},
	} {
		t.Run(c.name+"/"+c.sink.name, func(t *testing.T) {
			dsn := c.sink.dsn(t)
			brokers := startKfake(t)
			topic := newTopic(t, brokers)
			job := uniqueName(t, "ckovf")
			w := sinktest.OpenSQL(t, dsn)
			seeds := [][]any{}
			want := map[string]*big.Int{}
			events := map[string]int64{}
			for k, s := range overflowSeeds {
				seeds = append(seeds, []any{job, k, s[0], s[1]})
				want[k], events[k] = big.NewInt(s[1]), s[0]
			}
			tx, err := w.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Upsert(t.Context(), writers.Totals, seeds); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			values, evs := overflowEvents(0, 400)
			produceRaw(t, brokers, topic, values)
			for _, ev := range evs {
				k := string(ev.Key)
				if want[k] == nil {
					want[k] = new(big.Int)
				}
				want[k].Add(want[k], big.NewInt(ev.Amount))
				events[k]++
			}
			runJob(t, checkpointConfig(t, brokers, topic, job, dsn, c.mode, t.TempDir()))

			rows, err := w.DB().QueryContext(context.Background(), `SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				var k string
				var ev int64
				var amount any
				if err := rows.Scan(&k, &ev, &amount); err != nil {
					t.Fatal(err)
				}
				n++
				if a := exactText(amount); ev != events[k] || a != want[k].String() {
					t.Errorf("key %s: events=%d amount=%s, want %d and %s", k, ev, a, events[k], want[k])
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n != len(want) {
				t.Errorf("%d keys in mb_totals, want %d", n, len(want))
			}
			if want["hot"].IsInt64() || want["cold"].IsInt64() {
				t.Fatal("the totals stay inside int64: the test proves nothing")
			}
			total := new(big.Int)
			for _, a := range want {
				total.Add(total, a)
			}
			if got := readSinkTotals(t, w, job); got.Amount.Cmp(total) != 0 {
				t.Errorf("ReadSinkTotals amount %s, want %s", got.Amount, total)
			}
		})
	}
}

// exactText is an amount read from mb_totals as text: MySQL's DECIMAL
// comes as bytes, SQLite's as an integer or decimal text.
func exactText(v any) string {
	switch a := v.(type) {
	case []byte:
		return string(a)
	case string:
		return a
	case int64:
		return strconv.FormatInt(a, 10)
	}
	return fmt.Sprintf("%v (%T)", v, v)
}
