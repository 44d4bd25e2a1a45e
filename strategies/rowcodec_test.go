package strategies

import (
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"testing"

	"github.com/microbatch/microbatch/writers"
)

// rowCodec gives back every value as it was put: nil, strings (empty,
// multi-byte, bytes that are not UTF-8), integers at their limits, and
// any other value (writers.Delete) as itself, for any range of rows.
func TestRowCodecRoundTrip(t *testing.T) {
	in := [][]any{
		{nil, "", int64(0)},
		{"héllo", "\xff\x00x", int64(math.MinInt64)},
		{writers.Delete, "2026-12-07 10:11:12.345", int64(math.MaxInt64)},
		{"a", nil, int64(-1)},
	}
	var c rowCodec
	for _, r := range in {
		c.put(r)
	}
	for from := 0; from <= len(in); from++ {
		for to := from; to <= len(in); to++ {
			got := c.rows(from, to)
			var want [][]any
			if from < to {
				want = in[from:to]
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("rows(%d, %d) = %v, want %v", from, to, got, want)
			}
		}
	}
	// appendAll: a codec's rows after another's, with and without values
	// of other types.
	for split := 0; split <= len(in); split++ {
		var x, y rowCodec
		for i, r := range in {
			if i < split {
				x.put(r)
			} else {
				y.put(r)
			}
		}
		x.appendAll(&y)
		if got := x.rows(0, x.n); !reflect.DeepEqual(got, in) {
			t.Errorf("appendAll at %d: %v, want %v", split, got, in)
		}
	}
	c.reset()
	if c.rows(0, c.n) != nil || c.n != 0 {
		t.Errorf("after reset: %d rows", c.n)
	}
	c.put([]any{"x", int64(1), nil})
	if got := fmt.Sprint(c.rows(0, 1)); got != "[[x 1 <nil>]]" {
		t.Errorf("after reset and put: %s", got)
	}
}

// An append's part holds its rows encoded, not as [][]any (~220 bytes a
// row of five short values, 11 allocations, up to --max-batch-records
// rows per partition held until the write: a 4M-record backlog peaked at
// 260-280 MiB), and hands them to the sink writeChunk at a time, in read
// order, each range as asked.
func TestRowJobAppendPartIsCompactAndChunked(t *testing.T) {
	w := rowJobWork(t, "INSERT INTO t SELECT id, `key`, amount, status, ts FROM e")
	const n = 2*writeChunk + 345
	value := func(i int) string {
		return fmt.Sprintf(`{"id": %d, "key": "k%d", "amount": %d, "status": "shipped", "customer": "customer-%06d", "ts": %d}`,
			1_000_000+i, i%1000, i%997, i, 1_764_547_200_000+int64(i))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := w.newPart("job")
	for i := range n {
		if err := p.add(rec{0, int64(i), "", value(i)}.record()); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	runtime.KeepAlive(p)
	if held > 100 {
		t.Errorf("the part holds %.0f bytes a row of five short values: want ≤ 100", held)
	}
	t.Logf("%.0f bytes a row", held)

	rows, err := rowsToWrite(p)
	if err != nil {
		t.Fatal(err)
	}
	if rows.len() != n {
		t.Fatalf("%d rows to write, want %d", rows.len(), n)
	}
	for _, r := range [][2]int{{0, n}, {0, n / 2}, {n / 2, n}, {7, 7}} {
		var sizes []int
		next := r[0]
		err := rows.write(r[0], r[1], func(chunk [][]any) error {
			sizes = append(sizes, len(chunk))
			for _, row := range chunk {
				if want := strconv.Itoa(1_000_000 + next); row[0] != want || row[3] != "shipped" {
					t.Fatalf("row %d is %v, want id %s", next, row, want)
				}
				next++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if next != r[1] {
			t.Errorf("write(%d, %d) wrote up to %d", r[0], r[1], next)
		}
		for _, s := range sizes {
			if s > writeChunk {
				t.Errorf("write(%d, %d): chunks of %v rows, want ≤ %d each", r[0], r[1], sizes, writeChunk)
			}
		}
	}
	all, err := p.rows()
	if err != nil || len(all) != n || all[n-1][0] != strconv.Itoa(1_000_000+n-1) {
		t.Errorf("rows(): %d rows, err %v", len(all), err)
	}
}

// BenchmarkRowCodec encodes and decodes writeChunk rows of five short
// values, as an append row job's part does per batch:
//
//	go test -run '^$' -bench RowCodec -benchmem ./strategies/
func BenchmarkRowCodec(b *testing.B) {
	rows := make([][]any, writeChunk)
	for i := range rows {
		rows[i] = []any{strconv.Itoa(1_000_000 + i), "k" + strconv.Itoa(i%1000), strconv.Itoa(i % 997), "shipped", strconv.Itoa(1_764_547_200_000 + i)}
	}
	var c rowCodec
	b.Run("put", func(b *testing.B) {
		for b.Loop() {
			c.reset()
			for _, r := range rows {
				c.put(r)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
	})
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			c.rows(0, c.n)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
	})
}
