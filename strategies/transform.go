package strategies

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/values"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
)

// Transform is a user-defined job: what a strategy computes from a
// partition's records instead of the built-in per-key totals. Make one with
// NewTransform and set it as Config.Transform.
//
// A transform runs with the strategies that write to a SQL sink: txn (each
// partition's rows commit with its offset), single (all partitions' rows in
// one transaction), the controls at-least-once and at-most-once, and with
// idempotent, which writes to Redis (see NewTransform), and with checkpoint
// mode into an SQL sink (XA on MySQL/MariaDB, prepared transactions on
// PostgreSQL, or write-ahead with --sink-mode wal): there a
// checkpoint interval is the batch. The sources decode each record as it
// is read; every decoded value goes to sink subtask 0, which at the
// interval's barrier calls rows once on the interval's values (in read
// order within a partition) and writes the rows into the checkpoint's
// transaction, which commits when the checkpoint completes; the dead
// letters go into the same transactions. Values are held in memory until
// the barrier: memory grows with interval × rate. A Transform keeps no
// state across checkpoints, so recovery is the built-in job's: back to
// the latest checkpoint's offsets, its transactions committed, everything
// after it aborted and read again. With the write-ahead sink the rows are
// kept as JSON in the checkpoint until applied, byte for byte (a string
// that is not valid UTF-8 and a []byte are kept as their bytes), so their
// values must be strings, []byte, integers, finite floats, booleans or
// nil (anything else stops the job with ErrConfig at the barrier). A kafka:// or file:// sink takes
// the built-in job only.
type Transform struct {
	work workload
}

// NewTransform makes a Transform from two functions:
//
//   - decode turns one record into a T. An error dead-letters the record
//     with the error's text as the reason (mb_dead_letters, or in Redis
//     mb:{job}:dead:…; bytes that are not UTF-8 escaped as \xff, cut to
//     writers.MaxReasonBytes) and the job goes on; so does a panic in
//     decode.
//     rec.Key and rec.Value are only valid during the call: copy what T
//     keeps.
//   - rows turns the decoded records of a batch into rows of u, each row
//     the key columns' values then the value columns', in u's order. It is
//     called once per partition range (txn, idempotent, controls), once
//     per batch with every partition's records (single) or once per
//     checkpoint interval with every partition's records (checkpoint), so for
//     u.Merge == MergeAdd it may aggregate (sum per key) or not; the
//     upsert adds rows with the same key together either way (and keeps
//     the least or greatest of them for MergeMin and MergeMax). It must be
//     deterministic: a retried batch calls it again on the same records.
//
// u may give each value column its own rule (u.Merges, a "per-column
// upsert", as a SQL job's COUNT/SUM add, MIN keeps the least, MAX the
// greatest): then a nil value is SQL NULL, "no value" (adding or comparing
// it keeps what is stored; replacing with it stores NULL, in Redis removes
// the field), and an added, least or greatest column's values must be Go
// integers, decimal strings ("-12.50") or nil, merged exactly; anything
// else fails the batch with ErrConfig naming the column. MergeMin and
// MergeMax need MySQL/MariaDB (in DECIMAL or integer columns) or Redis:
// SQLite refuses them at start. MergeMinBytes and MergeMaxBytes keep the
// least and greatest string in byte order (values: Go strings or nil), on
// every sink (MySQL VARBINARY, SQLite TEXT without a collation, Redis).
//
// Both functions run in several partition tasks at once: they must be
// safe for concurrent use (pure functions of their input are).
//
// On a SQL sink, the table of u is the user's to create before the job
// runs, with a primary key (or unique key) on exactly u.Keys; Run checks
// it (sqlsink.Writer.CheckUpsert) and refuses to start without it. A row the
// database rejects (a value too long, a NULL in a NOT NULL column) fails
// the batch on every retry and stops the job: make rows valid for the
// table, and reject what can't be in decode, where it is dead-lettered.
//
// With u.Merge == MergeReplace, a key written by several partitions ends
// with whichever write committed last (with txn, the partitions commit in
// no set order), not the latest event: use MergeReplace for keys that
// live in one partition (the record key's partition), or MergeAdd.
//
// With the idempotent strategy the sink is Redis and there is no table:
// each value column v of u is a hash mb:{job}:rows:<u.Table>:<v>
// (redissink.RowsKey) whose field is the row's key — the key value's
// text with one key column, the texts length-prefixed and concatenated
// with several, "2:eu10:2026-11-30" (redissink.RowField) — and whose
// value is the column's. MergeAdd adds the rows' values (HINCRBY), which
// must then be integers (Go integers or decimal strings without a
// fraction); MergeReplace sets the value's text (HSET); MergeMin and
// MergeMax keep the least and the greatest, compared exactly as decimals
// and stored as the decimal text given; MergeMinBytes and MergeMaxBytes
// the least and greatest string, compared byte by byte.
// Read them with redissink.Job.Rows. The rows of a range are folded into
// the hashes together with its offsets and dead letters
// (mb:{job}:dead:<topic>:<partition>), exactly once, as the built-in
// totals are. A row Redis can't hold (a non-integer for MergeAdd, a nil
// outside a per-column upsert's values, a type without a text form) fails
// the batch with ErrConfig, naming the column, and stops the job before
// anything of the batch is visible.
func NewTransform[T any](u writers.Upsert, decode func(rec *batch.Record) (T, error), rows func(items []T) [][]any) *Transform {
	return &Transform{work: &userWork[T]{u: u, decode: decode, rows: rows}}
}

