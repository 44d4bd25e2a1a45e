package kafkasink

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The producer writes one record per output record: that is its hot
// path. franz-go hands every record it was given back exactly once, to
// its promise (kafkaSlot.done), after which it holds no reference to it or
// its bytes; done then recycles it. So a record written into a
// transaction costs no allocation of ours once the pool is warm, where a
// fresh record and its copies of key and value cost three.

// maxPooledBuf is the largest buffer kept for reuse: a rare large record
// should not pin its buffer in the pool.
const maxPooledBuf = 64 << 10

var records = sync.Pool{New: func() any { return new(kgo.Record) }}

// newRecord returns a record for topic with copies of key and value (nil
// stays nil: no key means the partitioner picks the partition; an empty
// key is a key).
func newRecord(topic string, key, value []byte) *kgo.Record {
	r := records.Get().(*kgo.Record)
	kb, vb := r.Key[:0], r.Value[:0]
	*r = kgo.Record{Topic: topic}
	if key != nil {
		r.Key = append(kb, key...)
		if r.Key == nil {
			r.Key = []byte{}
		}
	}
	if value != nil {
		r.Value = append(vb, value...)
		if r.Value == nil {
			r.Value = []byte{}
		}
	}
	return r
}

// releaseRecord recycles a record newRecord made, once the producer has
// handed it back (or it was never sent), keeping its buffers.
func releaseRecord(r *kgo.Record) {
	kb, vb := r.Key[:0], r.Value[:0]
	if cap(kb) > maxPooledBuf {
		kb = nil
	}
	if cap(vb) > maxPooledBuf {
		vb = nil
	}
	*r = kgo.Record{Key: kb, Value: vb}
	records.Put(r)
}
