package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers/filesink"
)

// The checkpoint in testdata/state-v1, as the file state backend wrote it
// before the package moved: job golden-job of topic golden-topic (4
// partitions, all at offset 0), keyed state hot [3, 2^63-1-100], cold
// [2, -2^63+100], k2 [5, 40].
const (
	goldenJob   = "golden-job"
	goldenTopic = "golden-topic"
	goldenParts = 4
)

var goldenSeeds = map[string][2]int64{"hot": {3, 1<<63 - 1 - 100}, "cold": {2, -1<<63 + 100}, "k2": {5, 40}}

// TestRestoreStateFile: a run restores the checkpoint of testdata/state-v1
// (today's format, written before the move) and goes on from its keyed
// state: every output record's running count and total continue the
// checkpoint's, past the ends of int64, and the final checkpoint holds
// the totals in the same format.
func TestRestoreStateFile(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (in-process broker): skipped with -short")
	}
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "state"), os.DirFS("testdata/state-v1")); err != nil {
		t.Fatal(err)
	}
	brokers := startBroker(t)
	want := produceGolden(t, brokers, 60)
	cfg := Config{
		Topic: goldenTopic, Job: goldenJob, Sink: "file://" + dir + "/out", SinkMode: SinkMode2PC,
		StateBackend: StateBackendFile, StateDir: dir + "/state", OperatorParallelism: 3,
		Interval: 50 * time.Millisecond, Timeout: time.Minute, MaxRestartTime: time.Minute,
		UntilIdle: 300 * time.Millisecond, ConnectTimeout: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	res := runGolden(t, brokers, cfg)
	if res.Records != int64(len(want.outputs)) {
		t.Errorf("run: %d records, want %d", res.Records, len(want.outputs))
	}
	seen := map[int64]bool{}
	err := filesink.Read(dir+"/out", goldenJob, func(line []byte) error {
		var o event.Output
		if err := json.Unmarshal(line, &o); err != nil {
			return fmt.Errorf("output %s: %w", line, err)
		}
		seen[o.ID] = true
		if got := strconv.FormatInt(o.Count, 10) + " " + o.Total.String(); got != want.outputs[o.ID] {
			t.Errorf("id %d (%s): count and total %s, want %s", o.ID, o.Key, got, want.outputs[o.ID])
		}
		return nil
	})
	if err != nil || len(seen) != len(want.outputs) {
		t.Fatalf("%d outputs (%v), want %d", len(seen), err, len(want.outputs))
	}
	store, err := offsets.NewFileCheckpoints(dir+"/state", 0)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := store.Latest(t.Context(), goldenJob)
	if err != nil || chk == nil {
		t.Fatalf("latest checkpoint: %v, %v", chk, err)
	}
	var saved struct {
		State map[string]json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(chk.Data, &saved); err != nil {
		t.Fatal(err)
	}
	for k, w := range want.state {
		if got := string(saved.State[k]); got != w {
			t.Errorf("the final checkpoint holds %s = %s, want %s", k, got, w)
		}
	}
}

// startBroker starts an in-process broker with the golden topic.
func startBroker(t *testing.T) []string {
	t.Helper()
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Topics: []string{goldenTopic}, Partitions: goldenParts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// goldenWant is what a run over produceGolden's events must leave: per
// id, the key's "count total" after it; per key, its state JSON and total.
type goldenWant struct {
	outputs map[int64]string
	state   map[string]string
	totals  map[string]*big.Int
}

// produceGolden writes n events per seeded key, each key on a partition
// of its own (so that its events reach the operator in order): hot adds
// event.MaxAbsAmount, cold subtracts it, k2 adds 1.
func produceGolden(t *testing.T, brokers []string, n int) goldenWant {
	t.Helper()
	conf := kafkautil.Config("checkpoint-test-producer")
	conf.Producer.Return.Successes = true
	conf.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := goldenWant{outputs: map[int64]string{}, state: map[string]string{}, totals: map[string]*big.Int{}}
	keys := []struct {
		key    string
		part   int32
		amount int64
	}{{"hot", 0, event.MaxAbsAmount}, {"cold", 1, -event.MaxAbsAmount}, {"k2", 2, 1}}
	id := int64(0)
	for _, k := range keys {
		count, total := goldenSeeds[k.key][0], big.NewInt(goldenSeeds[k.key][1])
		for range n {
			id++
			count++
			total.Add(total, big.NewInt(k.amount))
			v := event.Append(nil, id, k.key, k.amount, 1_764_489_600_000+id)
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: goldenTopic, Partition: k.part, Value: sarama.ByteEncoder(v)}); err != nil {
				t.Fatal(err)
			}
			want.outputs[id] = fmt.Sprintf("%d %s", count, total)
		}
		want.state[k.key] = fmt.Sprintf("[%d,%s]", count, total)
		want.totals[k.key] = total
	}
	if want.totals["hot"].IsInt64() || want.totals["cold"].IsInt64() {
		t.Fatal("the totals stay inside int64: the test proves nothing")
	}
	return want
}

// runGolden runs cfg against the golden topic until it goes idle.
func runGolden(t *testing.T, brokers []string, cfg Config) Result {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkautil.Config("checkpoint-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, goldenTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg, src)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not go idle within 3 minutes")
	}
	return res
}
