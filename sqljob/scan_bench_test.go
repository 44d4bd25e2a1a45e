package sqljob

import (
	"testing"

	"github.com/tidwall/gjson"
)

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

func BenchmarkGjsonValidWide(b *testing.B) {
	recs := wideRecords(4096)
	b.ResetTimer()
	for i := range b.N {
		if !gjson.ValidBytes(recs[i%len(recs)]) {
			b.Fatal("invalid")
		}
	}
}
