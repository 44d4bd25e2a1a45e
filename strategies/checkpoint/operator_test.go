package checkpoint

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/exact"
)

// TestOperatorAlignsBarriers: input 0 delivers barrier 1 early and keeps
// sending; input 1 is slow. The snapshot for checkpoint 1 must hold exactly
// the records before barrier 1 on each input — none of input 0's later
// records, all of input 1's earlier ones — and input 0's later records
// must come out after the barrier, not be lost.
func TestOperatorAlignsBarriers(t *testing.T) {
	p := &pipeline{
		toOp:   [][]chan item{{make(chan item, 8), make(chan item, 8)}},
		toSink: []chan item{make(chan item, 16)},
		acks:   make(chan ack, 4),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.operator(ctx, 0, keyedState{"a": {10, exact.New(100)}}) }()

	rec := func(key string, amount int64) item { return item{recs: []output{{Key: key, Amount: amount}}} }
	in0, in1 := p.toOp[0][0], p.toOp[0][1]
	in0 <- rec("a", 1)
	in0 <- item{barrier: 1}
	in0 <- rec("a", 1000) // after barrier 1 on input 0: not in snapshot 1
	in0 <- rec("b", 1000)

	// Input 0 is blocked now: its post-barrier records must not come out
	// before input 1's barrier.
	time.Sleep(100 * time.Millisecond)
	in1 <- rec("b", 5) // before barrier 1 on input 1: in snapshot 1
	in1 <- rec("a", 2)
	in1 <- item{barrier: 1}

	var snap ack
	select {
	case snap = <-p.acks:
	case err := <-done:
		t.Fatalf("operator stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no snapshot after both barriers")
	}
	if snap.n != 1 || snap.kind != ackOperator {
		t.Fatalf("ack = %+v, want operator ack of checkpoint 1", snap)
	}
	want := keyedState{"a": {12, exact.New(103)}, "b": {1, exact.New(5)}}
	if len(snap.state) != len(want) || snap.state["a"] != want["a"] || snap.state["b"] != want["b"] {
		t.Fatalf("snapshot = %v, want %v (records before barrier 1 only)", snap.state, want)
	}

	// Downstream order: the three pre-barrier records, the barrier, then
	// the held records with their running totals.
	var got []string
	for len(got) < 6 {
		select {
		case it := <-p.toSink[0]:
			if it.barrier != 0 {
				got = append(got, "barrier")
				continue
			}
			for _, r := range it.recs {
				got = append(got, r.Key+":"+strconv.FormatInt(r.Count, 10)+":"+r.Total.String())
			}
		case <-time.After(time.Minute):
			t.Fatalf("output so far %v: missing records", got)
		}
	}
	wantOut := []string{"a:11:101", "b:1:5", "a:12:103", "barrier", "a:13:1103", "b:2:1005"}
	for i := range wantOut {
		if got[i] != wantOut[i] {
			t.Fatalf("output = %v, want %v", got, wantOut)
		}
	}
	cancel()
	<-done
}
