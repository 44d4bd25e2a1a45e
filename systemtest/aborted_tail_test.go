package systemtest

// A topic whose log ends in a long aborted transaction (issue #14): a run
// must finish on it, in batches and in checkpoint mode, and count each
// committed event once.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

const (
	tailBefore       = 1000 // committed events before the aborted transaction
	tailAborted      = 6000 // its records, of tailAbortedBytes each: about 6 MiB
	tailAbortedBytes = 1024
	tailAfter        = 1000 // committed events produced after the first runs
	tailRunTimeout   = 3 * time.Minute
)

// TestAbortedTail: the input's only partition holds committed events and
// then one aborted transaction of about 6 MiB, six times what one fetch of
// the source asks for. `run --strategy txn` and `--strategy checkpoint`
// (file sink) with --until-idle must finish on it (the batch waited
// forever before; checkpoint mode timed out every checkpoint), having
// counted exactly the committed events. Then more committed events follow
// the aborted ones; the next runs get past the aborted data to them. The
// aborted records are valid events of key "aborted" with ids past the
// committed ones: one that leaked would show in the totals and the files.
func TestAbortedTail(t *testing.T) {
	t.Run("kfake", func(t *testing.T) {
		t.Parallel()
		testAbortedTail(t, StartBroker(t).Addr)
	})
	t.Run("apache-kafka", func(t *testing.T) {
		t.Parallel()
		testAbortedTail(t, testutil.NeedServer(t, testutil.EnvKafka))
	})
}

func testAbortedTail(t *testing.T, brokers string) {
	Binary(t) // built before the runs are timed
	topic := UniqueName(t, "aborted-tail")
	if err := kafkautil.EnsureTopic(kafkautil.SplitBrokers(brokers), topic, 1); err != nil {
		t.Fatal(err)
	}
	p := newEventTxnProducer(t, brokers, topic)
	gen := event.NewGenerator(crashSeed, crashKeys)
	p.events(t, gen, tailBefore)
	p.abortedPadding(t, tailAborted, tailAbortedBytes)

	dir := t.TempDir()
	sqlSink := "sqlite://" + filepath.Join(dir, "sink.db")
	outDir := filepath.Join(dir, "out")
	txnJob, ckptJob := UniqueName(t, "txn"), UniqueName(t, "ckpt")
	common := []string{"run", "--brokers", brokers, "--topic", topic, "--until-idle", "1s", "--log-level", "debug"}
	runs := []struct {
		strategy string
		args     []string
	}{
		{string(strategies.StrategyTxn), slices.Concat(common, []string{"--strategy", string(strategies.StrategyTxn), "--job", txnJob, "--sink", sqlSink, "--interval", "100ms"})},
		{string(strategies.StrategyCheckpoint), slices.Concat(common, []string{"--strategy", string(strategies.StrategyCheckpoint), "--job", ckptJob, "--sink", "file://" + outDir,
			"--checkpoint-interval", ckptInterval.String(), "--state-dir", filepath.Join(dir, "state")})},
	}
	batchRecords := regexp.MustCompile(`msg="run finished".* records=(\d+) `)
	runAll := func(phase string, want int64) {
		for _, c := range runs {
			start := time.Now()
			r := Run(t, dir, nil, tailRunTimeout, c.args...)
			if r.Code != 0 {
				t.Fatalf("%s, %s: %s", phase, c.strategy, r)
			}
			t.Logf("%s: %s run finished in %s", phase, c.strategy, time.Since(start).Round(time.Millisecond))
			if c.strategy != string(strategies.StrategyTxn) {
				continue
			}
			m := batchRecords.FindStringSubmatch(r.Stderr)
			if m == nil {
				t.Fatalf("%s, %s: no \"run finished\" line with records\n%s", phase, c.strategy, r)
			}
			if n, _ := strconv.ParseInt(m[1], 10, 64); n != want {
				t.Errorf("%s, %s: run counted %d records, want %d", phase, c.strategy, n, want)
			}
		}
	}
	runAll("log ending in the aborted transaction", tailBefore)
	p.events(t, gen, tailAfter)
	runAll("committed events after it", tailAfter)

	produced := int64(tailBefore + tailAfter)
	checkCrashPerKey(t, sinktest.OpenSQL(t, sqlSink), txnJob, produced)
	c := checkOutputs(t, "checkpoint files", readFileOutputs(t, outDir, ckptJob), ckptExpected(produced))
	if c.records != produced {
		t.Errorf("checkpoint files hold %d records, want %d", c.records, produced)
	}
}

// eventTxnProducer writes events into one topic in Kafka transactions.
type eventTxnProducer struct{ *testutil.TxnProducer }

func newEventTxnProducer(t *testing.T, brokers, topic string) eventTxnProducer {
	return eventTxnProducer{testutil.NewTxnProducer(t, kafkautil.SplitBrokers(brokers), topic)}
}

// events writes the generator's next n events in one committed transaction.
func (tp eventTxnProducer) events(t *testing.T, g *event.Generator, n int) {
	t.Helper()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		id, k, a := g.Next()
		msgs[i] = &sarama.ProducerMessage{Topic: tp.Topic, Key: sarama.StringEncoder(k), Value: sarama.ByteEncoder(event.Append(nil, id, k, a, 0))}
	}
	tp.Txn(t, msgs, true)
}

// abortedPadding writes n valid events of key "aborted", padded to size
// bytes, in one transaction that it aborts.
func (tp eventTxnProducer) abortedPadding(t *testing.T, n, size int) {
	t.Helper()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		v := fmt.Appendf(nil, `{"id":%d,"key":"aborted","amount":1,"ts":0,"pad":"`, 1_000_000_000+i)
		v = append(v, bytes.Repeat([]byte{'x'}, max(0, size-len(v)-2))...)
		v = append(v, `"}`...)
		msgs[i] = &sarama.ProducerMessage{Topic: tp.Topic, Key: sarama.StringEncoder("aborted"), Value: sarama.ByteEncoder(v)}
	}
	tp.Txn(t, msgs, false)
}
