package decoder

import (
	"fmt"

	"github.com/microbatch/microbatch/internal/event"
)

// The workloads of internal/event's BenchmarkDecodeWorkloads, written the
// same way: what the generator writes, what Python's json.dumps writes,
// and a wide record (the four fields among others, one nested, in varying
// order).

// Workload is a named set of records.
type Workload struct {
	Name string
	Recs [][]byte
}

// Workloads returns the three workloads of n records each.
func Workloads(n int) []Workload {
	return []Workload{{"compact", compact(n)}, {"spaced", spaced(n)}, {"wide", event.OtherProducerWide(n)}}
}

func compact(n int) [][]byte {
	g := event.NewGenerator(1, 1000)
	recs := make([][]byte, n)
	for i := range recs {
		id, k, a := g.Next()
		recs[i] = event.Append(nil, id, k, a, 1700000000000+int64(i))
	}
	return recs
}

func spaced(n int) [][]byte {
	g := event.NewGenerator(2, 1000)
	recs := make([][]byte, n)
	for i := range recs {
		id, k, a := g.Next()
		recs[i] = fmt.Appendf(nil, `{"id": %d, "key": "k-%s", "amount": %d, "ts": %d}`, id, k[1:], a, 1700000000000+int64(i))
	}
	return recs
}
