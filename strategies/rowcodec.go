package strategies

import (
	"encoding/binary"
	"fmt"
)

// writeChunk is how many rows of a chunkedRows part are decoded and
// written at a time: ten of the sink's 1,000-row statements, so that its
// prepared statement is reused, while a batch's rows never all exist as
// [][]any at once (BenchmarkRowJobRSS: a 4M-record backlog at default
// flags peaked at 260-280 MiB with every row of a batch held as []any).
const writeChunk = 10_000

// chunkedRows is a part whose rows can be had a range at a time, decoded
// anew for each call (a retried write decodes them again).
type chunkedRows interface {
	rowCount() int
	chunks(from, to int, fn func([][]any) error) error
}

// partRows are a part's rows, for writing: all of them as [][]any, or
// for a chunkedRows part, decoded a chunk at a time.
type partRows struct {
	all [][]any
	c   chunkedRows
}

// rowsToWrite returns pt's rows for writing.
func rowsToWrite(pt part) (partRows, error) {
	if c, ok := pt.(chunkedRows); ok && c.rowCount() > 0 {
		return partRows{c: c}, nil
	}
	rows, err := pt.rows()
	return partRows{all: rows}, err
}

func (r partRows) len() int {
	if r.c != nil {
		return r.c.rowCount()
	}
	return len(r.all)
}

// write passes rows [from, to) to fn: all of them in one call, or a
// chunked part's writeChunk at a time.
func (r partRows) write(from, to int, fn func([][]any) error) error {
	if r.c != nil {
		return r.c.chunks(from, to, fn)
	}
	return fn(r.all[from:to])
}

// rowCodec keeps rows of values encoded one after another: per value a
// tag byte, then a string's length and bytes or an integer's varint; a
// value of any other type is kept in other and encoded as its index.
type rowCodec struct {
	buf   []byte
	n     int // rows
	width int
	ends  []int // ends[i] is the end of row i in buf
	other []any
}

const (
	tagNil byte = iota
	tagString
	tagInt
	tagOther
)

func (c *rowCodec) put(row []any) {
	if c.n == 0 {
		c.width = len(row)
	} else if len(row) != c.width {
		panic(fmt.Sprintf("rowCodec: a row of %d values among rows of %d", len(row), c.width))
	}
	for _, v := range row {
		switch x := v.(type) {
		case nil:
			c.buf = append(c.buf, tagNil)
		case string:
			c.buf = append(c.buf, tagString)
			c.buf = binary.AppendUvarint(c.buf, uint64(len(x)))
			c.buf = append(c.buf, x...)
		case int64:
			c.buf = append(c.buf, tagInt)
			c.buf = binary.AppendVarint(c.buf, x)
		default:
			c.buf = append(c.buf, tagOther)
			c.buf = binary.AppendUvarint(c.buf, uint64(len(c.other)))
			c.other = append(c.other, v)
		}
	}
	c.ends = append(c.ends, len(c.buf))
	c.n++
}

// rows decodes rows [from, to), each its own []any of fresh values (nil
// when there are none). Their strings share one copy of the rows' bytes
// (one allocation, not one per value).
func (c *rowCodec) rows(from, to int) [][]any {
	if from >= to {
		return nil
	}
	out := make([][]any, to-from)
	vals := make([]any, (to-from)*c.width)
	pos := 0
	if from > 0 {
		pos = c.ends[from-1]
	}
	base := pos
	text := string(c.buf[base:c.ends[to-1]]) // text[i-base] is c.buf[i]
	for i := range out {
		row := vals[i*c.width : (i+1)*c.width : (i+1)*c.width]
		for j := range row {
			tag := c.buf[pos]
			pos++
			switch tag {
			case tagString:
				l, n := binary.Uvarint(c.buf[pos:])
				pos += n
				row[j] = text[pos-base : pos-base+int(l)]
				pos += int(l)
			case tagInt:
				x, n := binary.Varint(c.buf[pos:])
				pos += n
				row[j] = x
			case tagOther:
				k, n := binary.Uvarint(c.buf[pos:])
				pos += n
				row[j] = c.other[k]
			}
		}
		out[i] = row
	}
	return out
}

// appendAll adds o's rows after c's, without decoding them unless o
// holds values of other types (whose indices change).
func (c *rowCodec) appendAll(o *rowCodec) {
	switch {
	case o.n == 0:
		return
	case len(o.other) > 0 || c.n > 0 && c.width != o.width:
		for _, row := range o.rows(0, o.n) {
			c.put(row)
		}
		return
	}
	base := len(c.buf)
	c.buf = append(c.buf, o.buf...)
	for _, e := range o.ends {
		c.ends = append(c.ends, base+e)
	}
	c.width = o.width
	c.n += o.n
}

func (c *rowCodec) reset() {
	c.buf, c.ends = c.buf[:0], c.ends[:0]
	clear(c.other)
	c.other = c.other[:0]
	c.n = 0
}
