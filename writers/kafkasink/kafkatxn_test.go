package kafkasink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers"
)

// The Txn cases run against kfake (in process) and against Apache
// Kafka named by MICROBATCH_TEST_KAFKA (not in -short mode). Every case
// uses its own topic (one partition, so order is checkable) and its own
// transactional id prefix.

type kafkaTxnTarget struct {
	name  string
	start func(testing.TB) []string
}

var kafkaTxnTargets = []kafkaTxnTarget{
	{"kfake", kafkaTxnStartKfake},
	{"ApacheKafka", func(t testing.TB) []string {
		return kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka))
	}},
}

func kafkaTxnStartKfake(t testing.TB) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// forEachKafka runs f once per broker kind.
func forEachKafka(t *testing.T, f func(t *testing.T, brokers []string)) {
	for _, target := range kafkaTxnTargets {
		t.Run(target.name, func(t *testing.T) { f(t, target.start(t)) })
	}
}

var kafkaTxnSeq atomic.Int64

// kafkaTxnName is a topic or transactional id prefix unique to this test
// and run.
func kafkaTxnName(t testing.TB, kind string) string {
	clean := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), ".")
	if len(clean) > 60 {
		clean = clean[len(clean)-60:]
	}
	return fmt.Sprintf("mbt-%s-%s-%d-%d", kind, clean, time.Now().UnixNano()%1e9, kafkaTxnSeq.Add(1))
}

func kafkaTxnTopic(t testing.TB, brokers []string) string {
	t.Helper()
	topic := kafkaTxnName(t, "topic")
	if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
		t.Fatal(err)
	}
	return topic
}