// Upsert is the transform's target.
func (t *Transform) Upsert() writers.Upsert { return t.work.upsert() }

// validate says what is missing from a Transform not made by NewTransform
// or made with nil functions.
func (t *Transform) validate() error {
	if t.work == nil {
		return errors.New("make it with strategies.NewTransform")
	}
	if err := t.work.check(); err != nil {
		return err
	}
	return t.work.upsert().Validate()
}

// workload is what a strategy computes per range: the built-in totals or a
// user's Transform.
type workload interface {
	upsert() writers.Upsert
	newPart(job string) part
	check() error
}

// part is one range's (or, merged, one batch's) computed results.
type part interface {
	// add takes one record; an error means it is bad input, to be
	// dead-lettered with the error as the reason.
	add(rec *batch.Record) error
	// rows are the part's results as rows of upsert(), sorted by key so
	// that concurrent transactions lock rows in the same order.
	rows() ([][]any, error)
	// merge adds another part of the same workload (single strategy).
	merge(other part)
	reset()
}

func workloadOf(cfg Config) workload {
	if cfg.Transform != nil {
		return cfg.Transform.work
	}
	return totalsWork{}
}

// The built-in job: per-key event counts and amount sums into mb_totals.

type totalsWork struct{}

func (totalsWork) upsert() writers.Upsert { return writers.Totals }
func (totalsWork) check() error           { return nil }
func (totalsWork) newPart(job string) part {
	return &totalsPart{job: job, agg: event.NewAggregator()}
}

type totalsPart struct {
	job string
	agg *event.Aggregator
	ev  event.Event
}

func (p *totalsPart) add(rec *batch.Record) error {
	if err := event.Decode(rec.Value, &p.ev); err != nil {
		return err
	}
	p.agg.Add(&p.ev)
	return nil
}

func (p *totalsPart) rows() ([][]any, error) { return shared.TotalsRows(p.job, p.agg.Totals()), nil }

func (p *totalsPart) merge(o part) {
	for _, t := range o.(*totalsPart).agg.Totals() {
		p.agg.AddTotal(t)
	}
}

func (p *totalsPart) reset() { p.agg.Reset() }

// A user's Transform.

type userWork[T any] struct {
	u      writers.Upsert
	decode func(rec *batch.Record) (T, error)
	rows   func(items []T) [][]any
}

func (w *userWork[T]) upsert() writers.Upsert { return w.u }
func (w *userWork[T]) newPart(string) part    { return &userPart[T]{w: w} }
func (w *userWork[T]) check() error {
	if w.decode == nil || w.rows == nil {
		return errors.New("decode and rows functions must not be nil")
	}
	return nil
}

type userPart[T any] struct {
	w     *userWork[T]
	items []T
}

func (p *userPart[T]) add(rec *batch.Record) error {
	v, err := p.w.safeDecode(rec)
	if err != nil {
		return err
	}
	p.items = append(p.items, v)
	return nil
}

