package benchmarks

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// rowBenchQuery is issue 26's benchmark job: every record one row of 5
// columns, no casts (each column TEXT holding the value's text, as
// docs/sql-jobs.md says of a created table).
const rowBenchQuery = "INSERT INTO %s SELECT id, `key`, amount, status, ts FROM %s"

// rowBenchTyped is the same job with each column's type chosen by a cast:
// BIGINT and VARCHAR columns.
const rowBenchTyped = "INSERT INTO %s SELECT CAST(id AS SIGNED) AS id, CAST(`key` AS CHAR(16)) AS `key`, " +
	"CAST(amount AS SIGNED) AS amount, CAST(status AS CHAR(16)) AS status, CAST(ts AS SIGNED) AS ts FROM %s"

// rowBenchQueries are BenchmarkRowJob's sub-benchmarks.
var rowBenchQueries = []struct{ name, sql string }{{"text", rowBenchQuery}, {"typed", rowBenchTyped}}

// rowStatuses are the status field's values, by id.
var rowStatuses = [...]string{"paid", "shipped", "delivered", "refunded"}

// appendRowRecord writes one record of the row benchmark as Python's
// json.dumps does (", " and ": "), about 120 bytes: an order with the
// four fields of the built-in job's events (so that job reads the same
// records) and two more, one of them not selected. The bytes depend only
// on the arguments (ts comes from id), so a topic is reproducible.
func appendRowRecord(dst []byte, id int64, key string, amount int64) []byte {
	dst = append(dst, `{"id": `...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `, "key": "`...)
	dst = append(dst, key...)
	dst = append(dst, `", "amount": `...)
	dst = strconv.AppendInt(dst, amount, 10)
	dst = append(dst, `, "status": "`...)
	dst = append(dst, rowStatuses[id%int64(len(rowStatuses))]...)
	dst = append(dst, `", "customer": "customer-`...)
	dst = fmt.Appendf(dst, "%06d", id%100_000)
	dst = append(dst, `", "ts": `...)
	dst = strconv.AppendInt(dst, 1_764_547_200_000+id, 10)
	return append(dst, '}')
}

// rowWant is what a row job's table must hold after the benchmark job:
// one row per record, each id once, and the sum of the amounts.
type rowWant struct{ rows, amount int64 }

// ensureRowData fills topic with events row records once (keyed by the
// record's key, 4 partitions; later runs reuse it) and returns what the
// table must hold, from the same generator.
func ensureRowData(b *testing.B, brokers []string, topic string, events int64) rowWant {
	b.Helper()
	var want rowWant
	g := event.NewGenerator(benchSeed, benchKeys)
	for range events {
		_, _, amount := g.Next()
		want.rows++
		want.amount += amount
	}
	if err := kafkautil.EnsureTopic(brokers, topic, benchPartitions); err != nil {
		b.Fatal(err)
	}
	var have int64
	for _, e := range testutil.EndOffsets(b, brokers, topic) {
		have += e
	}
	switch {
	case have == events:
		return want
	case have != 0:
		b.Fatalf("topic %s holds %d records, want 0 or %d: delete it", topic, have, events)
	}
	start := time.Now()
	cfg := sarama.NewConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Errors = true
	cfg.Producer.Flush.Bytes = 1 << 20
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Producer.Retry.Max = 10
	cfg.Version = sarama.V2_5_0_0
	p, err := sarama.NewAsyncProducer(brokers, cfg)
	if err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { // the Errors channel must be drained, or the producer deadlocks
		var first error
		for e := range p.Errors() {
			if first == nil {
				first = e.Err
			}
		}
		errc <- first
	}()
	g = event.NewGenerator(benchSeed, benchKeys)
	var size int64
	for range events {
		id, key, amount := g.Next()
		v := appendRowRecord(nil, id, key, amount)
		size += int64(len(v))
		p.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(v)}
	}
	p.AsyncClose()
	if err := <-errc; err != nil {
		b.Fatalf("producing to %s: %v", topic, err)
	}
	b.Logf("produced %d row records (%d bytes on average) into %s in %v", events, size/events, topic, time.Since(start).Round(time.Millisecond))
	return want
}

// rowBenchTopic names the row benchmark's topic of events records.
func rowBenchTopic(events int64) string {
	return fmt.Sprintf("bench-rows-%d-p%d-k%d-s%d", events, benchPartitions, benchKeys, benchSeed)
}

