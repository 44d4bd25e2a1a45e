// Package testutil holds helpers shared by the tests of several packages:
// the goroutine-leak check and readers of what a job left in Kafka and in
// its sink. It is imported only by _test.go files.
package testutil

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
)

// LeakedGoroutines waits up to wait for goroutines started by Kafka, SQL or
// microbatch code to end, and returns the stacks of those still running.
func LeakedGoroutines(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		// The first goroutine listed is this one.
		for _, g := range strings.Split(string(buf), "\n\n")[1:] {
			if strings.Contains(g, "rcrowley/go-metrics") { // sarama's global meter ticker
				continue
			}
			for _, mark := range []string{"IBM/sarama", "twmb/franz-go", "microbatch/microbatch", "database/sql", "go-sql-driver", "modernc.org/sqlite", "os/exec"} {
				if strings.Contains(g, mark) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StoredOffsets returns the job's next offsets for topic from mb_offsets.
func StoredOffsets(t testing.TB, q offsets.Queryer, job, topic string) map[int32]int64 {
	t.Helper()
	pos, err := offsets.Load(t.Context(), q, job, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int32]int64, len(pos))
	for p, v := range pos {
		out[p] = v.NextOffset
	}
	return out
}

// EndOffsets returns each partition's high-water mark.
func EndOffsets(t testing.TB, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	ends, err := kafkautil.EndOffsets(brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	return ends
}