// safeDecode is the user's decode with a panic turned into an error (and
// so into a dead letter, like a decode error).
func (w *userWork[T]) safeDecode(rec *batch.Record) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("decode panicked: %v", r)
		}
	}()
	return w.decode(rec)
}

func (p *userPart[T]) rows() (rows [][]any, err error) {
	if len(p.items) == 0 {
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the transform's rows function panicked: %v", ErrConfig, r)
		}
	}()
	rows = p.w.rows(p.items)
	width := len(p.w.u.Keys) + len(p.w.u.Values)
	for _, r := range rows {
		if len(r) != width {
			return nil, fmt.Errorf("%w: the transform made a row of %d values for %s, want %d (keys %v then values %v)",
				ErrConfig, len(r), p.w.u.Table, width, p.w.u.Keys, p.w.u.Values)
		}
		if err := checkPerColumn(p.w.u, r); err != nil {
			return nil, err
		}
	}
	sortRows(rows, len(p.w.u.Keys))
	return rows, nil
}

// checkPerColumn checks a row of a per-column upsert (u.Merges set): a
// column that is added or kept as least or greatest takes Go integers,
// decimal strings or nil, which every sink merges exactly; anything else
// (a float) is the transform's error, refused before any sink sees it.
func checkPerColumn(u writers.Upsert, row []any) error {
	nk := len(u.Keys)
	for i, m := range u.Merges {
		if v := row[nk+i]; !m.Takes(v) {
			if m.Bytes() {
				return fmt.Errorf("%w: the transform made %s.%s (%s) = %v (%T); want a string or nil",
					ErrConfig, u.Table, u.Values[i], m, v, v)
			}
			return fmt.Errorf("%w: the transform made %s.%s (%s) = %v (%T); want a Go integer, a decimal string or nil",
				ErrConfig, u.Table, u.Values[i], m, v, v)
		}
	}
	return nil
}

func (p *userPart[T]) merge(o part) { p.items = append(p.items, o.(*userPart[T]).items...) }
func (p *userPart[T]) reset()       { clear(p.items); p.items = p.items[:0] }

// streamWork is a Transform as checkpoint mode runs it: the sources decode
// (the values travel through the pipeline boxed) and a sink subtask turns
// a checkpoint interval's values into rows at the barrier.
type streamWork interface {
	upsert() writers.Upsert
	// decodeAny decodes one record; an error (or a panic in decode) means
	// a dead letter with the error as the reason.
	decodeAny(rec *batch.Record) (any, error)
	// rowsOf turns values decodeAny returned into checked rows sorted by
	// key; nil for none.
	rowsOf(items []any) ([][]any, error)
}

func streamWorkOf(cfg Config) streamWork {
	if cfg.Transform == nil {
		return nil
	}
	return cfg.Transform.work.(streamWork)
}

func (w *userWork[T]) decodeAny(rec *batch.Record) (any, error) {
	t, err := w.safeDecode(rec)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (w *userWork[T]) rowsOf(items []any) ([][]any, error) {
	if len(items) == 0 {
		return nil, nil
	}
	p := &userPart[T]{w: w, items: make([]T, len(items))}
	for i, v := range items {
		if v != nil { // nil: a nil interface or pointer T, left zero
			p.items[i] = v.(T)
		}
	}
	return p.rows()
}

// sortRows orders rows by their first nkeys values.
func sortRows(rows [][]any, nkeys int) {
	slices.SortStableFunc(rows, func(a, b []any) int {
		for i := range nkeys {
			if c := compareValues(a[i], b[i]); c != 0 {
				return c
			}
		}
		return 0
	})
}

func compareValues(a, b any) int {
	if x, ok := values.Int64(a); ok {
		if y, ok := values.Int64(b); ok {
			return cmp.Compare(x, y)
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return cmp.Compare(x, y)
		}
	case []byte:
		if y, ok := b.([]byte); ok {
			return bytes.Compare(x, y)
		}
	case float64:
		if y, ok := b.(float64); ok {
			return cmp.Compare(x, y)
		}
	case time.Time:
		if y, ok := b.(time.Time); ok {
			return x.Compare(y)
		}
	}
	// Mixed or other types: by type name, then text; a consistent order
	// is all the lock ordering needs.
	if c := cmp.Compare(fmt.Sprintf("%T", a), fmt.Sprintf("%T", b)); c != 0 {
		return c
	}
	return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b))
}
