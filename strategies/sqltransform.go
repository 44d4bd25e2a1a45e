package strategies

import (
	"slices"
	"strconv"
	"strings"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers"
)

// SQLTransform runs a compiled SQL job (sqljob.Compile) as a Transform:
// with every strategy a Transform runs with, into q.Upsert()'s table. Each
// partition task aggregates its records into groups as it reads them (no
// record is kept), a record the query rejects is dead-lettered with the
// reason, and the groups' rows are merged into the table by each column's
// rule (COUNT and SUM add, MIN and MAX keep the least and the greatest)
// together with the range's offsets.
//
// A row job (q.RowJob()) keeps rows instead of groups: an append every
// accepted record's row in read order (the sink inserts them all), an
// upsert the latest row of each key (a later offset of the partition
// replaces an earlier one; a tombstone's row deletes its key).
//
// On a MySQL/MariaDB, PostgreSQL or SQLite sink (q compiled with
// sqljob.Options{Postgres: true} or {SQLite: true} for the latter two)
// create or check the table with q.EnsureTable
// before Run; Run checks its primary key and, once Kafka answers, claims
// the table for the job (sqljob.Query.Claim; on Redis the job's query,
// redissink.Job.ClaimQuery): a table another job writes, or a changed
// query, stops the run at start with ErrConfig wrapping
// sqljob.ErrTableOwned. With the idempotent strategy (Redis) compile q
// with sqljob.Options{IntegerSums: true}.
func SQLTransform(q *sqljob.Query) *Transform {
	return &Transform{work: &queryWork{q: q}}
}

type queryWork struct{ q *sqljob.Query }

func (w *queryWork) upsert() writers.Upsert { return w.q.Upsert() }
func (w *queryWork) check() error           { return nil }
func (w *queryWork) newPart(string) part {
	if w.q.RowJob() {
		return newRowPart(w.q)
	}
	return &queryPart{a: w.q.NewAggregate()}
}

// recordMeta is a record's own fields, as a query reads them (_key, …).
func recordMeta(rec *batch.Record) sqljob.Meta {
	return sqljob.Meta{Key: rec.Key, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp}
}

type queryPart struct{ a *sqljob.Aggregate }

func (p *queryPart) add(rec *batch.Record) error { return p.a.AddRecord(rec.Value, recordMeta(rec)) }
func (p *queryPart) rows() ([][]any, error)      { return p.a.Rows(), nil }
func (p *queryPart) merge(o part)                { p.a.Merge(o.(*queryPart).a) }
func (p *queryPart) reset()                      { p.a.Reset() }

// rowPart holds a row job's rows: an append's in the order added,
// encoded one after another in enc (rowCodec: ~50 bytes for a row of five
// short values, where a [][]any row takes ~220 bytes in 11 allocations,
// for up to --max-batch-records rows per partition); an upsert's latest
// of each key in list (index: a key's row in list).
type rowPart struct {
	q      *sqljob.Query
	upsert bool
	nk     int
	list   [][]any
	index  map[string]int
	enc    rowCodec
}

func newRowPart(q *sqljob.Query) *rowPart {
	return &rowPart{q: q, upsert: q.Upserting(), nk: len(q.KeyColumns()), index: map[string]int{}}
}

func (p *rowPart) add(rec *batch.Record) error {
	r, err := p.q.Row(rec.Value, recordMeta(rec))
	if err != nil || r.Values == nil { // nil: filtered out by the WHERE
		return err
	}
	p.put(rowOf(r, p.nk))
	return nil
}

// rowOf is r as a row of the query's Upsert: a delete carries
// writers.Delete as its first value.
func rowOf(r sqljob.Row, nk int) []any {
	if r.Delete {
		r.Values[nk] = writers.Delete
	}
	return r.Values
}

func (p *rowPart) put(row []any) {
	if !p.upsert {
		p.enc.put(row)
		return
	}
	id := rowKey(row[:p.nk])
	if i, ok := p.index[id]; ok {
		p.list[i] = row // the later record of the key wins
		return
	}
	p.index[id] = len(p.list)
	p.list = append(p.list, row)
}

// rowKey is a key's identity: each value's type and text, length-prefixed.
func rowKey(keys []any) string {
	var b strings.Builder
	for _, k := range keys {
		switch v := k.(type) {
		case int64:
			b.WriteString("i" + strconv.FormatInt(v, 10) + ";")
		case string:
			b.WriteString("s" + strconv.Itoa(len(v)) + ":" + v)
		}
	}
	return b.String()
}

// rows are an append's rows in read order; an upsert's sorted by key, so
// that concurrent transactions lock rows in the same order.
func (p *rowPart) rows() ([][]any, error) {
	if !p.upsert {
		return p.enc.rows(0, p.enc.n), nil
	}
	if len(p.list) == 0 {
		return nil, nil
	}
	out := slices.Clone(p.list)
	sortRows(out, p.nk)
	return out, nil
}

// rowCount and chunks make an append's rows a chunkedRows: they are
// decoded writeChunk at a time as they are written.
func (p *rowPart) rowCount() int { return p.enc.n }

func (p *rowPart) chunks(from, to int, fn func([][]any) error) error {
	for i := from; i < to; i += writeChunk {
		if err := fn(p.enc.rows(i, min(i+writeChunk, to))); err != nil {
			return err
		}
	}
	return nil
}

// merge adds o's rows after p's: an append's follow, an upsert's replace
// p's of the same key.
func (p *rowPart) merge(o part) {
	op := o.(*rowPart)
	if !p.upsert {
		p.enc.appendAll(&op.enc)
	}
	for _, row := range op.list {
		p.put(row)
	}
}

func (p *rowPart) reset() {
	clear(p.list)
	p.list = p.list[:0]
	clear(p.index)
	p.enc.reset()
}

// Checkpoint mode: the sources evaluate each record (so that bad input is
// dead-lettered where it is read) and pass on its group and arguments; the
// sink's subtask adds an interval's at the barrier. A record is scanned
// once, and only what the query needs of it is held until the barrier. A
// row job passes on the record's row.

func (w *queryWork) decodeAny(rec *batch.Record) (any, error) {
	if w.q.RowJob() {
		r, err := w.q.Row(rec.Value, recordMeta(rec))
		if err != nil || r.Values == nil {
			return nil, err
		}
		return r, nil
	}
	ev, err := w.q.EvaluateRecord(rec.Value, recordMeta(rec))
	if err != nil || ev == nil {
		return nil, err
	}
	return ev, nil
}

func (w *queryWork) rowsOf(items []any) ([][]any, error) {
	if w.q.RowJob() {
		p := newRowPart(w.q)
		for _, it := range items {
			if r, ok := it.(sqljob.Row); ok { // nil: filtered out by the WHERE
				p.put(rowOf(r, p.nk))
			}
		}
		return p.rows()
	}
	a := w.q.NewAggregate()
	for _, it := range items {
		if ev, ok := it.(*sqljob.Evaluated); ok { // nil: filtered out by the WHERE
			a.AddEvaluated(ev)
		}
	}
	if a.Len() == 0 {
		return nil, nil
	}
	return a.Rows(), nil
}