func newTestTxn(t testing.TB, brokers []string, prefix string) *Txn {
	t.Helper()
	w, err := New(Config{Brokers: brokers, TransactionalID: prefix, Subtask: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// kafkaTxnWrite writes the values (keyed by themselves) into the open
// transaction.
func kafkaTxnWrite(t testing.TB, w *Txn, topic string, values ...string) {
	t.Helper()
	for _, v := range values {
		if err := w.Write(t.Context(), topic, []byte(v), []byte(v)); err != nil {
			t.Fatalf("Write(%s): %v", v, err)
		}
	}
}

func kafkaTxnValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// Read quiet times: how long to wait for more records once the expected
// ones are in (for duplicates), or for any record when none are expected.
const (
	kafkaTxnQuietMore = 250 * time.Millisecond
	kafkaTxnQuietNone = 600 * time.Millisecond
	kafkaTxnReadLimit = 15 * time.Second
)

// kafkaTxnRead reads partition 0 of topic from the start at the given
// isolation level: until want records and then a quiet time, or until
// kafkaTxnReadLimit. It returns the values.
func kafkaTxnRead(t testing.TB, brokers []string, topic string, level sarama.IsolationLevel, want int) []string {
	t.Helper()
	conf := kafkautil.Config("kafkatxn-test-reader")
	conf.Consumer.IsolationLevel = level
	conf.Consumer.MaxWaitTime = 50 * time.Millisecond
	c, err := sarama.NewConsumer(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := []string{}
	quiet := kafkaTxnQuietMore
	if want == 0 {
		quiet = kafkaTxnQuietNone
	}
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	limit := time.After(kafkaTxnReadLimit)
	for {
		select {
		case m := <-pc.Messages():
			got = append(got, string(m.Value))
			timer.Reset(quiet)
		case err := <-pc.Errors():
			t.Fatalf("reading %s: %v", topic, err)
		case <-timer.C:
			if len(got) >= want {
				return got
			}
			timer.Reset(quiet)
		case <-limit:
			return got
		}
	}
}

func kafkaTxnExpect(t testing.TB, brokers []string, topic string, level sarama.IsolationLevel, want []string) {
	t.Helper()
	got := kafkaTxnRead(t, brokers, topic, level, len(want))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		name := "read-committed"
		if level == sarama.ReadUncommitted {
			name = "read-uncommitted"
		}
		t.Fatalf("%s reader of %s got %d records %q, want %d %q", name, topic, len(got), got, len(want), want)
	}
}

// kafkaTxnSettle waits until the records written so far in the open
// transaction are acknowledged, before a test makes records fail: sarama
// (v1.61.1) has a data race between a record failing and the sending of
// others (IBM/sarama#2913: transactionManager.lastError is written under
// statusLock and read under partitionInTxnLock), which -race reports.
func kafkaTxnSettle(t testing.TB, w *Txn) {
	t.Helper()
	if err := w.open.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// kafkaTxnOffsets returns partition 0's last stable offset and high-water
// mark. They are equal when no transaction is open on it.
func kafkaTxnOffsets(t testing.TB, brokers []string, topic string) (lso, hwm int64) {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkautil.Config("kafkatxn-test-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	leader, err := client.Leader(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]int64
	for i, level := range []sarama.IsolationLevel{sarama.ReadCommitted, sarama.ReadUncommitted} {
		req := sarama.NewOffsetRequest(kafkautil.Version)
		req.IsolationLevel = level
		req.AddBlock(topic, 0, sarama.OffsetNewest, 1)
		res, err := leader.GetAvailableOffsets(req)
		if err != nil {
			t.Fatal(err)
		}
		b := res.GetBlock(topic, 0)
		if b == nil || b.Err != sarama.ErrNoError {
			t.Fatalf("list offsets of %s: %+v", topic, b)
		}
		out[i] = b.Offset
		if len(b.Offsets) > 0 {
			out[i] = b.Offsets[0]
		}
	}
	return out[0], out[1]
}

// kafkaTxnWaitStable waits until no transaction holds partition 0 of
// topic open (LSO = HWM): a read-committed reader isn't blocked.
func kafkaTxnWaitStable(t testing.TB, brokers []string, topic string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		lso, hwm := kafkaTxnOffsets(t, brokers, topic)
		if lso == hwm {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last stable offset %d still below high-water mark %d after %v: a transaction is still open", topic, lso, hwm, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestKafkaTxnCommit(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		topic := kafkaTxnTopic(t, brokers)
		prefix := kafkaTxnName(t, "txn")
		w := newTestTxn(t, brokers, prefix)
		if err := w.Recover(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.Begin(ctx, 4); err != nil {
			t.Fatal(err)
		}
		if err := w.Begin(ctx, 5); err == nil {
			t.Fatal("Begin with a transaction open: no error")
		}
		want := kafkaTxnValues("a", 5)
		kafkaTxnWrite(t, w, topic, want...)
		p, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			ProducerID *int64 `json:"producer_id"`
			Epoch      *int16 `json:"epoch"`
		}
		if err := json.Unmarshal(p.Data, &d); err != nil || d.ProducerID == nil || d.Epoch == nil {
			t.Fatalf("Pending.Data %s: want producer_id and epoch (%v)", p.Data, err)
		}
		if p.Sink != "kafka" || p.Subtask != 7 || p.Txn != 4 || p.ID != prefix+"-1" {
			t.Fatalf("Pending = %+v, want sink kafka, subtask 7, txn 4, id %s-1", p, prefix)
		}
		if err := w.Write(ctx, topic, nil, []byte("x")); err == nil {
			t.Fatal("Write after PreCommit: no error")
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, nil)
		kafkaTxnExpect(t, brokers, topic, sarama.ReadUncommitted, want) // they exist

		if err := w.Commit(ctx, p); err != nil {
			t.Fatal(err)
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, want)
		if err := w.Commit(ctx, p); err != nil {
			t.Fatalf("second Commit: %v", err)
		}
		// Committing again by identity, as another process would.
		other := newTestTxn(t, brokers, prefix)
		if err := other.Commit(ctx, p); err != nil {
			t.Fatalf("Commit from another writer: %v", err)
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, want)

		// An empty transaction commits too, and the slot is reusable.
		if err := w.Begin(ctx, 7); err != nil {
			t.Fatal(err)
		}
		pe, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Commit(ctx, pe); err != nil {
			t.Fatalf("Commit of an empty txn from another writer: %v", err)
		}
		if err := w.Commit(ctx, pe); err != nil {
			t.Fatalf("Commit of an empty txn: %v", err)
		}
		if err := w.Begin(ctx, 10); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, topic, "b")
		p10, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, p10); err != nil {
			t.Fatal(err)
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, append(want, "b"))
	})
}

func TestKafkaTxnAbort(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		topic := kafkaTxnTopic(t, brokers)
		prefix := kafkaTxnName(t, "txn")
		w := newTestTxn(t, brokers, prefix)
		if err := w.Begin(ctx, 1); err != nil {
			t.Fatal(err)
		}
		aborted := kafkaTxnValues("pre", 4)
		kafkaTxnWrite(t, w, topic, aborted...)
		p, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(ctx, p); err != nil {
			t.Fatalf("second Abort: %v", err)
		}
		other := newTestTxn(t, brokers, prefix)
		if err := other.Abort(ctx, p); err != nil {
			t.Fatalf("Abort from another writer: %v", err)
		}
		if err := w.Commit(ctx, p); !errors.Is(err, writers.ErrTxnLost) {
			t.Fatalf("Commit after Abort: %v, want ErrTxnLost", err)
		}
		if err := other.Commit(ctx, p); !errors.Is(err, writers.ErrTxnLost) {
			t.Fatalf("Commit after Abort from another writer: %v, want ErrTxnLost", err)
		}

		// The zero Pending aborts the open transaction; the slot goes on.
		if err := w.Begin(ctx, 2); err != nil {
			t.Fatal(err)
		}
		open := kafkaTxnValues("open", 3)
		kafkaTxnWrite(t, w, topic, open...)
		if err := w.Abort(ctx, writers.Pending{}); err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(ctx, writers.Pending{}); err != nil {
			t.Fatalf("Abort with nothing open: %v", err)
		}
		kafkaTxnWaitStable(t, brokers, topic, 5*time.Second)
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, nil)
		kafkaTxnExpect(t, brokers, topic, sarama.ReadUncommitted, append(aborted, open...))

		if err := w.Begin(ctx, 4); err != nil { // slot 1 again, after the abort
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, topic, "ok")
		p4, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, p4); err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(ctx, p4); err == nil {
			t.Fatal("Abort of a committed txn: no error")
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, []string{"ok"})
	})
}

