package examples_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
)

// TestKafkaEnrich: the consume-transform-produce example, killed twice,
// ends with every input event in the output exactly once.
func TestKafkaEnrich(t *testing.T) {
	for _, target := range []struct {
		name    string
		brokers func(t *testing.T) []string
	}{
		{"ApacheKafka", func(t *testing.T) []string { return kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka)) }},
		{"kfake", func(t *testing.T) []string { return startDevBroker(t, 3) }},
	} {
		t.Run(target.name, func(t *testing.T) { testKafkaEnrich(t, target.brokers(t)) })
	}
}

func testKafkaEnrich(t *testing.T, brokers []string) {
	bin := binary(t, "kafka-enrich")
	in, out := uniqueName("enrich-in"), uniqueName("enrich-out")
	if err := kafkautil.EnsureTopic(brokers, in, 3); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	keys, values := make([]string, 0, n+2), make([]string, 0, n+2)
	for i := range n {
		k := fmt.Sprintf("k%d", i%31)
		keys = append(keys, k)
		values = append(values, eventJSON(int64(i), k, int64(i%1000), 1_700_000_000_000+int64(i)))
	}
	bad := []string{"not json", `{"id":1,"amount":2}`}
	keys = append(keys, "bad1", "bad2")
	values = append(values, bad...)
	// The first run gets only a quarter of the input, so that it can't
	// get far however late the test reads its output; the rest comes
	// before the second.
	const first = n / 4
	produce(t, brokers, in, keys[:first], values[:first])

	args := []string{"-brokers", strings.Join(brokers, ","), "-in", in, "-out", out,
		"-group", uniqueName("enrich-group"), "-txn-id", uniqueName("enrich-txn"), "-batch", "250"}
	// Killed in a pause between transactions, once its transactions
	// committed offsets on every partition (a line names the partitions
	// of its transaction); then, through its test hook, in its 3rd
	// transaction with the records and offsets flushed to the brokers, not
	// committed: the next run's Recover aborts that one.
	run1 := start(t, bin, append(args, "-pause", "30ms")...)
	committedOn := map[string]bool{}
	committedRE := regexp.MustCompile(`^txn \d+ committed: .*next offsets map\[(.*)\]`)
	run1.killWhen("offsets committed on all 3 partitions", func(l string) bool {
		if m := committedRE.FindStringSubmatch(l); m != nil {
			for _, po := range strings.Fields(m[1]) {
				part, _, _ := strings.Cut(po, ":")
				committedOn[part] = true
			}
		}
		return len(committedOn) == 3
	})
	if c := strings.Count(run1.stdout(), "has no committed offset for partition"); c != 3 {
		t.Fatalf("first run: %d partitions said to start at the earliest, want 3:\n%s", c, run1.stdout())
	}
	produce(t, brokers, in, keys[first:], values[first:])
	crashed := startEnv(t, []string{"KAFKA_ENRICH_CRASH_BEFORE_COMMIT=3"}, bin, args...).waitKilled(60 * time.Second)
	if c := len(regexp.MustCompile(`(?m)^txn \d+ committed`).FindAllString(crashed, -1)); c != 2 || !strings.Contains(crashed, "test hook: SIGKILL") {
		t.Fatalf("run killed by its hook committed %d transactions, want 2:\n%s", c, crashed)
	}
	checkResumed(t, crashed)
	last := start(t, bin, append(args, "-idle", "1500ms")...).wait(60 * time.Second)
	if !strings.Contains(last, "idle: done") {
		t.Fatalf("last run:\n%s", last)
	}
	checkResumed(t, last)

	seen := map[int64]int{}
	for _, v := range readCommitted(t, brokers, out, n) {
		var e struct {
			ID     int64  `json:"id"`
			Amount int64  `json:"amount"`
			Tier   string `json:"tier"`
		}
		if err := json.Unmarshal([]byte(v), &e); err != nil || e.Tier == "" {
			t.Fatalf("output record %q: %v", v, err)
		}
		seen[e.ID]++
	}
	dups, lost := 0, 0
	for i := range int64(n) {
		switch c := seen[i]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	if dups != 0 || lost != 0 || len(seen) != n {
		t.Fatalf("output: %d duplicates, %d lost, %d distinct ids; want 0, 0, %d", dups, lost, len(seen), n)
	}
	dl := readCommitted(t, brokers, out+"-dead-letters", len(bad))
	slices.Sort(dl)
	if wantDL := slices.Sorted(slices.Values(bad)); !slices.Equal(dl, wantDL) {
		t.Fatalf("dead letters %q, want %q once each", dl, wantDL)
	}
	// The aborted transaction's records are in the log: a read_uncommitted
	// reader sees them.
	all := readTopic(t, brokers, out, n+1, sarama.ReadUncommitted)
	if len(all) <= n {
		t.Fatalf("read_uncommitted, the output holds %d records: want more than the %d committed (the aborted transaction's)", len(all), n)
	}
	t.Logf("output: %d records committed, %d in all (read_uncommitted)", n, len(all))

	// A new group (as after its offsets expired) over an output holding
	// committed records: the program refuses to start from the earliest.
	args = []string{"-brokers", strings.Join(brokers, ","), "-in", in, "-out", out,
		"-group", uniqueName("enrich-group"), "-txn-id", uniqueName("enrich-txn"), "-idle", "500ms"}
	if e := start(t, bin, args...).waitFail(30 * time.Second); !strings.Contains(e, "-from-start") {
		t.Fatalf("a run with a group without offsets over a used output: %s, want a refusal", e)
	}
}

// checkResumed checks the "starting at" line of a restarted kafka-enrich:
// every partition starts from a committed offset.
func checkResumed(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`starting at \S+ map\[(.*)\]`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no starting line:\n%s", out)
	}
	offs := regexp.MustCompile(`(\d+):(-?\d+)`).FindAllStringSubmatch(m[1], -1)
	if len(offs) != 3 {
		t.Fatalf("starting at %s: want 3 partitions\n%s", m[1], out)
	}
	for _, o := range offs {
		if o[2] == "-1" {
			t.Fatalf("restart: partition %s has no committed offset (starting at %s)\n%s", o[1], m[1], out)
		}
	}
}

// readCommitted reads every partition of topic from the start, isolation
// read_committed, until want records and a quiet time, or 2 minutes.
func readCommitted(t *testing.T, brokers []string, topic string, want int) []string {
	t.Helper()
	return readTopic(t, brokers, topic, want, sarama.ReadCommitted)
}

// readTopic is readCommitted with the isolation level given.
func readTopic(t *testing.T, brokers []string, topic string, want int, isolation sarama.IsolationLevel) []string {
	t.Helper()
	conf := kafkautil.Config("examples-test-reader")
	conf.Consumer.IsolationLevel = isolation
	conf.Consumer.MaxWaitTime = 50 * time.Millisecond
	c, err := sarama.NewConsumer(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1000)
	for _, p := range parts {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				got <- string(m.Value)
			}
		}()
	}
	var out []string
	// Bounds for a busy machine: reading ends 300ms after the last record
	// once want arrived, so a correct run never waits for them.
	limit := time.After(2 * time.Minute)
	for {
		quiet := 300 * time.Millisecond
		if len(out) < want {
			quiet = time.Minute
		}
		select {
		case v := <-got:
			out = append(out, v)
		case <-time.After(quiet):
			return out
		case <-limit:
			return out
		}
	}
}