// rowBenchInterval is the batch interval of BenchmarkRowJob's runs:
// MICROBATCH_BENCH_INTERVAL, or run's default (strategies.DefaultInterval).
func rowBenchInterval(b *testing.B) time.Duration {
	s := os.Getenv("MICROBATCH_BENCH_INTERVAL")
	if s == "" {
		return strategies.DefaultInterval
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		b.Fatalf("MICROBATCH_BENCH_INTERVAL=%q is not a positive duration", s)
	}
	return d
}

// BenchmarkRowJob measures a row job (issue 26): rowBenchQuery, every
// record of ~120 bytes one row of 5 columns in MariaDB. Per round, on one
// topic (1M records unless MICROBATCH_BENCH_EVENTS; 4 partitions, Apache
// Kafka), back to back: a raw consume (the ceiling), `txn` with the
// built-in job on the same records, then the row job with `txn` and with
// `at-least-once` (the same work without the exactly-once commit; the two
// swap places every round, so drift weighs on both alike). Every run is
// at run's default flags but the interval (MICROBATCH_BENCH_INTERVAL,
// default 1s); rates are records from start to the commit holding the
// last one. Each row job's table must hold every record once. Two
// sub-benchmarks: text (rowBenchQuery, no casts: TEXT columns) and typed
// (rowBenchTyped: BIGINT and VARCHAR). Run with -benchtime=2x or more;
// see README.md, "Row jobs".
func BenchmarkRowJob(b *testing.B) {
	for _, rq := range rowBenchQueries {
		b.Run(rq.name, func(b *testing.B) { benchRowJob(b, rq.sql) })
	}
}

func benchRowJob(b *testing.B, query string) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	sink := testutil.NeedServer(b, testutil.EnvMySQL)
	events := benchEvents(b)
	topic := rowBenchTopic(events)
	want := ensureRowData(b, brokers, topic, events)
	interval := rowBenchInterval(b)
	w, err := sqlsink.Open(b.Context(), sink)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()

	var raw, builtin, txn, alo float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var tables [2]string
		var queries [2]*sqljob.Query
		for j := range tables {
			tables[j] = fmt.Sprintf("bench_rows_%d_%d_%d", time.Now().UnixNano(), i, j)
			q, err := sqljob.Compile(fmt.Sprintf(query, tables[j], "`"+topic+"`"), sqljob.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := q.EnsureTable(b.Context(), w.DB()); err != nil {
				b.Fatal(err)
			}
			queries[j] = q
		}
		job := func(kind string) string { return fmt.Sprintf("bench-rows-%s-%d-%d", kind, time.Now().UnixNano(), i) }
		run := func(s strategies.Strategy, kind string, tr *strategies.Transform) time.Duration {
			return runStrategyEvery(b, s, interval, brokers, topic, sink, job(kind), events, tr)
		}
		r := rawConsume(b, brokers, topic)
		bt := run(strategies.StrategyTxn, "builtin", nil)
		var st, at time.Duration
		if i%2 == 0 {
			st = run(strategies.StrategyTxn, "txn", strategies.SQLTransform(queries[0]))
			at = run(strategies.StrategyAtLeastOnce, "alo", strategies.SQLTransform(queries[1]))
		} else {
			at = run(strategies.StrategyAtLeastOnce, "alo", strategies.SQLTransform(queries[1]))
			st = run(strategies.StrategyTxn, "txn", strategies.SQLTransform(queries[0]))
		}
		for _, t := range tables {
			checkRowTable(b, w, t, want)
			w.DB().Exec("DROP TABLE " + t)
		}
		rate := func(d time.Duration) float64 { return float64(events) / d.Seconds() }
		raw += rate(r)
		builtin += rate(bt)
		txn += rate(st)
		alo += rate(at)
		load, _ := os.ReadFile("/proc/loadavg")
		b.Logf("round %d (interval %v, load %.14s): raw %.0f rec/s; built-in txn %.0f rec/s; row job: txn %.0f rows/s (× %.2f of raw, × %.2f of built-in), at-least-once %.0f rows/s (txn × %.2f of it)",
			i, interval, load, rate(r), rate(bt), rate(st), r.Seconds()/st.Seconds(), bt.Seconds()/st.Seconds(), rate(at), at.Seconds()/st.Seconds())
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(raw/n, "raw_rec/s")
	b.ReportMetric(builtin/n, "builtin_rec/s")
	b.ReportMetric(txn/n, "txn_rows/s")
	b.ReportMetric(alo/n, "alo_rows/s")
	b.ReportMetric(txn/raw, "txn/raw")
	b.ReportMetric(txn/builtin, "txn/builtin")
	b.ReportMetric(txn/alo, "txn/alo")
}

