package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/exact"
)

// TestKeyStateJSON: checkpoints keep a key's state as [events, amount];
// files written before exact totals read as before, and amounts past
// int64 are written and read back as JSON integers.
func TestKeyStateJSON(t *testing.T) {
	var old jobData
	if err := json.Unmarshal([]byte(`{"subtasks":2,"state":{"a":[3,-12],"b":[1,9223372036854775807]},"pending":null}`), &old); err != nil {
		t.Fatalf("an old checkpoint: %v", err)
	}
	if a, b := old.State["a"], old.State["b"]; a.Events != 3 || !a.Amount.Equal(exact.New(-12)) || b.Events != 1 || !b.Amount.Equal(exact.New(math.MaxInt64)) {
		t.Fatalf("old state read as %+v", old.State)
	}
	big := exact.New(math.MaxInt64)
	big.Add(math.MaxInt64)
	data := jobData{State: keyedState{"b": {Events: 2, Amount: big}}}
	b, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"state":{"b":[2,18446744073709551614]}`; !json.Valid(b) || !strings.Contains(string(b), want) {
		t.Fatalf("written as %s, want %s in it", b, want)
	}
	var back jobData
	if err := json.Unmarshal(b, &back); err != nil || back.State["b"].Events != 2 || !back.State["b"].Amount.Equal(big) {
		t.Fatalf("read back as %+v, %v", back.State, err)
	}
	for _, bad := range []string{`[1]`, `[1,"2"]`, `[1.5,2]`, `[1,2.0]`, `{"events":1}`, `[1,null]`} {
		var k keyState
		if err := json.Unmarshal([]byte(bad), &k); err == nil {
			t.Errorf("%s read as %+v, want an error", bad, k)
		}
	}
}

// TestJobDataGolden: testdata/data-v1.json is a checkpoint's data as
// checkpoints were written before the package moved (amounts past both
// ends of int64, a key that JSON escapes, pending transactions with and
// without data). It reads as those values and is written back byte for
// byte.
func TestJobDataGolden(t *testing.T) {
	golden, err := os.ReadFile("testdata/data-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var data jobData
	if err := json.Unmarshal(golden, &data); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"hot": "4 18446744073709551614", "cold": "2 -9223372036854775813", "k1": "7 -12", "é\"k": "1 0"}
	for k, w := range want {
		st, ok := data.State[k]
		if got := strconv.FormatInt(st.Events, 10) + " " + st.Amount.String(); !ok || got != w {
			t.Errorf("state[%q] = %s (present %v), want %s", k, got, ok, w)
		}
	}
	if len(data.State) != len(want) || data.Subtasks != 3 || len(data.Pending) != 2 ||
		data.Pending[1].Sink != "kafka" || string(data.Pending[1].Data) != `{"producer_id":7,"epoch":2}` {
		t.Errorf("read as %+v", data)
	}
	back, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, bytes.TrimSpace(golden)) {
		t.Errorf("written back as\n%s\nwant\n%s", back, golden)
	}
}

// TestOperatorTotalsPastInt64: the operator's running totals cross both
// ends of int64 exactly, in its output records and in its snapshot.
func TestOperatorTotalsPastInt64(t *testing.T) {
	p := &pipeline{
		toOp:   [][]chan item{{make(chan item, 8)}},
		toSink: []chan item{make(chan item, 8)},
		acks:   make(chan ack, 1),
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	state := keyedState{"p": {1, exact.New(math.MaxInt64 - 1)}, "n": {1, exact.New(math.MinInt64 + 1)}}
	go func() { done <- p.operator(ctx, 0, state) }()
	p.toOp[0][0] <- item{recs: []output{{Key: "p", Amount: 1}, {Key: "p", Amount: 5}, {Key: "n", Amount: -3}, {Key: "p", Amount: -10}}}
	p.toOp[0][0] <- item{barrier: 7}
	out := <-p.toSink[0]
	var got []string
	for _, r := range out.recs {
		got = append(got, r.Key+" "+r.Total.String())
	}
	want := []string{"p 9223372036854775807", "p 9223372036854775812", "n -9223372036854775810", "p 9223372036854775802"}
	if !slices.Equal(got, want) {
		t.Fatalf("outputs %v, want %v", got, want)
	}
	snap := <-p.acks
	if snap.state["p"].Events != 4 || snap.state["p"].Amount.String() != "9223372036854775802" ||
		snap.state["n"].Events != 2 || snap.state["n"].Amount.String() != "-9223372036854775810" {
		t.Fatalf("snapshot %+v", snap.state)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("operator ended with %v", err)
	}
}
