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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/writers"
)

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
