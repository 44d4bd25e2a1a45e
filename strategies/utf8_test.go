package strategies_test

// Keys that are not valid UTF-8 (issue #14): encoding/json reads each bad
// byte as U+FFFD, so "page-\xff" and "page-\xfe" used to become one key
// "page-\uFFFD" and their totals merged — in the built-in decoder on every
// sink, and for a Transform's values in the write-ahead sink's checkpoint
// JSON. The built-in job now dead-letters such records; a Transform's
// strings go through the checkpoint byte for byte.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// rawRecord is a record as its bytes, produced as they are.
type rawRecord struct{ key, value []byte }

// produceRawRecords writes recs to topic with a plain sarama producer (the
// generator never writes keys that are not UTF-8) and returns where each
// landed, in recs' order.
func produceRawRecords(t *testing.T, brokers []string, topic string, recs []rawRecord) []partOff {
	t.Helper()
	cfg := kafkautil.Config("microbatch-test-utf8-producer")
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(r.key), Value: sarama.ByteEncoder(r.value)}
	}
	err = p.SendMessages(msgs)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("producing: %v", err)
	}
	at := make([]partOff, len(msgs))
	for i, m := range msgs {
		at[i] = partOff{m.Partition, m.Offset}
	}
	return at
}

// utf8Input is the built-in job's input of these tests: generated events
// with, spread among them, events whose keys are not valid UTF-8 (to be
// dead-lettered: "page-\xff" once, "page-\xfe" ten times, a lone surrogate
// escape twice) and events whose keys are valid but near them (a real
// U+FFFD, "café" in NFC and in NFD), which must keep their own totals.
type utf8Input struct {
	recs []rawRecord
	bad  map[int]string // index in recs -> what the reason must contain
	want keyTotals
}

func newUTF8Input() utf8Input {
	in := utf8Input{bad: map[int]string{}, want: keyTotals{}}
	rec := func(id int64, keyJSON string, amount int64) []byte {
		return []byte(`{"id":` + strconv.FormatInt(id, 10) + `,"key":"` + keyJSON + `","amount":` +
			strconv.FormatInt(amount, 10) + `,"ts":1700000000000}`)
	}
	type special struct {
		keyJSON string // the key as written in the record's JSON text
		key     string // the decoded key; "" for a record to dead-letter
		reason  string // what the dead letter's reason must contain
		n       int
	}
	specials := []special{
		{"page-\xff", "", `"page-\xff"`, 1},
		{"page-\xfe", "", `"page-\xfe"`, 10},
		{`page-\ud800`, "", `\ud800`, 2},
		{"page-\uFFFD", "page-\uFFFD", "", 3},
		{`page-\ufffd`, "page-\uFFFD", "", 1}, // the same key, escaped
		{"caf\u00e9", "caf\u00e9", "", 4},
		{"cafe\u0301", "cafe\u0301", "", 5},
		{"page-ff", "page-ff", "", 6},
	}
	gen := event.NewGenerator(41, 50)
	id := int64(1_000_000)
	for i := range 2000 {
		gid, key, amount := gen.Next()
		in.recs = append(in.recs, rawRecord{[]byte(key), event.Append(nil, gid, key, amount, 1700000000000)})
		in.want.add(key, amount)
		if i%100 != 50 {
			continue
		}
		for j := range specials {
			s := &specials[j]
			if s.n == 0 {
				continue
			}
			s.n--
			id++
			amount := id % 1000
			if s.key == "" {
				in.bad[len(in.recs)] = s.reason
			} else {
				in.want.add(s.key, amount)
			}
			in.recs = append(in.recs, rawRecord{[]byte(s.keyJSON), rec(id, s.keyJSON, amount)})
		}
	}
	for _, s := range specials {
		if s.n != 0 {
			panic("test set-up: not every special record was placed")
		}
	}
	return in
}

// dead is one stored dead letter.
type dead struct {
	reason  string
	payload []byte
}

// checkUTF8DeadLetters compares the stored dead letters with the bad
// records: each one there once, with its exact payload and a reason that
// is valid UTF-8, says why and quotes the key escaped.
func checkUTF8DeadLetters(t *testing.T, in utf8Input, at []partOff, got map[partOff]dead) {
	t.Helper()
	want := map[partOff]int{}
	for i := range in.bad {
		want[at[i]] = i
	}
	for po, d := range got {
		i, ok := want[po]
		if !ok {
			t.Errorf("dead letter %d@%d is not a bad record: reason %q, payload %.80q", po.part, po.off, d.reason, d.payload)
			continue
		}
		r := in.recs[i]
		if string(d.payload) != string(r.value) {
			t.Errorf("dead letter %d@%d: payload %q, want %q", po.part, po.off, d.payload, r.value)
		}
		if !utf8.ValidString(d.reason) || !strings.Contains(d.reason, `"key"`) || !strings.Contains(d.reason, "UTF-8") || !strings.Contains(d.reason, in.bad[i]) {
			t.Errorf("dead letter %d@%d (key %q): reason %q, want valid UTF-8 naming field \"key\", UTF-8 and %s", po.part, po.off, r.key, d.reason, in.bad[i])
		}
	}
	for po, i := range want {
		if _, ok := got[po]; !ok {
			t.Errorf("record %d@%d with key %q is not dead-lettered", po.part, po.off, in.recs[i].key)
		}
	}
}