// checkRowTable fails unless table holds every record once: as many rows
// as records, each id once, and the amounts' sum.
func checkRowTable(b *testing.B, w *sqlsink.Writer, table string, want rowWant) {
	b.Helper()
	var rows, ids, amount int64
	if err := w.DB().QueryRow("SELECT COUNT(*), COUNT(DISTINCT id), CAST(SUM(amount) AS SIGNED) FROM "+table).Scan(&rows, &ids, &amount); err != nil {
		b.Fatal(err)
	}
	if rows != want.rows || ids != want.rows || amount != want.amount {
		b.Fatalf("%s holds %d rows of %d ids, amounts summing to %d; want %d rows, each id once, summing to %d", table, rows, ids, amount, want.rows, want.amount)
	}
}

// BenchmarkRowJobRSS drains a backlog of row records (4M unless
// MICROBATCH_BENCH_EVENTS) with `microbatch run --sql rowBenchQuery`
// into MariaDB at default flags, `txn` and then `at-least-once`, each as
// a child process, and reports its peak RSS (VmHWM, sampled) and CPU
// time. MICROBATCH_BENCH_BINARY runs that executable instead of building
// ./cmd/microbatch. Run with -benchtime=1x; see README.md, "Row jobs".
func BenchmarkRowJobRSS(b *testing.B) {
	brokers := testutil.NeedServer(b, testutil.EnvKafka)
	sink := testutil.NeedServer(b, testutil.EnvMySQL)
	events := int64(4_000_000)
	if os.Getenv("MICROBATCH_BENCH_EVENTS") != "" {
		events = benchEvents(b)
	}
	topic := rowBenchTopic(events)
	want := ensureRowData(b, []string{brokers}, topic, events)
	bin := os.Getenv("MICROBATCH_BENCH_BINARY")
	if bin == "" {
		bin = buildMicrobatch(b)
	}
	w, err := sqlsink.Open(b.Context(), sink)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range []string{"txn", "at-least-once"} {
			table := fmt.Sprintf("bench_rows_rss_%d_%d", time.Now().UnixNano(), i)
			job := "bench-rows-rss-" + strconv.FormatInt(time.Now().UnixNano(), 10)
			args := []string{"run", "--brokers", brokers, "--sink", sink, "--job", job, "--strategy", s,
				"--sql", fmt.Sprintf(rowBenchQuery, table, "`"+topic+"`"), "--until-idle", "2s", "-q"}
			c, err := startChild(bin, args, nil, filepath.Join(b.TempDir(), job+".log"), 0)
			if err != nil {
				b.Fatal(err)
			}
			ps, err := c.wait(10 * time.Minute)
			if err != nil || !ps.Success() {
				log, _ := os.ReadFile(c.logPath)
				b.Fatalf("%s: %v %v\n%s", s, err, ps, log)
			}
			checkRowTable(b, w, table, want)
			w.DB().Exec("DROP TABLE " + table)
			u := c.usage()
			load, _ := os.ReadFile("/proc/loadavg")
			b.Logf("%s, %d records: peak RSS %d MiB, CPU %.1f s, wall %.1f s (load %.14s)", s, events, u.PeakRSS>>20,
				u.CPU.Seconds(), time.Since(c.start).Seconds(), load)
			b.ReportMetric(float64(u.PeakRSS>>20), s+"_peak_MiB")
		}
	}
}

// runStrategyEvery is runStrategy at another batch interval.
func runStrategyEvery(b *testing.B, strategy strategies.Strategy, interval time.Duration, brokers []string, topic, sink, job string, events int64, tr *strategies.Transform) time.Duration {
	b.Helper()
	return runStrategyCfg(b, strategies.Config{Strategy: strategy, Interval: interval, Brokers: brokers, Topic: topic, Job: job, Sink: sink, Transform: tr}, events)
}
