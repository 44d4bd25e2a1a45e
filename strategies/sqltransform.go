package strategies

import (
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
// On a MySQL/MariaDB sink create or check the table with q.EnsureTable
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
func (w *queryWork) newPart(string) part    { return &queryPart{a: w.q.NewAggregate()} }

type queryPart struct{ a *sqljob.Aggregate }

func (p *queryPart) add(rec *batch.Record) error { return p.a.Add(rec.Value) }
func (p *queryPart) rows() ([][]any, error)      { return p.a.Rows(), nil }
func (p *queryPart) merge(o part)                { p.a.Merge(o.(*queryPart).a) }
func (p *queryPart) reset()                      { p.a.Reset() }

// Checkpoint mode: the sources evaluate each record (so that bad input is
// dead-lettered where it is read) and pass on its group and arguments; the
// sink's subtask adds an interval's at the barrier. A record is scanned
// once, and only what the query needs of it is held until the barrier.

func (w *queryWork) decodeAny(rec *batch.Record) (any, error) {
	ev, err := w.q.Evaluate(rec.Value)
	if err != nil || ev == nil {
		return nil, err
	}
	return ev, nil
}

func (w *queryWork) rowsOf(items []any) ([][]any, error) {
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