// readSQLDeadLetters reads job's mb_dead_letters.
func readSQLDeadLetters(t *testing.T, w *sqlsink.Writer, job string) map[partOff]dead {
	t.Helper()
	rows, err := w.DB().Query(`SELECT part, off, reason, payload FROM mb_dead_letters WHERE job = ?`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[partOff]dead{}
	for rows.Next() {
		var po partOff
		var d dead
		if err := rows.Scan(&po.part, &po.off, &d.reason, &d.payload); err != nil {
			t.Fatal(err)
		}
		out[po] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKeysNotUTF8 runs the built-in job over utf8Input into every kind of
// sink: per-key totals exact (nothing merged into "page-\uFFFD"), the
// records whose keys are not UTF-8 dead-lettered with the reason.
func TestKeysNotUTF8(t *testing.T) {
	for _, c := range []struct {
		name  string
		kafka kafkaTarget
		sink  sinkTarget
		setup func(cfg *strategies.Config, t *testing.T)
	}{
		{"txn/kfakeToSQLite", kfake, sqliteSink, nil},
		{"txn/ApacheKafkaToMariaDB", apacheKafka, mariaDB, nil},
		{"txn/ApacheKafkaToPostgreSQL", apacheKafka, postgresSink, nil},
		{"single/ApacheKafkaToPostgreSQL", apacheKafka, postgresSink, func(cfg *strategies.Config, _ *testing.T) {
			cfg.Strategy = strategies.StrategySingle
		}},
		{"idempotent/kfakeToRedis", kfake, redisSink, func(cfg *strategies.Config, _ *testing.T) {
			cfg.Strategy = strategies.StrategyIdempotent
		}},
		{"checkpointWAL/kfakeToSQLite", kfake, sqliteSink, func(cfg *strategies.Config, t *testing.T) {
			cfg.Strategy = strategies.StrategyCheckpoint
			cfg.Checkpoint.SinkMode = strategies.SinkModeWAL
			cfg.Checkpoint.StateDir = t.TempDir()
			cfg.Checkpoint.OperatorParallelism = 2
			cfg.Checkpoint.Interval = 50 * time.Millisecond
			cfg.Checkpoint.Timeout = 30 * time.Second
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			brokers, dsn := c.kafka.brokers(t), c.sink.dsn(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "utf8")
			in := newUTF8Input()
			at := produceRawRecords(t, brokers, topic, in.recs)
			cfg := baseConfig(t, brokers, topic, job, dsn)
			if c.setup != nil {
				c.setup(&cfg, t)
			}
			res := runJob(t, cfg)
			if want := int64(len(in.recs) - len(in.bad)); res.Records != want || res.DeadLetters != int64(len(in.bad)) {
				t.Errorf("run: %d records, %d dead letters; want %d and %d", res.Records, res.DeadLetters, want, len(in.bad))
			}
			var perKey keyTotals
			var dls map[partOff]dead
			if cfg.Strategy == strategies.StrategyIdempotent {
				perKey, dls = readRedisBuiltin(t, dsn, job, topic)
			} else {
				w := sinktest.OpenSQL(t, dsn)
				perKey, dls = readPerKey(t, w, job), readSQLDeadLetters(t, w, job)
			}
			checkPerKey(t, perKey, in.want)
			checkUTF8DeadLetters(t, in, at, dls)
		})
	}
}

// readRedisBuiltin reads the built-in job's per-key totals and dead
// letters from Redis.
func readRedisBuiltin(t *testing.T, dsn, job, topic string) (keyTotals, map[partOff]dead) {
	t.Helper()
	r, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keys, _ := r.Client().Keys(context.Background(), "mb:{"+job+"}:*").Result(); len(keys) > 0 {
			r.Client().Del(context.Background(), keys...)
		}
		r.Close()
	})
	ctx := t.Context()
	events, err := r.Client().HGetAll(ctx, "mb:{"+job+"}:totals:events").Result()
	if err != nil {
		t.Fatal(err)
	}
	amounts, err := r.Client().HGetAll(ctx, "mb:{"+job+"}:totals:amount").Result()
	if err != nil {
		t.Fatal(err)
	}
	perKey := keyTotals{}
	for k, n := range events {
		tt := event.Total{Key: k}
		var err1, err2 error
		tt.Events, err1 = strconv.ParseInt(n, 10, 64)
		tt.Amount, err2 = strconv.ParseInt(amounts[k], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("totals of %q: %v", k, err)
		}
		perKey[k] = tt
	}
	if len(amounts) != len(events) {
		t.Errorf("%d keys have events, %d an amount", len(events), len(amounts))
	}
	dls := map[partOff]dead{}
	for p := range int32(testPartitions) {
		all, err := r.Client().HGetAll(ctx, fmt.Sprintf("mb:{%s}:dead:%s:%d", job, topic, p)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for off, v := range all {
			var d struct {
				Reason  string `json:"reason"`
				Payload []byte `json:"payload"`
			}
			if err := json.Unmarshal([]byte(v), &d); err != nil {
				t.Fatalf("dead letter %d@%s = %q: %v", p, off, v, err)
			}
			o, err := strconv.ParseInt(off, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			dls[partOff{p, o}] = dead{d.Reason, d.Payload}
		}
	}
	return perKey, dls
}

// TestTransformKeysNotUTF8 runs a Transform whose key is the Kafka record
// key as it is — bytes that need not be UTF-8 — into SQLite, and in
// checkpoint mode into PostgreSQL (a BYTEA key; prepared transactions and
// write-ahead): through the write-ahead sink's checkpoint JSON
// "page-\xff" (1 record) and "page-\xfe" (10) stay two rows, as on the
// transactional path; a decode error quoting such a key is stored escaped.
func TestTransformKeysNotUTF8(t *testing.T) {
	const (
		sqliteDDL = "CREATE TABLE %s (k TEXT PRIMARY KEY, n INTEGER NOT NULL)"
		pgDDL     = "CREATE TABLE %s (k BYTEA PRIMARY KEY, n BIGINT NOT NULL)"
	)
	for _, c := range []struct {
		name     string
		strategy strategies.Strategy
		mode     strategies.SinkMode
		sink     sinkTarget
		ddl      string
	}{
		{"checkpointWAL", strategies.StrategyCheckpoint, strategies.SinkModeWAL, sqliteSink, sqliteDDL},
		{"txn", strategies.StrategyTxn, "", sqliteSink, sqliteDDL},
		{"checkpointPG2PCToPostgreSQL", strategies.StrategyCheckpoint, strategies.SinkMode2PC, postgresSink, pgDDL},
		{"checkpointWALToPostgreSQL", strategies.StrategyCheckpoint, strategies.SinkModeWAL, postgresSink, pgDDL},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := c.sink.dsn(t)
			brokers := kfake.brokers(t)
			topic, job := newTopic(t, brokers), uniqueName(t, "tru8")
			table := transformTable(job)
			w := sinktest.OpenSQL(t, dsn)
			if _, err := w.DB().Exec(fmt.Sprintf(c.ddl, table)); err != nil {
				t.Fatal(err)
			}
			var recs []rawRecord
			want := map[string]int64{}
			add := func(key string, n int) {
				for range n {
					recs = append(recs, rawRecord{[]byte(key), []byte("x")})
				}
				want[key] += int64(n)
			}
			add("page-\xff", 1)
			add("page-\xfe", 10)
			add("page-\uFFFD", 3)
			add("caf\xc3", 2)
			add("plain", 4)
			badAt := len(recs)
			recs = append(recs, rawRecord{[]byte("bad-\xff"), []byte("x")})
			at := produceRawRecords(t, brokers, topic, recs)

			cfg := baseConfig(t, brokers, topic, job, dsn)
			cfg.Strategy, cfg.Checkpoint.SinkMode = c.strategy, c.mode
			if c.strategy == strategies.StrategyCheckpoint {
				cfg.Checkpoint.StateDir = t.TempDir()
				cfg.Checkpoint.Interval = 50 * time.Millisecond
				cfg.Checkpoint.Timeout = 30 * time.Second
			}
			u := writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"n"}, Merge: writers.MergeAdd}
			cfg.Transform = strategies.NewTransform(u,
				func(rec *batch.Record) (string, error) {
					if strings.HasPrefix(string(rec.Key), "bad-") {
						return "", errors.New("rejected key " + string(rec.Key))
					}
					return string(rec.Key), nil
				},
				func(keys []string) [][]any {
					rows := make([][]any, len(keys))
					for i, k := range keys {
						rows[i] = []any{k, 1}
					}
					return rows
				})
			res := runJob(t, cfg)
			if res.Records != int64(len(recs)-1) || res.DeadLetters != 1 {
				t.Errorf("run: %d records, %d dead letters; want %d and 1", res.Records, res.DeadLetters, len(recs)-1)
			}

			if got := keyCounts(t, w, table); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("table rows (key: count) %v, want %v", quoteKeys(got), quoteKeys(want))
			}
			dls := readSQLDeadLetters(t, w, job)
			d, ok := dls[at[badAt]]
			if len(dls) != 1 || !ok || d.reason != `rejected key bad-\xff` || string(d.payload) != "x" {
				t.Errorf("dead letters %+v, want one at %v with reason %q", dls, at[badAt], `rejected key bad-\xff`)
			}
		})
	}
}

// keyCounts reads table's rows (k, n) as key bytes: count.
func keyCounts(t *testing.T, w *sqlsink.Writer, table string) map[string]int64 {
	t.Helper()
	rows, err := w.DB().Query("SELECT k, n FROM " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int64{}
	for rows.Next() {
		var k []byte
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[string(k)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// quoteKeys shows a map's keys quoted (bytes that are not UTF-8 visible).
func quoteKeys(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[strconv.Quote(k)] = v
	}
	return out
}
