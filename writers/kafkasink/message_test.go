package kafkasink

import (
	"bytes"
	"testing"
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
