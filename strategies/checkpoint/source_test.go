package checkpoint

import (
	"testing"

	"github.com/microbatch/microbatch/batch"
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
