package systemtest

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// Totals past int64 (issue #14, item 5). Reaching 2^63 with real events
// takes 9.2 M of them at the amount bound, so the sink is seeded with
// totals just inside int64 and real events at the bound go through
// `microbatch run`: the run must exit 0, the totals must be exact past
// int64, verify must agree, and a SIGKILL inside a batch must not change
// that. The SQL sinks start from mb_totals as older versions created it
// (BIGINT / INTEGER amount), which the run migrates.

// overflowSeeds are the seeded totals: [events, amount] per key.
var overflowSeeds = map[string][2]int64{
	"hot":  {1, math.MaxInt64 - 1000}, // +10^12 events: past 2^63-1 at the first
	"cold": {1, math.MinInt64 + 1000}, // -10^12 events: past -2^63 at the first
	"warm": {1, math.MaxInt64 - 1000}, // small events: past 2^63-1 after a few; keeps the job's sum past int64
}

// overflowEvents are n events from id first on: hot and cold at the bound,
// warm and a few plain keys small.
func overflowEvents(first, n int64) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		id := first + int64(i)
		ev := event.Event{ID: id, TS: 1_764_489_600_000 + id}
		switch id % 4 {
		case 0:
			ev.Key, ev.Amount = []byte("hot"), event.MaxAbsAmount
		case 1:
			ev.Key, ev.Amount = []byte("cold"), -event.MaxAbsAmount
		case 2:
			ev.Key, ev.Amount = []byte("warm"), 1+id%997
		default:
			ev.Key, ev.Amount = []byte("k"+strconv.FormatInt(id%7, 10)), id%100
		}
		evs[i] = ev
	}
	return evs
}

// produceEvents writes evs over the topic's partitions so that each key's
// events are spread over all of them (and over batches).
func produceEvents(t *testing.T, brokers, topic string, partitions int32, evs []event.Event) {
	t.Helper()
	if err := kafkautil.EnsureTopic(kafkautil.SplitBrokers(brokers), topic, partitions); err != nil {
		t.Fatal(err)
	}
	cfg := kafkautil.Config("overflow-test")
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(kafkautil.SplitBrokers(brokers), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(evs))
	for i, ev := range evs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Partition: int32(i+i/4) % partitions,
			Value: sarama.ByteEncoder(event.Append(nil, ev.ID, string(ev.Key), ev.Amount, ev.TS))}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("producing %d events: %v", len(evs), err)
	}
}

// overflowWant is what the sink must hold: the seeds plus evs, per key.
type overflowWant struct {
	events map[string]int64
	amount map[string]*big.Int
}

func newOverflowWant() *overflowWant {
	w := &overflowWant{events: map[string]int64{}, amount: map[string]*big.Int{}}
	for k, s := range overflowSeeds {
		w.add(k, s[0], s[1])
	}
	return w
}

func (w *overflowWant) add(key string, events, amount int64) {
	if w.amount[key] == nil {
		w.amount[key] = new(big.Int)
	}
	w.events[key] += events
	w.amount[key].Add(w.amount[key], big.NewInt(amount))
}

func (w *overflowWant) addEvents(evs []event.Event) {
	for _, ev := range evs {
		w.add(string(ev.Key), 1, ev.Amount)
	}
}

func (w *overflowWant) totals() (events int64, amount *big.Int) {
	amount = new(big.Int)
	for k, n := range w.events {
		events += n
		amount.Add(amount, w.amount[k])
	}
	return events, amount
}

// overflowSink is one sink of the test: how to seed it and read it back.
type overflowSink struct {
	dsn  string
	seed func(t *testing.T, job string)
	read func(t *testing.T, job string) (events map[string]int64, amounts map[string]string)
}

