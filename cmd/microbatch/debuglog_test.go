package main_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/systemtest"
)

// TestCLIDebugLogsPlan: --log-level debug logs each batch's plan, per
// partition the offset range it reads, as docs/configuration.md says.
func TestCLIDebugLogsPlan(t *testing.T) {
	t.Parallel()
	b := systemtest.StartBroker(t)
	topic := systemtest.UniqueName(t, "plan")
	events, _ := systemtest.Produce(t, b.Addr, topic, 3, 0, 3_000)
	dir := t.TempDir()
	r := systemtest.Run(t, dir, nil, 5*time.Minute, "run", "--brokers", b.Addr, "--topic", topic, "--job", systemtest.UniqueName(t, "plan-job"),
		"--sink", "sqlite://"+dir+"/sink.db", "--log-level", "debug", "--interval", "100ms", "--until-idle", "1s")
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	// Every offset of every partition is in exactly one planned range, and
	// the ranges of a partition follow each other.
	line := regexp.MustCompile(`msg="batch started" batch=\d+ epoch=\d+ partitions=(\d+) offsets=(\d+) plan="([^"]*)"`)
	rng := regexp.MustCompile(`^(\d+):\[(\d+),(\d+)\)$`)
	next := map[string]int64{}
	var planned int64
	for _, m := range line.FindAllStringSubmatch(r.Stderr, -1) {
		parts := strings.Fields(m[3])
		if strconv.Itoa(len(parts)) != m[1] {
			t.Fatalf("plan %q of %s partitions", m[3], m[1])
		}
		var sum int64
		for _, p := range parts {
			pm := rng.FindStringSubmatch(p)
			if pm == nil {
				t.Fatalf("plan entry %q: want <partition>:[from,to)", p)
			}
			from, _ := strconv.ParseInt(pm[2], 10, 64)
			to, _ := strconv.ParseInt(pm[3], 10, 64)
			if from != next[pm[1]] || to < from {
				t.Fatalf("partition %s planned [%d,%d) after reaching %d", pm[1], from, to, next[pm[1]])
			}
			next[pm[1]] = to
			sum += to - from
		}
		if strconv.FormatInt(sum, 10) != m[2] {
			t.Fatalf("plan %q spans %d offsets, the line says %s", m[3], sum, m[2])
		}
		planned += sum
	}
	if planned != events || len(next) != 4 {
		t.Fatalf("the logged plans cover %d offsets of %d partitions, want %d of 4 (systemtest.Produce creates 4)\nstderr:\n%s", planned, len(next), events, r.Stderr)
	}
}
