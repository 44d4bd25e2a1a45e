package kafkasink

import (
	"sync"

	"github.com/IBM/sarama"
)

// message is one record on its way through a producer: the
// ProducerMessage sarama is given and the bytes its key and value point
// at. Sarama hands every message it was given back exactly once, on
// Successes or Errors (drain), after which it holds no reference to it or
// its bytes; drain then recycles it. So a record written into a
// transaction costs no allocation of ours once the pool is warm, where a
// fresh message, its copy of key and value, and two boxed ByteEncoders
// cost four (the producer writes one message per output record: that is
// its hot path).
type message struct {
	pm       sarama.ProducerMessage
	key, val bytesEncoder
	buf      []byte // key, then value
}

// bytesEncoder is sarama.ByteEncoder behind a pointer: set as an Encoder
// it points into its message instead of boxing a slice header.
type bytesEncoder struct{ b []byte }

func (e *bytesEncoder) Encode() ([]byte, error) { return e.b, nil }
func (e *bytesEncoder) Length() int             { return len(e.b) }

// maxPooledBuf is the largest buffer kept for reuse: a rare large record
// should not pin its buffer in the pool.
const maxPooledBuf = 64 << 10

var messages = sync.Pool{New: func() any { return new(message) }}

// newMessage returns a message for topic with copies of key and value (nil
// stays nil: no key means the partitioner picks the partition).
func newMessage(topic string, key, value []byte) *sarama.ProducerMessage {
	m := messages.Get().(*message)
	m.buf = append(append(m.buf[:0], key...), value...)
	m.pm = sarama.ProducerMessage{Topic: topic, Metadata: m}
	if key != nil {
		m.key.b = m.buf[:len(key):len(key)]
		m.pm.Key = &m.key
	}
	if value != nil {
		m.val.b = m.buf[len(key):]
		m.pm.Value = &m.val
	}
	return &m.pm
}

// releaseMessage recycles a message newMessage made, once sarama has
// handed it back (or it was never sent). Other messages are left alone.
func releaseMessage(pm *sarama.ProducerMessage) {
	m, ok := pm.Metadata.(*message)
	if !ok || &m.pm != pm {
		return
	}
	m.pm = sarama.ProducerMessage{}
	m.key.b, m.val.b = nil, nil
	if cap(m.buf) > maxPooledBuf {
		m.buf = nil
	}
	messages.Put(m)
}