func TestKafkaTxnRotation(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		topic := kafkaTxnTopic(t, brokers)
		w := newTestTxn(t, brokers, kafkaTxnName(t, "txn"))
		if err := w.Recover(ctx, nil); err != nil {
			t.Fatal(err)
		}
		// Txn n+1 is written partly before and partly after txn n commits;
		// 8 transactions use each of the 3 slots at least twice.
		var want []string
		var prev *writers.Pending
		for n := int64(1); n <= 8; n++ {
			if err := w.Begin(ctx, n); err != nil {
				t.Fatalf("Begin(%d): %v", n, err)
			}
			vals := kafkaTxnValues(fmt.Sprintf("t%d", n), 6)
			want = append(want, vals...)
			kafkaTxnWrite(t, w, topic, vals[:3]...)
			if prev != nil {
				if err := w.Commit(ctx, *prev); err != nil {
					t.Fatalf("Commit(%d): %v", prev.Txn, err)
				}
			}
			kafkaTxnWrite(t, w, topic, vals[3:]...)
			p, err := w.PreCommit(ctx)
			if err != nil {
				t.Fatalf("PreCommit(%d): %v", n, err)
			}
			if wantID := fmt.Sprintf("%s-%d", w.cfg.TransactionalID, n%3); p.ID != wantID {
				t.Fatalf("txn %d on %s, want %s", n, p.ID, wantID)
			}
			prev = &p
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, want[:len(want)-6])
		if err := w.Commit(ctx, *prev); err != nil {
			t.Fatal(err)
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, want)
	})
}

// Resume across processes: a child process (this test binary, run again
// with envKafkaTxnChild set) pre-commits txn 3, opens and writes txn 4,
// prints txn 3's Pending and SIGKILLs itself.

const envKafkaTxnChild = "MICROBATCH_KAFKATXN_CHILD"

type kafkaTxnChildSpec struct {
	Brokers []string
	Prefix  string
	Topic   string
}

