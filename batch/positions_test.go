package batch

import (
	"maps"
	"testing"
	"testing/synctest"
	"time"
)

// TestProgressPositions: every progress report says where each partition of
// the run stands (next offset, log end) and with which epoch it committed,
// and its lag is the sum of the positions' gaps.
func TestProgressPositions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newFakeSource(map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 25, 1: 7, 2: 0})
		var log taskLog
		var got []Progress
		d := &Driver{
			Source: src, Task: readingTask(&log, src, 0), Topic: "events", Epoch: 3,
			Next: map[int32]int64{0: 0, 1: 0, 2: 0}, Interval: 100 * time.Millisecond, MaxRecords: 10, UntilIdle: time.Second,
			OnProgress: func(p Progress) { got = append(got, p) },
		}
		if _, err := d.Run(t.Context()); err != nil {
			t.Fatalf("Run: %v", err)
		}
		want := []map[int32]PartitionPosition{
			{0: {10, 25}, 1: {7, 7}, 2: {0, 0}},
			{0: {20, 25}, 1: {7, 7}, 2: {0, 0}},
			{0: {25, 25}, 1: {7, 7}, 2: {0, 0}},
		}
		if len(got) != len(want) {
			t.Fatalf("%d progress reports, want %d", len(got), len(want))
		}
		for i, p := range got {
			if !maps.Equal(p.Positions, want[i]) {
				t.Errorf("batch %d: Positions = %v, want %v", p.BatchID, p.Positions, want[i])
			}
			var lag int64
			for _, pos := range p.Positions {
				lag += pos.End - pos.Next
			}
			if lag != p.Lag {
				t.Errorf("batch %d: Lag = %d, positions say %d", p.BatchID, p.Lag, lag)
			}
			if p.Epoch != 3 {
				t.Errorf("batch %d: Epoch = %d, want 3", p.BatchID, p.Epoch)
			}
		}
	})
}
