package batch

import (
	"fmt"
	"slices"

	"github.com/microbatch/microbatch/record"
)

// Bounds are a partition's readable offsets: Start is the first offset
// still in the log, End the last stable offset (the end of what a
// read-committed consumer may read).
type Bounds struct {
	Start, End int64
}

// Plan cuts the next batch: for each partition in next (sorted), the range
// [next, min(End, next+maxRecords)). Partitions with nothing new get no
// range. It is a pure function of its inputs, which is what makes a batch
// deterministic: the same stored offsets and bounds give the same ranges.
func Plan(topic string, next map[int32]int64, bounds map[int32]Bounds, maxRecords int64) ([]record.Range, error) {
	parts := make([]int32, 0, len(next))
	for p := range next {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var out []record.Range
	for _, p := range parts {
		from := next[p]
		b, ok := bounds[p]
		if !ok {
			return nil, fmt.Errorf("planning %s/%d: partition has no offsets (was the topic recreated?)", topic, p)
		}
		switch {
		case from < b.Start:
			return nil, fmt.Errorf("%w: %s/%d stored offset %d, log starts at %d", ErrDataLoss, topic, p, from, b.Start)
		case from > b.End:
			return nil, fmt.Errorf("%w: %s/%d stored offset %d, partition ends at %d", ErrOffsetAhead, topic, p, from, b.End)
		case from == b.End:
			continue
		}
		to := b.End
		if maxRecords > 0 && to-from > maxRecords {
			to = from + maxRecords
		}
		out = append(out, record.Range{Topic: topic, Partition: p, From: from, To: to})
	}
	return out, nil
}

// Lag is how many offsets remain between next and the partitions' ends.
func Lag(next map[int32]int64, bounds map[int32]Bounds) int64 {
	var lag int64
	for p, n := range next {
		if b, ok := bounds[p]; ok && b.End > n {
			lag += b.End - n
		}
	}
	return lag
}