const kafkaTxnPendingMark = "KAFKATXN-PENDING "

func TestKafkaTxnChildProcess(t *testing.T) {
	raw := os.Getenv(envKafkaTxnChild)
	if raw == "" {
		t.Skip("helper process for TestKafkaTxnResume")
	}
	var spec kafkaTxnChildSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	w, err := New(Config{Brokers: spec.Brokers, TransactionalID: spec.Prefix, Subtask: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(ctx, 3); err != nil {
		t.Fatal(err)
	}
	kafkaTxnWrite(t, w, spec.Topic, kafkaTxnValues("pre", 5)...)
	p, err := w.PreCommit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(ctx, 4); err != nil {
		t.Fatal(err)
	}
	kafkaTxnWrite(t, w, spec.Topic, kafkaTxnValues("open", 5)...)
	// Let txn 4's records land: they must be in the log, uncommitted. (A
	// bound for a busy machine; they land in milliseconds.)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, hwm := kafkaTxnOffsets(t, spec.Brokers, spec.Topic); hwm >= 10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	js, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", kafkaTxnPendingMark, js)
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
}

// kafkaTxnRunChild runs the child and returns the Pending it printed.
func kafkaTxnRunChild(t *testing.T, spec kafkaTxnChildSpec) writers.Pending {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKafkaTxnChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envKafkaTxnChild+"="+string(js))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL (%v):\n%s\n%s", err, stdout.String(), stderr.String())
	}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), kafkaTxnPendingMark); ok {
			var p writers.Pending
			if err := json.Unmarshal([]byte(rest), &p); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("child printed no Pending:\n%s\n%s", stdout.String(), stderr.String())
	return writers.Pending{}
}

func TestKafkaTxnResume(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		t.Run("Keep", func(t *testing.T) {
			ctx := t.Context()
			spec := kafkaTxnChildSpec{Brokers: brokers, Prefix: kafkaTxnName(t, "txn"), Topic: kafkaTxnTopic(t, brokers)}
			p := kafkaTxnRunChild(t, spec)
			kafkaTxnExpect(t, brokers, spec.Topic, sarama.ReadUncommitted, append(kafkaTxnValues("pre", 5), kafkaTxnValues("open", 5)...))

			w := newTestTxn(t, brokers, spec.Prefix)
			if err := w.Recover(ctx, []writers.Pending{p}); err != nil {
				t.Fatal(err)
			}
			// Txn 3 is committed, txn 4 (never pre-committed) aborted at once.
			kafkaTxnWaitStable(t, brokers, spec.Topic, 5*time.Second)
			kafkaTxnExpect(t, brokers, spec.Topic, sarama.ReadCommitted, kafkaTxnValues("pre", 5))
			// A Recover that runs again (the first one's process crashed
			// before a newer checkpoint) still finds it committed.
			again := newTestTxn(t, brokers, spec.Prefix)
			if err := again.Recover(ctx, []writers.Pending{p}); err != nil {
				t.Fatalf("second Recover: %v", err)
			}
			if err := w.Commit(ctx, p); err != nil {
				t.Fatalf("Commit after Recover: %v", err)
			}
			// The writer goes on: txn 4 on its recreated slot.
			if err := again.Begin(ctx, 4); err != nil {
				t.Fatal(err)
			}
			kafkaTxnWrite(t, again, spec.Topic, "new")
			p4, err := again.PreCommit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := again.Commit(ctx, p4); err != nil {
				t.Fatal(err)
			}
			kafkaTxnExpect(t, brokers, spec.Topic, sarama.ReadCommitted, append(kafkaTxnValues("pre", 5), "new"))
		})
		t.Run("AbortAll", func(t *testing.T) {
			ctx := t.Context()
			spec := kafkaTxnChildSpec{Brokers: brokers, Prefix: kafkaTxnName(t, "txn"), Topic: kafkaTxnTopic(t, brokers)}
			p := kafkaTxnRunChild(t, spec)
			if lso, hwm := kafkaTxnOffsets(t, brokers, spec.Topic); lso >= hwm {
				t.Fatalf("before Recover: LSO %d, HWM %d: the child's transactions should hold the partition", lso, hwm)
			}
			w := newTestTxn(t, brokers, spec.Prefix)
			start := time.Now()
			if err := w.Recover(ctx, nil); err != nil {
				t.Fatal(err)
			}
			// Well before the 1 minute transaction timeout.
			kafkaTxnWaitStable(t, brokers, spec.Topic, 5*time.Second)
			t.Logf("Recover(nil) ended the child's transactions in %v", time.Since(start).Round(time.Millisecond))
			if err := w.Begin(ctx, 5); err != nil {
				t.Fatal(err)
			}
			kafkaTxnWrite(t, w, spec.Topic, "after")
			p5, err := w.PreCommit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(ctx, p5); err != nil {
				t.Fatal(err)
			}
			kafkaTxnExpect(t, brokers, spec.Topic, sarama.ReadCommitted, []string{"after"})
			if err := w.Commit(ctx, p); !errors.Is(err, writers.ErrTxnLost) {
				t.Fatalf("Commit of the aborted child txn: %v, want ErrTxnLost", err)
			}
		})
	})
}

