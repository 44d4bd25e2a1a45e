package benchmarks

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// BenchmarkTransform measures what a user-defined job costs against the
// built-in one (issue #8): per round, on the topic of
// BenchmarkTxnVsRawConsume (1M events, 4 partitions, 1,000 keys) into
// MariaDB, a raw consume, `txn` with the built-in totals job (its
// allocation-free decoder), and `txn` with a Transform written the way a
// user would — encoding/json into a struct, a map per batch summing per
// key, rows into the user's own table — and `txn` with a transform that
// only counts records per record key (no payload decoding: the cost of the
// transform machinery itself). Each transform run must leave its table
// exact (1M events). Run with -benchtime=1x; see README.md.
func BenchmarkTransform(b *testing.B) {
	brokers, sink, events, topic, w := transformBench(b, benchFormat(b))

	var raw, builtin, user, keyed float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tables := make([]string, 2)
		for j := range tables {
			tables[j] = fmt.Sprintf("bench_user_%d_%d_%d", time.Now().UnixNano(), i, j)
			if _, err := w.DB().Exec("CREATE TABLE " + tables[j] + " (k VARCHAR(255) PRIMARY KEY, events BIGINT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
				b.Fatal(err)
			}
		}
		job := func(kind string) string { return fmt.Sprintf("bench-%s-%d-%d", kind, time.Now().UnixNano(), i) }
		r := rawConsume(b, brokers, topic)
		bt := runTxn(b, brokers, topic, sink, job("builtin"), events, nil)
		ut := runTxn(b, brokers, topic, sink, job("json"), events, userTotals(tables[0]))
		kt := runTxn(b, brokers, topic, sink, job("key"), events, keyCounts(tables[1]))
		for _, t := range tables {
			checkUserTable(b, w.DB(), t, events)
			w.DB().Exec("DROP TABLE " + t)
		}
		raw += float64(events) / r.Seconds()
		builtin += float64(events) / bt.Seconds()
		user += float64(events) / ut.Seconds()
		keyed += float64(events) / kt.Seconds()
		b.Logf("round %d: raw %.0f ev/s, built-in %.0f ev/s, json transform %.0f ev/s (× %.2f), record-key transform %.0f ev/s (× %.2f of built-in)", i,
			float64(events)/r.Seconds(), float64(events)/bt.Seconds(), float64(events)/ut.Seconds(), bt.Seconds()/ut.Seconds(),
			float64(events)/kt.Seconds(), bt.Seconds()/kt.Seconds())
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(raw/n, "raw_events/s")
	b.ReportMetric(builtin/n, "builtin_events/s")
	b.ReportMetric(user/n, "json_transform_events/s")
	b.ReportMetric(keyed/n, "key_transform_events/s")
	b.ReportMetric(user/builtin, "json/builtin")
	b.ReportMetric(keyed/builtin, "key/builtin")
}

// transformBench readies a benchmark of a job into MariaDB on the
// throughput topic of events in format f: the brokers, the sink, the
// number of events, the topic and a writer on the sink (closed with b).
func transformBench(b *testing.B, f event.Format) (brokers []string, sink string, events int64, topic string, w *sqlsink.Writer) {
	brokers = []string{testutil.NeedServer(b, testutil.EnvKafka)}
	sink = testutil.NeedServer(b, testutil.EnvMySQL)
	events = benchEvents(b)
	topic = benchTopic(events, f)
	ensureData(b, brokers, topic, events, f)
	w, err := sqlsink.Open(b.Context(), sink)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	return brokers, sink, events, topic, w
}

// keyCounts counts records per record key with no payload decoding: what
// the transform machinery itself costs.
func keyCounts(table string) *strategies.Transform {
	return strategies.NewTransform(
		writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"events", "amount"}, Merge: writers.MergeAdd},
		func(rec *batch.Record) (string, error) { return string(rec.Key), nil },
		func(keys []string) [][]any {
			counts := map[string]int64{}
			for _, k := range keys {
				counts[k]++
			}
			rows := make([][]any, 0, len(counts))
			for k, c := range counts {
				rows = append(rows, []any{k, c, 0})
			}
			return rows
		})
}

type userEvent struct {
	Key    string `json:"key"`
	Amount int64  `json:"amount"`
}

// userTotals is the built-in job written as a user would write it.
func userTotals(table string) *strategies.Transform {
	return strategies.NewTransform(
		writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"events", "amount"}, Merge: writers.MergeAdd},
		func(rec *batch.Record) (userEvent, error) {
			var ev userEvent
			err := json.Unmarshal(rec.Value, &ev)
			return ev, err
		},
		func(evs []userEvent) [][]any {
			type sum struct{ events, amount int64 }
			sums := map[string]*sum{}
			for _, ev := range evs {
				s := sums[ev.Key]
				if s == nil {
					s = &sum{}
					sums[ev.Key] = s
				}
				s.events++
				s.amount += ev.Amount
			}
			rows := make([][]any, 0, len(sums))
			for k, s := range sums {
				rows = append(rows, []any{k, s.events, s.amount})
			}
			return rows
		})
}

func checkUserTable(b *testing.B, db *sqlx.DB, table string, events int64) {
	b.Helper()
	var got int64
	if err := db.QueryRow("SELECT COALESCE(SUM(events), 0) FROM " + table).Scan(&got); err != nil {
		b.Fatal(err)
	}
	if got != events {
		b.Fatalf("transform table %s holds %d events, want %d", table, got, events)
	}
}
