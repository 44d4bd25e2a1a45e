package kafkasink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/writers"
)

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