func TestKafkaTxnFenced(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		topic := kafkaTxnTopic(t, brokers)
		prefix := kafkaTxnName(t, "txn")
		w := newTestTxn(t, brokers, prefix)
		if err := w.Begin(ctx, 1); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, topic, kafkaTxnValues("a", 3)...)
		p, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Begin(ctx, 2); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, topic, kafkaTxnValues("b", 3)...)
		kafkaTxnSettle(t, w)

		// A newer writer with the same ids fences both.
		newer := newTestTxn(t, brokers, prefix)
		if err := newer.Recover(ctx, nil); err != nil {
			t.Fatal(err)
		}
		err = w.Commit(ctx, p)
		if !errors.Is(err, writers.ErrTxnLost) || !errors.Is(err, sarama.ErrProducerFenced) {
			t.Fatalf("Commit of a fenced txn: %v, want ErrTxnLost and PRODUCER_FENCED", err)
		}
		t.Logf("Commit: %v", err)
		if err := newTestTxn(t, brokers, prefix).Commit(ctx, p); !errors.Is(err, writers.ErrTxnLost) {
			t.Fatalf("Commit of a fenced txn from another writer: %v, want ErrTxnLost", err)
		}
		if _, err := w.PreCommit(ctx); err == nil {
			t.Fatal("PreCommit of a fenced txn: no error")
		} else {
			t.Logf("PreCommit: %v", err)
		}
		if err := w.Abort(ctx, p); err != nil {
			t.Fatalf("Abort of a fenced txn: %v", err)
		}
		kafkaTxnWaitStable(t, brokers, topic, 5*time.Second)
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, nil)
	})
}

// A record the producer fails fails PreCommit at the latest; the
// transaction's other records never become visible, and the slot works
// again on the next Begin.
func TestKafkaTxnWriteError(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		topic := kafkaTxnTopic(t, brokers)
		base := kafkautil.Config("kafkatxn-test") // a caller's own base config
		base.Producer.MaxMessageBytes = 1000
		w, err := New(Config{Brokers: brokers, TransactionalID: kafkaTxnName(t, "txn"), Sarama: base})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if base.Producer.Transaction.ID != "" || base.Producer.Idempotent {
			t.Fatal("New modified the caller's sarama config")
		}
		if err := w.Begin(ctx, 1); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, topic, "a", "b")
		kafkaTxnSettle(t, w)
		if err := w.Write(ctx, topic, nil, bytes.Repeat([]byte("x"), 2000)); err != nil {
			t.Logf("Write of a too large record: %v", err) // or only in PreCommit
		}
		_, err = w.PreCommit(ctx)
		if err == nil || !strings.HasPrefix(err.Error(), "kafka sink: ") {
			t.Fatalf("PreCommit after a failed record: %v", err)
		}
		t.Logf("PreCommit: %v", err)
		if err := w.Abort(ctx, writers.Pending{}); err != nil {
			t.Fatal(err)
		}
		if err := w.Begin(ctx, 4); err != nil { // the same slot
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, topic, "d")
		p, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, p); err != nil {
			t.Fatal(err)
		}
		kafkaTxnExpect(t, brokers, topic, sarama.ReadCommitted, []string{"d"})
	})
}

func TestCheckKafkaTxnTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, need time.Duration
		ok            bool
	}{
		{time.Minute, 30 * time.Second, true},
		{time.Minute, time.Minute, false},
		{10 * time.Second, time.Minute + 5*time.Second, false},
		{0, 59 * time.Second, true}, // 0 is the 1 minute default
		{0, time.Minute, false},
		{15 * time.Minute, 0, true},
	} {
		err := CheckTxnTimeout(tc.timeout, tc.need)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTxnTimeout(%v, %v) = %v, want ok=%v", tc.timeout, tc.need, err, tc.ok)
		}
		if err != nil && (!strings.HasPrefix(err.Error(), "kafka sink: ") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("error %q: want one line starting with \"kafka sink: \"", err)
		}
	}
	want := "kafka sink: transaction timeout 10s must exceed checkpoint interval + checkpoint timeout + restart time (1m5s)"
	if err := CheckTxnTimeout(10*time.Second, 65*time.Second); err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestKafkaTxnConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0"}, true},
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0", Slots: 4, TxnTimeout: time.Hour}, true},
		{Config{TransactionalID: "j-0"}, false},
		{Config{Brokers: []string{"b:9092"}}, false},
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0", Slots: 2}, false},
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0", TxnTimeout: -time.Second}, false},
	} {
		cfg := tc.cfg
		cfg.setDefaults()
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

func TestKafkaTxnTimeoutAboveBrokerMax(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		w, err := New(Config{Brokers: brokers, TransactionalID: kafkaTxnName(t, "txn"), TxnTimeout: 20 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for name, call := range map[string]func() error{
			"Recover": func() error { return w.Recover(t.Context(), nil) },
			"Begin":   func() error { return w.Begin(t.Context(), 1) },
		} {
			err := call()
			if err == nil || !errors.Is(err, sarama.ErrInvalidTransactionTimeout) ||
				!strings.Contains(err.Error(), "transaction.max.timeout.ms") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%s with a 20m timeout: %v, want one line naming transaction.max.timeout.ms", name, err)
			}
			t.Logf("%s: %v", name, err)
		}
	})
}

// The leak checks are top-level tests: in a subtest, the parent test's
// goroutine (waiting in t.Run) would count as left over.

func TestKafkaTxnCloseNoLeaksKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close() // if the test fails early; Close twice is fine
	kafkaTxnCloseNoLeaks(t, b.Addrs(), b.Close)
}

func TestKafkaTxnCloseNoLeaksApacheKafka(t *testing.T) {
	brokers := kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka))
	kafkaTxnCloseNoLeaks(t, brokers, func() {})
}

// kafkaTxnCloseNoLeaks uses a writer, leaves a transaction open, closes it
// twice, stops the broker and checks that no goroutine is left.
func kafkaTxnCloseNoLeaks(t *testing.T, brokers []string, stopBroker func()) {
	ctx := t.Context()
	topic := kafkaTxnTopic(t, brokers)
	w, err := New(Config{Brokers: brokers, TransactionalID: kafkaTxnName(t, "txn")})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(ctx, 1); err != nil {
		t.Fatal(err)
	}
	kafkaTxnWrite(t, w, topic, "a")
	p, err := w.PreCommit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(ctx, 2); err != nil { // left open by Close
		t.Fatal(err)
	}
	kafkaTxnWrite(t, w, topic, "b")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Begin(ctx, 3); err == nil {
		t.Fatal("Begin after Close: no error")
	}
	stopBroker()
	if leaked := testutil.LeakedGoroutines(5 * time.Second); leaked != "" {
		t.Fatalf("goroutines left after Close:\n%s", leaked)
	}
}

