package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record batches (magic v2) are decoded here, from the bytes of the fetch
// response: a batch header by kmsg.RecordBatch, its records by
// recordReader into one reused Record. Nothing is allocated per record;
// a compressed batch is decompressed into one new buffer.
//
// Lifetime: a Record's Key and Value are sub-slices of the fetch response
// or of a batch's decompressed buffer. Neither is reused or written to
// after the callback, so a slice kept past it stays intact — but it keeps
// the whole response (up to FetchBytes) alive: callers copy what they
// keep, as Record's doc asks.

// Batch attributes (the low bits of RecordBatch.Attributes).
const (
	attrCodec         = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// batchHeaderLen is the bytes of a v2 batch before its records (its
// length field counts from byte 12); the CRC covers it from batchCRCFrom.
const (
	batchHeaderLen = 61
	batchCRCFrom   = 21
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decompressor is franz-go's, safe for concurrent use (its decoders are
// pooled).
var decompressor = kgo.DefaultDecompressor()

// batchIter walks the record batches of one partition of a fetch
// response. A batch the fetch size cut short ends the walk with cut set
// (and cutFirst, its first offset, when the cut left those 8 bytes).
// With checkCRC a batch whose CRC does not match ends the walk with an
// error: the fetcher checks each response once (advance), Read walks it
// again without.
type batchIter struct {
	in       []byte
	checkCRC bool
	b        kmsg.RecordBatch
	err      error

	cut      bool
	cutFirst int64
	hasFirst bool
}

func (it *batchIter) next() bool {
	in := it.in
	if len(in) == 0 || it.err != nil {
		return false
	}
	if len(in) > 16 && in[16] != 2 {
		it.err = errOldFormat
		return false
	}
	if len(in) < batchHeaderLen {
		it.setCut()
		return false
	}
	length := int64(int32(binary.BigEndian.Uint32(in[8:])))
	if length < batchHeaderLen-12 {
		it.err = fmt.Errorf("%w: a record batch at offset %d claims %d bytes", errCorrupt, int64(binary.BigEndian.Uint64(in)), length)
		return false
	}
	if int64(len(in)) < 12+length {
		it.setCut()
		return false
	}
	raw := in[:12+length]
	if err := it.b.UnsafeReadFrom(raw); err != nil {
		it.err = fmt.Errorf("%w: %v", errCorrupt, err)
		return false
	}
	if it.checkCRC && int32(crc32.Checksum(raw[batchCRCFrom:], castagnoli)) != it.b.CRC {
		it.err = fmt.Errorf("%w: the CRC of the record batch at offset %d does not match", errCorrupt, it.b.FirstOffset)
		return false
	}
	it.in = in[12+length:]
	return true
}

func (it *batchIter) setCut() {
	it.cut = true
	if len(it.in) >= 8 {
		it.cutFirst, it.hasFirst = int64(binary.BigEndian.Uint64(it.in)), true
	}
}

// lastOffset is the offset of b's last record, kept or not.
func lastOffset(b *kmsg.RecordBatch) int64 { return b.FirstOffset + int64(b.LastOffsetDelta) }

var errCorrupt = errors.New("corrupt fetch response")

// batchRecords returns b's records, decompressed.
func batchRecords(b *kmsg.RecordBatch) ([]byte, error) {
	codec := kgo.CompressionCodecType(b.Attributes & attrCodec)
	if codec == kgo.CodecNone {
		return b.Records, nil
	}
	out, err := decompressor.Decompress(b.Records, codec)
	if err != nil {
		return nil, fmt.Errorf("decompressing the record batch at offset %d (codec %d): %w", b.FirstOffset, codec, err)
	}
	return out, nil
}

// recordReader reads the records of one batch into the same fields.
type recordReader struct {
	in  []byte
	n   int32 // records left, as the header counts them
	err error

	offsetDelta int64
	tsDelta     int64
	key, value  []byte
}

// next reads one record (v2: length, attributes, timestamp delta, offset
// delta, key, value, headers — the headers are skipped: Record has none).
func (r *recordReader) next() bool {
	if r.n <= 0 || r.err != nil {
		return false
	}
	r.n--
	length, in, ok := varint(r.in)
	if !ok || length < 0 || int64(len(in)) < length {
		r.err = fmt.Errorf("%w: a record runs past its batch", errCorrupt)
		return false
	}
	rec, rest := in[:length], in[length:]
	r.in = rest
	if len(rec) < 1 {
		r.err = fmt.Errorf("%w: an empty record", errCorrupt)
		return false
	}
	rec = rec[1:] // attributes, unused
	if r.tsDelta, rec, ok = varint(rec); !ok {
		r.err = fmt.Errorf("%w: a record's timestamp", errCorrupt)
		return false
	}
	if r.offsetDelta, rec, ok = varint(rec); !ok {
		r.err = fmt.Errorf("%w: a record's offset", errCorrupt)
		return false
	}
	if r.key, rec, ok = varbytes(rec); !ok {
		r.err = fmt.Errorf("%w: a record's key", errCorrupt)
		return false
	}
	if r.value, _, ok = varbytes(rec); !ok {
		r.err = fmt.Errorf("%w: a record's value", errCorrupt)
		return false
	}
	return true
}

// varint reads a zigzag varint.
func varint(b []byte) (int64, []byte, bool) {
	if len(b) > 0 && b[0] < 0x80 { // one byte: most lengths and deltas
		v := int64(b[0])
		return int64(uint64(v)>>1) ^ -(v & 1), b[1:], true
	}
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

// varbytes reads a varint-length byte string; -1 is null.
func varbytes(b []byte) ([]byte, []byte, bool) {
	n, b, ok := varint(b)
	switch {
	case !ok || n < -1 || n > int64(len(b)):
		return nil, nil, false
	case n == -1:
		return nil, b, true
	}
	return b[:n:n], b[n:], true
}
