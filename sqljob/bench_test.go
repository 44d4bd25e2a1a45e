package sqljob

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/microbatch/microbatch/internal/event"
)

// BenchQuery is the query over the fields of --format wide events.
const benchQuery = "INSERT INTO user_stats SELECT `key` AS user_id, event_type AS kind, " +
	"COUNT(*) AS n, SUM(quantity) AS qty, SUM(unit_price) AS revenue, MIN(ts) AS first_ts, MAX(ts) AS last_ts " +
	"FROM events WHERE quantity > 0 AND event_type IN ('purchase', 'refund', 'page_view') GROUP BY user_id, kind"

func wideRecords(n int) [][]byte {
	g := event.NewGenerator(1, 1000)
	recs := make([][]byte, n)
	for i := range recs {
		id, k, a := g.Next()
		recs[i] = event.AppendFormat(nil, event.FormatWide, 1, id, k, a, 1700000000000+int64(i))
	}
	return recs
}

func BenchmarkAddWide(b *testing.B) {
	q, err := Compile(benchQuery, Options{})
	if err != nil {
		b.Fatal(err)
	}
	recs := wideRecords(4096)
	a := q.NewAggregate()
	var bytes int64
	for _, r := range recs {
		bytes += int64(len(r))
	}
	b.SetBytes(bytes / int64(len(recs)))
	b.ResetTimer()
	for i := range b.N {
		if err := a.Add(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuiltinDecodeWide(b *testing.B) {
	recs := wideRecords(4096)
	var ev event.Event
	b.ResetTimer()
	for i := range b.N {
		if err := event.Decode(recs[i%len(recs)], &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// The scan alone, capturing nothing, against gjson's validator.
func BenchmarkScanWide(b *testing.B) {
	recs := wideRecords(4096)
	s := scanner{}
	root := &pathNode{field: -1}
	b.ResetTimer()
	for i := range b.N {
		if err := s.scan(recs[i%len(recs)], root); err != nil {
			b.Fatal(err)
		}
	}
}

// The scan capturing what the built-in job's decoder captures (id, key,
// amount, ts), the bar for BenchmarkBuiltinDecodeWide.
func BenchmarkScanWideFourFields(b *testing.B) {
	recs := wideRecords(4096)
	root := &pathNode{field: -1}
	var fields, nodes int
	for _, name := range []string{"id", "key", "amount", "ts"} {
		root.add([]string{name}, &fields, &nodes)
	}
	s := scanner{f: make([]val, fields), seen: make([]bool, nodes)}
	b.ResetTimer()
	for i := range b.N {
		clear(s.f)
		if err := s.scan(recs[i%len(recs)], root); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGjsonValidWide(b *testing.B) {
	recs := wideRecords(4096)
	b.ResetTimer()
	for i := range b.N {
		if !gjson.ValidBytes(recs[i%len(recs)]) {
			b.Fatal("invalid")
		}
	}
}