// sqlOverflowSink creates mb_totals as older versions did (the run
// migrates it) and seeds it.
func sqlOverflowSink(t *testing.T, dsn string) overflowSink {
	w, err := sqlsink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	old := `CREATE TABLE mb_totals (job TEXT NOT NULL, k TEXT NOT NULL, events INTEGER NOT NULL, amount INTEGER NOT NULL, PRIMARY KEY (job, k))`
	if w.Dialect() == offsets.MySQL {
		old = `CREATE TABLE mb_totals (job VARCHAR(128) NOT NULL, k VARBINARY(255) NOT NULL, events BIGINT NOT NULL,
  amount BIGINT NOT NULL, PRIMARY KEY (job, k)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	if _, err := w.DB().ExecContext(t.Context(), old); err != nil {
		t.Fatalf("creating the old mb_totals: %v", err)
	}
	return overflowSink{
		dsn: dsn,
		seed: func(t *testing.T, job string) {
			for k, s := range overflowSeeds {
				if _, err := w.DB().ExecContext(t.Context(), `INSERT INTO mb_totals (job, k, events, amount) VALUES (?, ?, ?, ?)`, job, k, s[0], s[1]); err != nil {
					t.Fatal(err)
				}
			}
		},
		read: func(t *testing.T, job string) (map[string]int64, map[string]string) {
			rows, err := w.DB().QueryContext(t.Context(), `SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			events, amounts := map[string]int64{}, map[string]string{}
			for rows.Next() {
				var k string
				var n int64
				var a any
				if err := rows.Scan(&k, &n, &a); err != nil {
					t.Fatal(err)
				}
				events[k] = n
				switch v := a.(type) {
				case []byte:
					amounts[k] = string(v)
				case string:
					amounts[k] = v
				case int64:
					amounts[k] = strconv.FormatInt(v, 10)
				default:
					t.Fatalf("key %s: amount %v is a %T, not an exact integer", k, a, a)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return events, amounts
		},
	}
}

func redisOverflowSink(t *testing.T, dsn string) overflowSink {
	r, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return overflowSink{
		dsn: dsn,
		seed: func(t *testing.T, job string) {
			for k, s := range overflowSeeds {
				if err := r.Client().HSet(t.Context(), redissink.EventsKey(job), k, s[0]).Err(); err != nil {
					t.Fatal(err)
				}
				if err := r.Client().HSet(t.Context(), redissink.AmountKey(job), k, s[1]).Err(); err != nil {
					t.Fatal(err)
				}
			}
		},
		read: func(t *testing.T, job string) (map[string]int64, map[string]string) {
			ev, err := r.Client().HGetAll(t.Context(), redissink.EventsKey(job)).Result()
			if err != nil {
				t.Fatal(err)
			}
			amounts, err := r.Client().HGetAll(t.Context(), redissink.AmountKey(job)).Result()
			if err != nil {
				t.Fatal(err)
			}
			events := map[string]int64{}
			for k, v := range ev {
				if events[k], err = strconv.ParseInt(v, 10, 64); err != nil {
					t.Fatalf("events of %s: %v", k, err)
				}
			}
			return events, amounts
		},
	}
}

func TestTotalsPastInt64(t *testing.T) {
	for _, c := range []struct {
		name, strategy string
		sink           func(t *testing.T) overflowSink
	}{
		{"txn/MariaDB", string(strategies.StrategyTxn), func(t *testing.T) overflowSink {
			return sqlOverflowSink(t, testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL)))
		}},
		{"txn/SQLite", string(strategies.StrategyTxn), func(t *testing.T) overflowSink {
			return sqlOverflowSink(t, "sqlite://"+t.TempDir()+"/sink.db")
		}},
		{"single/SQLite", string(strategies.StrategySingle), func(t *testing.T) overflowSink {
			return sqlOverflowSink(t, "sqlite://"+t.TempDir()+"/sink.db")
		}},
		{"idempotent/Redis", string(strategies.StrategyIdempotent), func(t *testing.T) overflowSink {
			return redisOverflowSink(t, testutil.NeedServer(t, testutil.EnvRedis))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testTotalsPastInt64(t, c.strategy, c.sink(t))
		})
	}
}

