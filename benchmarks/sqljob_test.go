package benchmarks

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// sqlBenchQuery is issue 18's example query over the fields of wide events:
// per user (the record key) and kind, counts, exact sums of an integer and
// of a decimal field, and the first and last event time, of the events
// with a positive quantity and one of three kinds.
const sqlBenchQuery = "INSERT INTO %s SELECT `key` AS user_id, event_type AS kind, " +
	"COUNT(*) AS n, SUM(quantity) AS qty, SUM(unit_price) AS revenue, MIN(ts) AS first_ts, MAX(ts) AS last_ts " +
	"FROM %s WHERE quantity > 0 AND event_type IN ('purchase', 'refund', 'page_view') GROUP BY user_id, kind"

// BenchmarkSQLJob measures a SQL job (issue 18) against the raw-consume
// ceiling and the built-in job, per round on the same topic (wide events
// unless MICROBATCH_BENCH_FORMAT says otherwise; 1M unless
// MICROBATCH_BENCH_EVENTS): a raw consume, `txn` with the built-in job,
// `txn` with sqlBenchQuery, and `at-least-once` with it (the baseline
// without the exactly-once commit). Each SQL job's table must equal the query
// evaluated in memory over the same events. Run with -benchtime=1x; see
// README.md.
func BenchmarkSQLJob(b *testing.B) {
	f := event.FormatWide
	if os.Getenv("MICROBATCH_BENCH_FORMAT") != "" {
		f = benchFormat(b)
	}
	brokers, sink, events, topic, w := transformBench(b, f)
	want := expectedSQLBench(b, events, f, topic)

	var raw, builtin, sql, alo float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tables := [2]string{}
		queries := [2]*sqljob.Query{}
		for j := range tables {
			tables[j] = fmt.Sprintf("bench_sql_%d_%d_%d", time.Now().UnixNano(), i, j)
			q, err := sqljob.Compile(fmt.Sprintf(sqlBenchQuery, tables[j], "`"+topic+"`"), sqljob.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := q.EnsureTable(b.Context(), w.DB()); err != nil {
				b.Fatal(err)
			}
			queries[j] = q
		}
		job := func(kind string) string { return fmt.Sprintf("bench-%s-%d-%d", kind, time.Now().UnixNano(), i) }
		r := rawConsume(b, brokers, topic)
		bt := runTxn(b, brokers, topic, sink, job("builtin"), events, nil)
		st := runTxn(b, brokers, topic, sink, job("sql"), events, strategies.SQLTransform(queries[0]))
		at := runStrategy(b, strategies.StrategyAtLeastOnce, brokers, topic, sink, job("sql-alo"), events, strategies.SQLTransform(queries[1]))
		for _, t := range tables {
			checkSQLBench(b, w, t, want)
			w.DB().Exec("DROP TABLE " + t)
		}
		raw += float64(events) / r.Seconds()
		builtin += float64(events) / bt.Seconds()
		sql += float64(events) / st.Seconds()
		alo += float64(events) / at.Seconds()
		b.Logf("round %d (%s): raw %.0f ev/s; built-in txn %.0f ev/s (× %.2f of raw); SQL job: txn %.0f ev/s (× %.2f of raw, × %.2f of built-in), at-least-once %.0f ev/s (txn × %.2f of it)", i, f,
			float64(events)/r.Seconds(), float64(events)/bt.Seconds(), r.Seconds()/bt.Seconds(),
			float64(events)/st.Seconds(), r.Seconds()/st.Seconds(), bt.Seconds()/st.Seconds(),
			float64(events)/at.Seconds(), at.Seconds()/st.Seconds())
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(raw/n, "raw_events/s")
	b.ReportMetric(builtin/n, "builtin_events/s")
	b.ReportMetric(sql/n, "sql_events/s")
	b.ReportMetric(alo/n, "sql_alo_events/s")
	b.ReportMetric(sql/raw, "sql/raw")
	b.ReportMetric(sql/builtin, "sql/builtin")
	b.ReportMetric(sql/alo, "sql/alo")
}

// expectedSQLBench evaluates the query in memory over the events the
// producer wrote (the same generator and seed; ts is the time of
// production, so first_ts and last_ts are not compared): group -> n, qty,
// revenue as canonical text.
func expectedSQLBench(b *testing.B, events int64, f event.Format, topic string) map[string][3]string {
	q, err := sqljob.Compile(fmt.Sprintf(sqlBenchQuery, "t", "`"+topic+"`"), sqljob.Options{})
	if err != nil {
		b.Fatal(err)
	}
	a := q.NewAggregate()
	g := event.NewGenerator(benchSeed, benchKeys)
	var buf []byte
	for range events {
		id, key, amount := g.Next()
		buf = event.AppendFormat(buf[:0], f, benchSeed, id, key, amount, 0)
		if err := a.Add(buf); err != nil {
			b.Fatalf("the in-memory query rejected a generated event: %v", err)
		}
	}
	want := map[string][3]string{}
	for _, r := range a.Rows() {
		want[r[0].(string)+"\x00"+r[1].(string)] = [3]string{sqljob.Canonical(r[2]), sqljob.Canonical(r[3]), sqljob.Canonical(r[4])}
	}
	return want
}

func checkSQLBench(b *testing.B, w *sqlsink.Writer, table string, want map[string][3]string) {
	b.Helper()
	rows, err := w.DB().Query("SELECT user_id, kind, n, qty, revenue FROM " + table)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var user, kind []byte
		var n, qty, revenue any
		if err := rows.Scan(&user, &kind, &n, &qty, &revenue); err != nil {
			b.Fatal(err)
		}
		k := string(user) + "\x00" + string(kind)
		g := [3]string{sqljob.Canonical(n), sqljob.Canonical(qty), sqljob.Canonical(revenue)}
		if want[k] != g {
			b.Fatalf("%s: group %q/%q holds %v, want %v", table, user, kind, g, want[k])
		}
		got++
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if got != len(want) {
		b.Fatalf("%s holds %d groups, want %d", table, got, len(want))
	}
}
