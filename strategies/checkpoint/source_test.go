package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
)

// Routing an event whose key came before allocates nothing: the source
// hands every record on, and an allocation per record (its key as a new
// string, a hasher) is most of what the pipeline collects.
func TestRouteAllocs(t *testing.T) {
	p := &pipeline{r: &runner{cfg: Config{Job: "j", Topic: "t"}}, toOp: make([][]chan item, 3)}
	s := &sourceTask{p: p, keys: map[string]string{}}
	rec := &batch.Record{Value: []byte(`{"id":7,"key":"k-42","amount":-3,"ts":1700000000000}`)}
	first, target := s.route(rec)
	if first.Key != "k-42" || first.ID != 7 || first.Amount != -3 || first.Dead != nil {
		t.Fatalf("route = %+v, want event 7 of key k-42", first)
	}
	if want := keyOwner([]byte("k-42"), 3); target != want {
		t.Fatalf("routed to operator %d, want the key's owner %d", target, want)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		o, _ := s.route(rec)
		if o.Key != "k-42" {
			t.Fatalf("key %q", o.Key)
		}
	})
	if allocs != 0 {
		t.Errorf("routing a record of a known key: %.1f allocations, want 0", allocs)
	}
}

// A source's interned keys stay bounded: past maxInterned distinct keys
// the table starts over, and every key still comes back as itself.
func TestInternBounded(t *testing.T) {
	s := &sourceTask{keys: map[string]string{}}
	for i := range maxInterned + 10 {
		b := []byte{byte(i), byte(i >> 8), byte(i >> 16), 'k'}
		if k := s.key(b); k != string(b) {
			t.Fatalf("key(%q) = %q", b, k)
		}
		if len(s.keys) > maxInterned {
			t.Fatalf("%d interned keys, want at most %d", len(s.keys), maxInterned)
		}
	}
}

// A source takes a barrier while its Read waits for records: otherwise
// every operator would hold the other sources' inputs (alignment) until
// this one's fetch returned, and the whole pipeline would stall on it.
// The read here hands over one record and then blocks until the test
// ends; the barrier must still be acked, after that record, and reach
// both operators.
func TestSourceTakesBarrierDuringRead(t *testing.T) {
	p := &pipeline{
		r:        &runner{cfg: Config{Job: "j", Topic: "t"}, crash: func(string) {}},
		toOp:     [][]chan item{{make(chan item, 8)}, {make(chan item, 8)}},
		barriers: []chan int64{make(chan int64, 1)},
		acks:     make(chan ack, 4),
		chk:      &offsets.Checkpoint{Offsets: map[int32]int64{0: 10}},
	}
	p.bounds.Store(&map[int32]batch.Bounds{0: {Start: 0, End: 1000}})
	ctx, cancel := context.WithCancel(context.Background())
	reading := make(chan struct{})
	p.read = func(ctx context.Context, r record.Range, fn func(*batch.Record) error) error {
		rec := &batch.Record{Offset: r.From, Value: []byte(`{"id":1,"key":"a","amount":5,"ts":1}`)}
		if err := fn(rec); err != nil {
			return err
		}
		close(reading)
		<-ctx.Done() // a fetch that does not return
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- p.source(ctx, 0, 0) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("source stopped with %v, want context.Canceled", err)
		}
	}()
	<-reading
	p.barriers[0] <- 7
	select {
	case a := <-p.acks:
		if a.n != 7 || a.kind != ackSource || a.next != 11 || a.records != 1 {
			t.Fatalf("ack = %+v, want source ack of barrier 7 resuming at 11 after 1 record", a)
		}
	case err := <-done:
		t.Fatalf("source stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("barrier 7 not acked while the source's Read waits for records")
	}
	// Each operator gets what came before the barrier, then the barrier.
	var got []int64
	for o := range p.toOp {
		for {
			it := <-p.toOp[o][0]
			if it.barrier != 0 {
				got = append(got, it.barrier)
				break
			}
			if len(it.recs) != 1 || it.recs[0].Key != "a" || o != keyOwner([]byte("a"), 2) {
				t.Fatalf("operator %d got records %+v before the barrier, want only key a's record at its owner", o, it.recs)
			}
		}
	}
	if len(got) != 2 || got[0] != 7 || got[1] != 7 {
		t.Fatalf("barriers downstream = %v, want 7 at both operators", got)
	}
}

// A source that caught up asks the poller for the partitions' ends at once
// (a kick) and goes on as soon as a poll stored them, instead of looking
// again on a timer of its own: that timer and the poll period made a new
// record wait up to 30 ms before its read (latency).
func TestSourceWaitKicksPoller(t *testing.T) {
	p := &pipeline{kick: make(chan struct{}, 1)}
	s := &sourceTask{p: p}
	done := make(chan error, 1)
	go func() { done <- s.wait(t.Context()) }()
	select {
	case <-p.kick:
	case err := <-done:
		t.Fatalf("wait returned %v without asking for a poll", err)
	case <-time.After(time.Minute):
		t.Fatal("a caught-up source did not ask the poller for the ends")
	}
	p.storeBounds(map[int32]batch.Bounds{0: {End: 5}})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("wait did not return after a poll stored the ends")
	}
}
