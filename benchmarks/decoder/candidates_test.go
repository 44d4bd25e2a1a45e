package decoder

import (
	"bytes"
	"testing"

	"github.com/microbatch/microbatch/internal/event"
)

// TestCandidatesAgree: on every workload record each candidate reads the
// event that microbatch's Decode reads, so the benchmark compares equal
// work.
func TestCandidatesAgree(t *testing.T) {
	for _, w := range Workloads(1000) {
		for _, c := range Candidates() {
			for _, r := range w.Recs {
				var want, got event.Event
				if err := event.Decode(r, &want); err != nil {
					t.Fatalf("%s: Decode(%s): %v", w.Name, r, err)
				}
				if err := c.Decode(r, &got); err != nil {
					t.Fatalf("%s/%s(%s): %v", w.Name, c.Name, r, err)
				}
				if got.ID != want.ID || !bytes.Equal(got.Key, want.Key) || got.Amount != want.Amount || got.TS != want.TS {
					t.Fatalf("%s/%s(%s) = %+v, want %+v", w.Name, c.Name, r, got, want)
				}
			}
		}
	}
}

// BenchmarkDecoders: ns/op and allocs/op per workload and candidate.
//
//	cd benchmarks/decoder && go test -run XXX -bench . -benchtime 20000x -count 5
func BenchmarkDecoders(b *testing.B) {
	for _, w := range Workloads(1000) {
		var size int
		for _, r := range w.Recs {
			size += len(r)
		}
		for _, c := range Candidates() {
			b.Run(w.Name+"/"+c.Name, func(b *testing.B) {
				var ev event.Event
				b.ReportAllocs()
				b.SetBytes(int64(size / len(w.Recs)))
				i := 0
				for b.Loop() {
					if err := c.Decode(w.Recs[i%len(w.Recs)], &ev); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