func testTotalsPastInt64(t *testing.T, strategy string, sink overflowSink) {
	brokers := StartBroker(t, "--partitions", "4").Addr
	topic := UniqueName(t, "ovf")
	job := UniqueName(t, "ovf-job")
	dir := t.TempDir()
	sink.seed(t, job)
	want := newOverflowWant()
	args := []string{"run", "--brokers", brokers, "--topic", topic, "--job", job, "--sink", sink.dsn, "--strategy", strategy,
		"--interval", "100ms", "--max-batch-records", "50", "--until-idle", "1s", "--start-from", "earliest"}

	check := func(what string) {
		t.Helper()
		events, amounts := sink.read(t, job)
		for k, n := range want.events {
			if events[k] != n || amounts[k] != want.amount[k].String() {
				t.Errorf("%s: key %s holds events=%d amount=%s, want %d and %s", what, k, events[k], amounts[k], n, want.amount[k])
			}
		}
		if len(events) != len(want.events) {
			t.Errorf("%s: %d keys in the sink, want %d", what, len(events), len(want.events))
		}
		n, amount := want.totals()
		v := Run(t, dir, nil, time.Minute, "verify", "--sink", sink.dsn, "--job", job, "--strategy", strategy,
			"--expect-events", strconv.FormatInt(n, 10), "--expect-amount", amount.String())
		if v.Code != 0 || !strings.Contains(v.Stdout, "OK: exactly once") {
			t.Fatalf("%s: verify --expect-amount %s:\n%s", what, amount, v)
		}
	}

	evs := overflowEvents(0, 400)
	produceEvents(t, brokers, topic, 4, evs)
	want.addEvents(evs)
	if r := Run(t, dir, nil, 2*time.Minute, args...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	check("after the first run")
	if _, amount := want.totals(); amount.IsInt64() || want.amount["hot"].IsInt64() || want.amount["cold"].IsInt64() {
		t.Fatal("the expected totals stay inside int64: the test proves nothing")
	}

	// A restart with nothing new changes nothing.
	if r := Run(t, dir, nil, 2*time.Minute, args...); r.Code != 0 {
		t.Fatalf("restart: %s", r)
	}
	check("after a restart")

	// SIGKILL with a batch's totals written and its offsets not: the
	// restart replays the batch, which must count once.
	evs = overflowEvents(400, 400)
	produceEvents(t, brokers, topic, 4, evs)
	want.addEvents(evs)
	crashed := Run(t, dir, Env("MICROBATCH_CRASH_AT="+strategies.CrashAfterWriteBeforeOffsets+":1"), 2*time.Minute, args...)
	if crashed.Code != -1 {
		t.Fatalf("the run was not killed at %s (exit %d)\n%s", strategies.CrashAfterWriteBeforeOffsets, crashed.Code, crashed)
	}
	if r := Run(t, dir, nil, 2*time.Minute, args...); r.Code != 0 {
		t.Fatalf("restart after the crash: %s", r)
	}
	check("after a crash and a restart")
}

// TestVerifyAnyInteger: --expect-amount takes integers past int64 and
// negative ones; anything else is a configuration error.
func TestVerifyAnyInteger(t *testing.T) {
	Binary(t)
	dir := t.TempDir()
	sink := "sqlite://" + dir + "/sink.db"
	w, err := sqlsink.Open(context.Background(), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.CreateTables(context.Background()); err != nil {
		t.Fatal(err)
	}
	tx, err := w.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]any{{"big", "a", int64(1), int64(math.MaxInt64)}, {"big", "a", int64(1), int64(math.MaxInt64)},
		{"neg", "a", int64(1), int64(-5)}}
	if err := tx.Upsert(context.Background(), writers.Totals, rows); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	twice := new(big.Int).Mul(big.NewInt(math.MaxInt64), big.NewInt(2)).String()
	for _, c := range []struct {
		job, events, amount string
		code                int
	}{
		{"big", "2", twice, 0},
		{"big", "2", "18446744073709551613", 1},
		{"big", "2", "18_446_744_073_709_551_614", 0},
		{"neg", "1", "-5", 0},
		{"neg", "1", "5", 1},
		{"neg", "1", "1e3", 2},
		{"neg", "1", "5.0", 2},
	} {
		r := Run(t, dir, nil, time.Minute, "verify", "--sink", sink, "--job", c.job,
			"--expect-events", c.events, "--expect-amount", c.amount)
		if r.Code != c.code {
			t.Errorf("verify --job %s --expect-amount %s: exit %d, want %d\n%s", c.job, c.amount, r.Code, c.code, r)
		}
		if c.code == 0 && !strings.Contains(r.Stdout, fmt.Sprintf(" %s ", strings.ReplaceAll(c.amount, "_", ""))) {
			t.Errorf("verify does not show the amount %s\n%s", c.amount, r)
		}
	}
}
