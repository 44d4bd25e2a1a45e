package kafkasink

import (
	"bytes"
	"testing"
)

// A record written into a transaction reuses a message sarama handed
// back: building one allocates nothing once the pool is warm. Under -race
// sync.Pool drops a quarter of what is put back, hence "at most one" on
// average; a fresh message with its own copy and boxed encoders costs four.
func TestMessageReuse(t *testing.T) {
	key, value := []byte("k17"), bytes.Repeat([]byte("v"), 120)
	releaseMessage(newMessage("t", key, value)) // warm the pool
	allocs := testing.AllocsPerRun(1000, func() {
		pm := newMessage("t", key, value)
		releaseMessage(pm)
	})
	if allocs > 1 {
		t.Errorf("building a message: %.1f allocations, want at most 1", allocs)
	}
}

// A message holds its own copy of key and value: the caller's buffers are
// reused at once, and a recycled message's old bytes don't show through.
func TestMessageCopies(t *testing.T) {
	key, value := []byte("key-1"), []byte("a longer value, number one")
	pm := newMessage("t", key, value)
	copy(key, "XXXXX")
	copy(value, bytes.Repeat([]byte("X"), len(value)))
	k, _ := pm.Key.Encode()
	v, _ := pm.Value.Encode()
	if string(k) != "key-1" || string(v) != "a longer value, number one" || pm.Key.Length() != 5 || pm.Topic != "t" {
		t.Fatalf("message = %q %q (key length %d) on %q, want the bytes given", k, v, pm.Key.Length(), pm.Topic)
	}
	releaseMessage(pm)
	for range 10 { // the pool may hand back the message just released
		pm := newMessage("u", nil, []byte("v2"))
		if pm.Key != nil {
			t.Fatalf("message without key has key %v", pm.Key)
		}
		if v, _ := pm.Value.Encode(); string(v) != "v2" || pm.Topic != "u" {
			t.Fatalf("recycled message = %q on %q, want v2 on u", v, pm.Topic)
		}
		releaseMessage(pm)
	}
}