// BenchmarkKafkaTxn writes b.N 100-byte records in transactions of
// 10,000, each pre-committed and committed, and reports records/s.
func BenchmarkKafkaTxn(b *testing.B) {
	for _, target := range kafkaTxnTargets {
		b.Run(target.name, func(b *testing.B) {
			brokers := target.start(b)
			ctx := b.Context()
			topic := kafkaTxnTopic(b, brokers)
			w := newTestTxn(b, brokers, kafkaTxnName(b, "txn"))
			if err := w.Recover(ctx, nil); err != nil {
				b.Fatal(err)
			}
			value := bytes.Repeat([]byte("x"), 100)
			const perTxn = 10000
			b.ResetTimer()
			txn := int64(0)
			for i := 0; i < b.N; {
				txn++
				if err := w.Begin(ctx, txn); err != nil {
					b.Fatal(err)
				}
				for j := 0; j < perTxn && i < b.N; j, i = j+1, i+1 {
					if err := w.Write(ctx, topic, fmt.Appendf(nil, "k%d", i%1000), value); err != nil {
						b.Fatal(err)
					}
				}
				p, err := w.PreCommit(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Commit(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkKafkaTxnCheckpoint measures one checkpoint's transaction
// overhead: Begin, one record, PreCommit, Commit.
func BenchmarkKafkaTxnCheckpoint(b *testing.B) {
	for _, target := range kafkaTxnTargets {
		b.Run(target.name, func(b *testing.B) {
			brokers := target.start(b)
			ctx := b.Context()
			topic := kafkaTxnTopic(b, brokers)
			w := newTestTxn(b, brokers, kafkaTxnName(b, "txn"))
			if err := w.Recover(ctx, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if err := w.Begin(ctx, int64(i)); err != nil {
					b.Fatal(err)
				}
				if err := w.Write(ctx, topic, nil, []byte("x")); err != nil {
					b.Fatal(err)
				}
				p, err := w.PreCommit(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Commit(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// kafkaTxnGroupOffset returns group's committed offset of partition 0 of
// topic (-1 if none). stable: ask with require_stable and wait while a
// transaction holds pending offsets of the partition (UNSTABLE_OFFSET_COMMIT);
// otherwise the broker answers with the last committed offset, ignoring
// pending ones.
func kafkaTxnGroupOffset(t testing.TB, brokers []string, group, topic string, stable bool) int64 {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkautil.Config("kafkatxn-test-group-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	deadline := time.Now().Add(time.Minute) // a bound for a busy machine
	for {
		b, err := client.Coordinator(group)
		if err != nil {
			t.Fatal(err)
		}
		req := sarama.NewOffsetFetchRequest(kafkautil.Version, group, map[string][]int32{topic: {0}})
		req.RequireStable = stable
		res, err := b.FetchOffset(req)
		if err != nil {
			t.Fatal(err)
		}
		blk := res.GetBlock(topic, 0)
		code := res.Err
		if code == sarama.ErrNoError && blk != nil {
			code = blk.Err
		}
		switch {
		case code == sarama.ErrNoError && blk != nil:
			return blk.Offset
		case code == sarama.ErrGroupIDNotFound: // kfake, for a group without offsets
			return -1
		case code == sarama.ErrUnstableOffsetCommit && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("fetching offsets of group %s: %v (block %+v)", group, code, blk)
		}
	}
}

// TestKafkaTxnWriteOffsets: consumer offsets written into a transaction
// become the group's committed offsets when it commits — also when another
// writer commits its Pending, and in a transaction without records — and
// never when it aborts.
func TestKafkaTxnWriteOffsets(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		in, out := kafkaTxnTopic(t, brokers), kafkaTxnTopic(t, brokers)
		group := kafkaTxnName(t, "group")
		prefix := kafkaTxnName(t, "txn")
		w := newTestTxn(t, brokers, prefix)
		if err := w.Recover(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteOffsets(ctx, group, map[string]map[int32]int64{in: {0: 1}}); err == nil {
			t.Fatal("WriteOffsets outside a transaction: no error")
		}
		offset := func(stable bool) int64 { return kafkaTxnGroupOffset(t, brokers, group, in, stable) }
		step := func(txn int64, values []string, off int64, commit bool) writers.Pending {
			t.Helper()
			if err := w.Begin(ctx, txn); err != nil {
				t.Fatal(err)
			}
			kafkaTxnWrite(t, w, out, values...)
			if err := w.WriteOffsets(ctx, group, map[string]map[int32]int64{in: {0: off}}); err != nil {
				t.Fatal(err)
			}
			p, err := w.PreCommit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := offset(false); got == off {
				t.Fatalf("txn %d: offset %d visible before the commit", txn, got)
			}
			if commit {
				err = w.Commit(ctx, p)
			} else {
				err = w.Abort(ctx, p)
			}
			if err != nil {
				t.Fatal(err)
			}
			return p
		}

		step(1, []string{"a"}, 5, true)
		if got := offset(true); got != 5 {
			t.Fatalf("after commit: group offset %d, want 5", got)
		}
		step(2, []string{"b"}, 9, false)
		if got := offset(true); got != 5 {
			t.Fatalf("after abort: group offset %d, want 5", got)
		}
		// Offsets only, no records: committed and aborted alike.
		step(3, nil, 7, true)
		if got := offset(true); got != 7 {
			t.Fatalf("after an offsets-only commit: group offset %d, want 7", got)
		}
		step(4, nil, 8, false)
		if got := offset(true); got != 7 {
			t.Fatalf("after an offsets-only abort: group offset %d, want 7", got)
		}
		kafkaTxnWaitStable(t, brokers, out, 10*time.Second)
		kafkaTxnExpect(t, brokers, out, sarama.ReadCommitted, []string{"a"})

		// The offsets are on the broker by PreCommit: a recovery commit
		// of the Pending in another writer commits them with the records.
		if err := w.Begin(ctx, 5); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, out, "c")
		if err := w.WriteOffsets(ctx, group, map[string]map[int32]int64{in: {0: 11}}); err != nil {
			t.Fatal(err)
		}
		p, err := w.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		other := newTestTxn(t, brokers, prefix)
		if err := other.Recover(ctx, []writers.Pending{p}); err != nil {
			t.Fatal(err)
		}
		if got := offset(true); got != 11 {
			t.Fatalf("after a recovery commit: group offset %d, want 11", got)
		}
		kafkaTxnExpect(t, brokers, out, sarama.ReadCommitted, []string{"a", "c"})

		// Offsets only, pre-committed, then the writer is gone: a new
		// writer that keeps the Pending commits it, one that doesn't
		// aborts it.
		offsetsOnly := func(w *Txn, txn, off int64) writers.Pending {
			t.Helper()
			if err := w.Begin(ctx, txn); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteOffsets(ctx, group, map[string]map[int32]int64{in: {0: off}}); err != nil {
				t.Fatal(err)
			}
			p, err := w.PreCommit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			return p
		}
		p = offsetsOnly(other, 6, 13)
		third := newTestTxn(t, brokers, prefix)
		if err := third.Recover(ctx, []writers.Pending{p}); err != nil {
			t.Fatal(err)
		}
		if got := offset(true); got != 13 {
			t.Fatalf("after recovering an offsets-only txn: group offset %d, want 13", got)
		}
		offsetsOnly(third, 7, 17)
		fourth := newTestTxn(t, brokers, prefix)
		if err := fourth.Recover(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if got := offset(true); got != 13 {
			t.Fatalf("after a recovery that drops an offsets-only txn: group offset %d, want 13", got)
		}

		// A bad argument fails the transaction: it can't pre-commit
		// (records without their offsets would be duplicated later).
		if err := fourth.Begin(ctx, 8); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWrite(t, fourth, out, "d")
		if err := fourth.WriteOffsets(ctx, group, map[string]map[int32]int64{in: {0: -1}}); err == nil {
			t.Fatal("a negative offset was accepted")
		}
		if _, err := fourth.PreCommit(ctx); err == nil {
			t.Fatal("PreCommit after a failed WriteOffsets succeeded")
		}
		if err := fourth.Abort(ctx, writers.Pending{}); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWaitStable(t, brokers, out, 10*time.Second)
		kafkaTxnExpect(t, brokers, out, sarama.ReadCommitted, []string{"a", "c"})
	})
}
