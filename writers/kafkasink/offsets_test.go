package kafkasink

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/writers"
)

// offsetsCase is one WriteOffsets scenario: an input topic whose offsets a
// group commits through the writer's transactions, and an output topic
// the transactions write records to.
type offsetsCase struct {
	t                      *testing.T
	brokers                []string
	in, out, group, prefix string
}

func newOffsetsCase(t *testing.T, brokers []string) *offsetsCase {
	return &offsetsCase{t: t, brokers: brokers,
		in: kafkaTxnTopic(t, brokers), out: kafkaTxnTopic(t, brokers),
		group: kafkaTxnName(t, "group"), prefix: kafkaTxnName(t, "txn")}
}

// writer returns a new writer of the case's prefix, recovered with keep.
func (c *offsetsCase) writer(keep ...writers.Pending) *Txn {
	c.t.Helper()
	w := newTestTxn(c.t, c.brokers, c.prefix)
	if err := w.Recover(c.t.Context(), keep); err != nil {
		c.t.Fatal(err)
	}
	return w
}

// offset is the group's committed offset of the input (see
// kafkaTxnGroupOffset for stable).
func (c *offsetsCase) offset(stable bool) int64 {
	return kafkaTxnGroupOffset(c.t, c.brokers, c.group, c.in, stable)
}

// wantOffset fails unless the group's stable committed offset is want.
func (c *offsetsCase) wantOffset(when string, want int64) {
	c.t.Helper()
	if got := c.offset(true); got != want {
		c.t.Fatalf("%s: group offset %d, want %d", when, got, want)
	}
}

// preCommit writes values and the input offset off into transaction txn
// and pre-commits it; the offset must not be visible yet.
func (c *offsetsCase) preCommit(w *Txn, txn int64, values []string, off int64) writers.Pending {
	c.t.Helper()
	ctx := c.t.Context()
	if err := w.Begin(ctx, txn); err != nil {
		c.t.Fatal(err)
	}
	kafkaTxnWrite(c.t, w, c.out, values...)
	if err := w.WriteOffsets(ctx, c.group, map[string]map[int32]int64{c.in: {0: off}}); err != nil {
		c.t.Fatal(err)
	}
	p, err := w.PreCommit(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	if got := c.offset(false); got == off {
		c.t.Fatalf("txn %d: offset %d visible before the commit", txn, got)
	}
	return p
}

// step pre-commits txn (see preCommit), then commits or aborts it.
func (c *offsetsCase) step(w *Txn, txn int64, values []string, off int64, commit bool) {
	c.t.Helper()
	p := c.preCommit(w, txn, values, off)
	var err error
	if commit {
		err = w.Commit(c.t.Context(), p)
	} else {
		err = w.Abort(c.t.Context(), p)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// expect waits until no transaction is pending on the output and checks
// what read-committed consumers see there.
func (c *offsetsCase) expect(values ...string) {
	c.t.Helper()
	kafkaTxnWaitStable(c.t, c.brokers, c.out, 10*time.Second)
	kafkaTxnExpect(c.t, c.brokers, c.out, sarama.ReadCommitted, values)
}

// TestKafkaTxnWriteOffsets: consumer offsets written into a transaction
// become the group's committed offsets when it commits — also in a
// transaction without records — and never when it aborts.
func TestKafkaTxnWriteOffsets(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		c := newOffsetsCase(t, brokers)
		w := c.writer()
		if err := w.WriteOffsets(t.Context(), c.group, map[string]map[int32]int64{c.in: {0: 1}}); err == nil {
			t.Fatal("WriteOffsets outside a transaction: no error")
		}
		c.step(w, 1, []string{"a"}, 5, true)
		c.wantOffset("after commit", 5)
		c.step(w, 2, []string{"b"}, 9, false)
		c.wantOffset("after abort", 5)
		// Offsets only, no records: committed and aborted alike.
		c.step(w, 3, nil, 7, true)
		c.wantOffset("after an offsets-only commit", 7)
		c.step(w, 4, nil, 8, false)
		c.wantOffset("after an offsets-only abort", 7)
		c.expect("a")
	})
}

// TestKafkaTxnWriteOffsetsRecovered: the offsets are on the broker by
// PreCommit, so a recovery commit of the Pending in another writer commits
// them with the records. With offsets only and the writer gone, a new
// writer that keeps the Pending commits it, one that doesn't aborts it.
func TestKafkaTxnWriteOffsetsRecovered(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		c := newOffsetsCase(t, brokers)
		w := c.writer()
		p := c.preCommit(w, 5, []string{"c"}, 11)
		w.Close()
		other := c.writer(p)
		c.wantOffset("after a recovery commit", 11)
		c.expect("c")

		p = c.preCommit(other, 6, nil, 13)
		other.Close()
		third := c.writer(p)
		c.wantOffset("after recovering an offsets-only txn", 13)
		c.preCommit(third, 7, nil, 17)
		third.Close()
		c.writer()
		c.wantOffset("after a recovery that drops an offsets-only txn", 13)
	})
}

// TestKafkaTxnWriteOffsetsBadArgument: a bad argument fails the
// transaction: it can't pre-commit (records without their offsets would
// be duplicated later).
func TestKafkaTxnWriteOffsetsBadArgument(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		ctx := t.Context()
		c := newOffsetsCase(t, brokers)
		w := c.writer()
		c.step(w, 1, []string{"a"}, 5, true)
		if err := w.Begin(ctx, 2); err != nil {
			t.Fatal(err)
		}
		kafkaTxnWrite(t, w, c.out, "d")
		if err := w.WriteOffsets(ctx, c.group, map[string]map[int32]int64{c.in: {0: -1}}); err == nil {
			t.Fatal("a negative offset was accepted")
		}
		if _, err := w.PreCommit(ctx); err == nil {
			t.Fatal("PreCommit after a failed WriteOffsets succeeded")
		}
		if err := w.Abort(ctx, writers.Pending{}); err != nil {
			t.Fatal(err)
		}
		c.wantOffset("after the failed transaction", 5)
		c.expect("a")
	})
}
