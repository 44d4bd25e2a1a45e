package strategies_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// A user's transform: decode the events as any program would (encoding/json
// into its own type) and count them per key into its own table, one row per
// record, so that the upsert adds up rows with the same key within a
// statement too.
type userEvent struct {
	Key    string `json:"key"`
	Amount int64  `json:"amount"`
}

func userTransform(table string) *strategies.Transform {
	u := writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"n", "total"}, Merge: writers.MergeAdd}
	return strategies.NewTransform(u,
		func(rec *batch.Record) (userEvent, error) {
			if string(rec.Value) == "PANIC" {
				panic("a bug in the user's decoder")
			}
			var ev userEvent
			if err := json.Unmarshal(rec.Value, &ev); err != nil {
				return ev, err
			}
			if ev.Key == "" {
				return ev, errors.New("no key")
			}
			return ev, nil
		},
		func(evs []userEvent) [][]any {
			rows := make([][]any, len(evs))
			for i, ev := range evs {
				rows[i] = []any{ev.Key, 1, ev.Amount}
			}
			return rows
		})
}

// TestTransform runs a user-defined transform with each SQL strategy: the
// user's table holds exact per-key counts, bad records (including one that
// panics the decoder) are dead-lettered, and the offsets are at the log
// ends.
func TestTransform(t *testing.T) {
	const events = 20_000
	for _, c := range []struct {
		strategy string
		kafka    kafkaTarget
		sink     sinkTarget
	}{
		{strategies.StrategySingle, kfake, sqliteSink},
		{strategies.StrategyAtLeastOnce, kfake, sqliteSink},
		{strategies.StrategyTxn, apacheKafka, mariaDB},
		{strategies.StrategySingle, apacheKafka, mariaDB},
	} {
		t.Run(c.strategy+"/"+c.kafka.name+"To"+c.sink.name, func(t *testing.T) {
			brokers, dsn := c.kafka.brokers(t), c.sink.dsn(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "tr")
			table := "tr_" + strings.NewReplacer("-", "_", ".", "_").Replace(job)
			table = table[:min(len(table), 60)]
			w := sinktest.OpenSQL(t, dsn)
			if _, err := w.DB().Exec("CREATE TABLE " + table + " (k VARCHAR(255) PRIMARY KEY, n BIGINT NOT NULL, total BIGINT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			exp := produce(t, brokers, topic, 11, 0, events)
			bad := []string{"not json", "PANIC", `{"amount": 3}`}
			produceRaw(t, brokers, topic, bad)

			cfg := baseConfig(t, brokers, topic, job, dsn)
			cfg.Strategy = c.strategy
			cfg.Transform = userTransform(table)
			cfg.MaxBatchRecords = 1500 // several batches
			res := runJob(t, cfg)
			if res.Records != events || res.DeadLetters != int64(len(bad)) {
				t.Errorf("run: %d records, %d dead letters; want %d and %d", res.Records, res.DeadLetters, events, len(bad))
			}
			got := keyTotals{}
			rows, err := w.DB().Query("SELECT k, n, total FROM " + table)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var k string
				var n, total int64
				if err := rows.Scan(&k, &n, &total); err != nil {
					t.Fatal(err)
				}
				got[k] = event.Total{Key: k, Events: n, Amount: total}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			checkPerKey(t, got, expectedPerKey(11, 0, events))
			if exp.Events != events {
				t.Fatalf("produced %d", exp.Events)
			}
			var dead int
			var reasons []string
			drows, err := w.DB().Query("SELECT reason FROM mb_dead_letters WHERE job = ?", job)
			if err != nil {
				t.Fatal(err)
			}
			for drows.Next() {
				var r string
				if err := drows.Scan(&r); err != nil {
					t.Fatal(err)
				}
				dead++
				reasons = append(reasons, r)
			}
			joined := strings.Join(reasons, " | ")
			if dead != len(bad) || !strings.Contains(joined, "panicked") || !strings.Contains(joined, "no key") || !strings.Contains(joined, "invalid character") {
				t.Errorf("dead letters = %d %q, want %d with the decoder's reasons", dead, joined, len(bad))
			}
			if c.strategy != strategies.StrategyAtLeastOnce {
				checkOffsets(t, w, brokers, job, topic)
			}
			var builtin int
			if err := w.DB().QueryRow("SELECT COUNT(*) FROM mb_totals WHERE job = ?", job).Scan(&builtin); err != nil || builtin != 0 {
				t.Errorf("the built-in job wrote %d mb_totals rows (%v); a transform replaces it", builtin, err)
			}
		})
	}
}

// TestTransformConfigErrors: a transform with a strategy that can't run it,
// or whose table is missing, stops before reading with a config error.
func TestTransformConfigErrors(t *testing.T) {
	brokers := kfake.brokers(t)
	topic := newTopic(t, brokers)
	dsn := sqliteSink.dsn(t)
	w := sinktest.OpenSQL(t, dsn)
	if _, err := w.DB().Exec("CREATE TABLE keyless (k TEXT, n INTEGER, total INTEGER)"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, strategy, sink, table, want string
	}{
		{"idempotent", strategies.StrategyIdempotent, "redis://127.0.0.1:1/0", "t", "built-in totals job only"},
		{"checkpoint", strategies.StrategyCheckpoint, dsn, "t", "built-in totals job only"},
		{"bad table name", strategies.StrategyTxn, dsn, "t; drop", "transform"},
		{"missing table", strategies.StrategyTxn, dsn, "no_such_table", "no_such_table"},
		{"table without a key on k", strategies.StrategyTxn, dsn, "keyless", "no primary or unique key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(t, brokers, topic, uniqueName(t, "cfg"), c.sink)
			cfg.Strategy = c.strategy
			cfg.Transform = userTransform(c.table)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := strategies.Run(ctx, cfg)
			if !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v, want ErrConfig mentioning %q", err, c.want)
			}
		})
	}
}

func TestTransformNilFunctions(t *testing.T) {
	u := writers.Upsert{Table: "t", Keys: []string{"k"}, Values: []string{"v"}}
	for name, tr := range map[string]*strategies.Transform{
		"nil decode":     strategies.NewTransform[int](u, nil, func([]int) [][]any { return nil }),
		"nil rows":       strategies.NewTransform(u, func(*batch.Record) (int, error) { return 0, nil }, nil),
		"zero Transform": {},
	} {
		cfg := strategies.Config{Brokers: []string{"x:9092"}, Sink: "sqlite://x.db", Transform: tr}
		if err := cfg.Validate(); !errors.Is(err, strategies.ErrConfig) {
			t.Errorf("%s: Validate = %v, want ErrConfig", name, err)
		}
	}
}

func produceRaw(t *testing.T, brokers []string, topic string, values []string) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, v := range values {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(i % testPartitions),
			Value: sarama.StringEncoder(v), Key: sarama.StringEncoder(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
}
