package kafkasink

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A record written into a transaction reuses one the producer handed
// back: building one allocates nothing once the pool is warm. Under -race
// sync.Pool drops a quarter of what is put back, hence "at most one" on
// average; a fresh record with its own copies costs three.
func TestRecordReuse(t *testing.T) {
	key, value := []byte("k17"), bytes.Repeat([]byte("v"), 120)
	releaseRecord(newRecord("t", key, value)) // warm the pool
	allocs := testing.AllocsPerRun(1000, func() {
		releaseRecord(newRecord("t", key, value))
	})
	if allocs > 1 {
		t.Errorf("building a record: %.1f allocations, want at most 1", allocs)
	}
}

// A record holds its own copy of key and value: the caller's buffers are
// reused at once, and a recycled record's old bytes don't show through.
func TestRecordCopies(t *testing.T) {
	key, value := []byte("key-1"), []byte("a longer value, number one")
	r := newRecord("t", key, value)
	copy(key, "XXXXX")
	copy(value, bytes.Repeat([]byte("X"), len(value)))
	if string(r.Key) != "key-1" || string(r.Value) != "a longer value, number one" || r.Topic != "t" {
		t.Fatalf("record = %q %q on %q, want the bytes given", r.Key, r.Value, r.Topic)
	}
	releaseRecord(r)
	for range 10 { // the pool may hand back the record just released
		r := newRecord("u", nil, []byte("v2"))
		if r.Key != nil {
			t.Fatalf("record without key has key %q", r.Key)
		}
		if string(r.Value) != "v2" || r.Topic != "u" || r.Partition != 0 || r.Offset != 0 {
			t.Fatalf("recycled record = %q on %q (%d@%d), want v2 on u", r.Value, r.Topic, r.Partition, r.Offset)
		}
		releaseRecord(r)
	}
	// An empty key is a key (null and "" are different keys to Kafka).
	releaseRecord(newRecord("t", []byte("x"), nil))
	for range 10 {
		r := newRecord("t", []byte{}, nil)
		if r.Key == nil || len(r.Key) != 0 || r.Value != nil {
			t.Fatalf("empty key became %#v, value %#v", r.Key, r.Value)
		}
		releaseRecord(r)
	}
}

// done notes every partition a transaction's records went to, also when
// the next transaction starts on the partition the previous one ended on
// (its cache of the last partition must not carry over), and the first
// error.
func TestSlotDoneNotesPartitions(t *testing.T) {
	s := &kafkaSlot{parts: map[topicPart]struct{}{}}
	begin := s.reset // what Begin does to the slot
	rec := func(part int32) *kgo.Record { r := newRecord("t", []byte("k"), nil); r.Partition = part; return r }
	begin()
	for _, p := range []int32{0, 0, 1, 1, 0, 2} {
		s.done(rec(p), nil)
	}
	if len(s.parts) != 3 {
		t.Errorf("first transaction: parts %v, want 0, 1 and 2", s.parts)
	}
	begin()
	s.done(rec(2), nil)
	if _, ok := s.parts[topicPart{"t", 2}]; !ok || len(s.parts) != 1 {
		t.Errorf("second transaction, same partition as the last record before it: parts %v, want t/2", s.parts)
	}
	if err := s.failed(); err != nil {
		t.Fatalf("failed() = %v before any error", err)
	}
	s.done(rec(3), errors.New("boom"))
	s.done(rec(3), errors.New("second"))
	if err := s.failed(); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failed() = %v, want the first error", err)
	}
	begin()
	if err := s.failed(); err != nil {
		t.Errorf("failed() = %v after Begin", err)
	}
}
