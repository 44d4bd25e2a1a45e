package sqljob

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/values"
)

// Aggregate holds a query's groups for one batch (or one partition's
// range). Not safe for concurrent use: each task has its own.
type Aggregate struct {
	q      *Query
	e      env
	index  map[string]int32
	groups []group
	keyBuf []byte
	vals   []val // one record's key then argument values
}

// group is one row of the result: its key values and accumulators.
type group struct {
	id   string // the group's identity (see eval's keyBuf)
	keys []any  // each key's text; a window's start as WindowLayout text
	accs []acc
}

// WindowLayout is the text of a window's start in a row: UTC, as MySQL
// writes a DATETIME(3), which takes it as it is.
const WindowLayout = "2006-01-02 15:04:05.000"

// acc accumulates one aggregate column of one group.
type acc struct {
	n    int64     // COUNT
	sum  exact.Int // SUM, in units of 10^-maxScale (integers: units of 1 when IntegerSums)
	best dec       // MIN/MAX
	str  []byte    // MIN/MAX of strings (Column.Text): the text kept, not nil once seen
	seen bool      // SUM/MIN/MAX saw a non-null value
}

// NewAggregate returns an empty Aggregate of q.
func (q *Query) NewAggregate() *Aggregate {
	return &Aggregate{q: q, index: map[string]int32{}, e: env{sc: scanner{f: make([]val, q.nField), seen: make([]bool, q.nNode)}}}
}

// Rejection is why a record is not part of the result: its text is the
// dead letter's reason.
type Rejection struct{ Reason string }

func (r *Rejection) Error() string { return r.Reason }

// IsRejection reports whether err means bad input (dead-letter the record)
// rather than a failure.
func IsRejection(err error) bool {
	var r *Rejection
	return errors.As(err, &r)
}

// Add evaluates one record and adds it to its group. A record the WHERE
// filters out adds nothing and is no error. A *Rejection error means the
// record is bad input (not JSON, a field of a type the query can't use, a
// missing group key): nothing of it was added; dead-letter it.
func (a *Aggregate) Add(record []byte) error {
	ok, err := a.eval(record)
	if err != nil || !ok {
		return err
	}
	return a.apply()
}

// eval evaluates record into a.keyBuf (the group's identity) and a.vals
// (keys, then each aggregate's argument). false: filtered out.
func (a *Aggregate) eval(record []byte) (bool, error) {
	q, e := a.q, &a.e
	clear(e.sc.f)
	if err := e.sc.scan(record, q.root); err != nil {
		return false, &Rejection{Reason: err.Error()}
	}
	if q.where != nil {
		w, err := q.where(e)
		if err != nil {
			return false, &Rejection{Reason: "WHERE: " + err.Error()}
		}
		t, null, err := truth(&w, q.whereS)
		if err != nil {
			return false, &Rejection{Reason: "WHERE: " + err.Error()}
		}
		if !t || null {
			return false, nil
		}
	}
	a.vals = a.vals[:0]
	a.keyBuf = a.keyBuf[:0]
	for _, i := range q.keys {
		c := &q.cols[i]
		v, err := c.eval(e)
		if err != nil {
			return false, &Rejection{Reason: "group key " + c.Name + ": " + err.Error()}
		}
		switch {
		case v.k == kNull:
			return false, &Rejection{Reason: fmt.Sprintf("group key %s (%s) is missing or null", c.Name, c.Expr)}
		case v.k == kTime:
			a.keyBuf = binary.BigEndian.AppendUint64(a.keyBuf, uint64(v.n.m))
		default:
			mark := len(a.keyBuf)
			a.keyBuf = binary.BigEndian.AppendUint32(a.keyBuf, 0)
			a.keyBuf = v.keyText(a.keyBuf)
			n := len(a.keyBuf) - mark - 4
			if n > q.keyW {
				return false, &Rejection{Reason: fmt.Sprintf("group key %s is %d bytes; the column holds %d", c.Name, n, q.keyW)}
			}
			binary.BigEndian.PutUint32(a.keyBuf[mark:], uint32(n))
		}
		a.vals = append(a.vals, v)
	}
	for _, i := range q.vals {
		c := &q.cols[i]
		if c.agg == aggCountStar {
			a.vals = append(a.vals, val{})
			continue
		}
		v, err := c.eval(e)
		if err != nil {
			return false, &Rejection{Reason: c.Name + " = " + c.Expr + ": " + err.Error()}
		}
		if v.k != kNull && c.str {
			if v.k != kStr {
				return false, &Rejection{Reason: fmt.Sprintf("%s = %s: %s of a string takes strings; it is a %s (%s)", c.Name, c.Expr, c.Aggregate(), v.k, v.show())}
			}
			if len(v.s) > textWidth {
				return false, &Rejection{Reason: fmt.Sprintf("%s = %s is %d bytes; the column holds %d", c.Name, c.Expr, len(v.s), textWidth)}
			}
		} else if v.k != kNull && c.agg != aggCount {
			d, err := v.num(c.Expr)
			if err != nil {
				hint := ""
				if v.k == kStr && (c.agg == aggMin || c.agg == aggMax) {
					hint = fmt.Sprintf(" (for the least or greatest string, in byte order, write %s(CAST(%s AS CHAR)))", c.Aggregate(), aggArgText(c.Expr))
				}
				return false, &Rejection{Reason: c.Name + " = " + c.Expr + ": " + c.Aggregate() + " takes numbers; " + err.Error() + hint}
			}
			if c.agg == aggSum && q.opts.IntegerSums && d.sc != 0 {
				return false, &Rejection{Reason: fmt.Sprintf("%s = %s: %s has digits after the point, and this sink sums integers only", c.Name, c.Expr, d)}
			}
			v = numVal(d)
		}
		a.vals = append(a.vals, v)
	}
	return true, nil
}

// apply adds the evaluated record (a.keyBuf, a.vals) to its group.
func (a *Aggregate) apply() error {
	q := a.q
	gi, ok := a.index[string(a.keyBuf)]
	if !ok {
		gi = a.newGroup(string(a.keyBuf), a.keyValues())
	}
	a.addArgs(&a.groups[gi], a.vals[len(q.keys):])
	return nil
}

// keyValues are the evaluated record's key values as a row holds them.
func (a *Aggregate) keyValues() []any {
	keys := make([]any, len(a.q.keys))
	for j := range keys {
		v := &a.vals[j]
		if v.k == kTime {
			keys[j] = time.UnixMilli(v.n.m).UTC().Format(WindowLayout)
		} else {
			keys[j] = string(v.keyText(nil))
		}
	}
	return keys
}

func (a *Aggregate) newGroup(id string, keys []any) int32 {
	gi := int32(len(a.groups))
	a.groups = append(a.groups, group{id: id, keys: keys, accs: make([]acc, len(a.q.vals))})
	a.index[id] = gi
	return gi
}

// addArgs adds one record's aggregate arguments to g.
func (a *Aggregate) addArgs(g *group, args []val) {
	for j, i := range a.q.vals {
		g.accs[j].add(a.q.cols[i].agg, &args[j], a.q.opts.IntegerSums)
	}
}

func (ac *acc) add(k aggKind, v *val, intSums bool) {
	switch k {
	case aggCountStar:
		ac.n++
		return
	case aggCount:
		if v.k != kNull {
			ac.n++
		}
		return
	}
	if v.k == kNull {
		return
	}
	if v.k == kStr {
		ac.addText(k, v.s)
		return
	}
	d := v.n
	switch k {
	case aggSum:
		ac.seen = true
		if intSums {
			ac.sum.Add(d.m)
			return
		}
		if m, ok := d.scaleTo(maxScale); ok {
			ac.sum.Add(m)
			return
		}
		ac.sum.AddInt(exact.FromBig(d.big(maxScale)))
	case aggMin, aggMax:
		if !ac.seen {
			ac.best, ac.seen = d, true
			return
		}
		r := d.cmp(ac.best)
		if (k == aggMin && r < 0) || (k == aggMax && r > 0) {
			ac.best = d
		}
	}
}

func (ac *acc) merge(k aggKind, o *acc) {
	switch k {
	case aggCountStar, aggCount:
		ac.n += o.n
	case aggSum:
		if o.seen {
			ac.seen = true
			ac.sum.AddInt(o.sum)
		}
	case aggMin, aggMax:
		if !o.seen {
			return
		}
		if o.str != nil {
			ac.addText(k, o.str)
			return
		}
		if !ac.seen {
			ac.best, ac.seen = o.best, true
			return
		}
		r := o.best.cmp(ac.best)
		if (k == aggMin && r < 0) || (k == aggMax && r > 0) {
			ac.best = o.best
		}
	}
}

// value is the column's value in a row: an int64 for COUNT, a decimal
// string for SUM/MIN/MAX, nil for SQL NULL (no non-null argument).
func (ac *acc) value(k aggKind, intSums bool) any {
	switch k {
	case aggCountStar, aggCount:
		return ac.n
	case aggSum:
		if !ac.seen {
			return nil
		}
		if intSums {
			return ac.sum.String()
		}
		return scaledText(ac.sum)
	}
	if !ac.seen {
		return nil
	}
	if ac.str != nil {
		return string(ac.str)
	}
	return ac.best.String()
}

// scaledText is s / 10^maxScale as decimal text, trailing zeros trimmed.
func scaledText(s exact.Int) string {
	if m, ok := s.Int64(); ok {
		return dec{m: m, sc: maxScale}.trim().String()
	}
	t := s.String()
	neg := t[0] == '-'
	if neg {
		t = t[1:]
	}
	for len(t) <= maxScale {
		t = "0" + t
	}
	ip, fp := t[:len(t)-maxScale], t[len(t)-maxScale:]
	for len(fp) > 0 && fp[len(fp)-1] == '0' {
		fp = fp[:len(fp)-1]
	}
	out := ip
	if fp != "" {
		out += "." + fp
	}
	if neg {
		out = "-" + out
	}
	return out
}

// Merge adds b's groups into a (b is left as it was). Both must be of
// the same query.
func (a *Aggregate) Merge(b *Aggregate) {
	q := a.q
	for _, g := range b.groups {
		gi, ok := a.index[g.id]
		if !ok {
			gi = int32(len(a.groups))
			a.groups = append(a.groups, group{id: g.id, keys: g.keys, accs: make([]acc, len(g.accs))})
			a.index[g.id] = gi
		}
		dst := &a.groups[gi]
		for j, i := range q.vals {
			dst.accs[j].merge(q.cols[i].agg, &g.accs[j])
		}
	}
}

// Len is the number of groups.
func (a *Aggregate) Len() int { return len(a.groups) }

// Reset empties a, keeping its memory.
func (a *Aggregate) Reset() {
	clear(a.index)
	clear(a.groups)
	a.groups = a.groups[:0]
}

// Rows are the groups as rows of q.Upsert(): key values (text; a
// window's start as WindowLayout text), then each aggregate's value (int64 for COUNT,
// exact decimal text for SUM, MIN, MAX; nil for NULL), sorted by key.
func (a *Aggregate) Rows() [][]any {
	q := a.q
	rows := make([][]any, 0, len(a.groups))
	for i := range a.groups {
		g := &a.groups[i]
		r := make([]any, 0, len(q.keys)+len(q.vals))
		r = append(r, g.keys...)
		for j, ci := range q.vals {
			r = append(r, g.accs[j].value(q.cols[ci].agg, q.opts.IntegerSums))
		}
		rows = append(rows, r)
	}
	nk := len(q.keys)
	slices.SortFunc(rows, func(x, y []any) int {
		for i := range nk {
			if c := compareKey(x[i], y[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	return rows
}

func compareKey(a, b any) int {
	x, y := a.(string), b.(string)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// Canonical text of a stored value, for comparing what a sink holds with a
// recomputation: a decimal without leading or trailing zeros ("12.50" and
// "12.5" are one value), "" for NULL, other text as it is.
func Canonical(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case int64:
		return strconv.FormatInt(x, 10)
	case []byte:
		return Canonical(string(x))
	case string:
		if c, ok := values.CanonicalDecimal(x); ok {
			return c
		}
		return x
	}
	return fmt.Sprint(v)
}

// Evaluated is one record evaluated by a query, ready to be added to an
// Aggregate later: its group and its aggregates' arguments, copied out of
// the record (which need not be kept).
type Evaluated struct {
	id   string
	keys []any
	args []val
}

// Evaluate evaluates one record as Add does, without adding it: nil for
// a record the WHERE filters out, a *Rejection for bad input. Safe for
// concurrent use. Checkpoint mode evaluates where it reads and adds at
// the barrier (AddEvaluated), so each record is scanned once.
func (q *Query) Evaluate(record []byte) (*Evaluated, error) { return q.evaluate(record, Meta{}) }

func (q *Query) evaluate(record []byte, m Meta) (*Evaluated, error) {
	a, _ := q.pool.Get().(*Aggregate)
	if a == nil {
		a = q.NewAggregate()
	}
	defer q.pool.Put(a)
	a.e.meta = m
	defer func() { a.e.meta = Meta{} }()
	ok, err := a.eval(record)
	if err != nil || !ok {
		return nil, err
	}
	ev := &Evaluated{id: string(a.keyBuf), keys: a.keyValues(), args: make([]val, len(q.vals))}
	for j, v := range a.vals[len(q.keys):] {
		ev.args[j] = val{k: v.k, n: v.n, nOK: v.nOK} // acc.add reads no number's text
		if v.k == kStr {
			ev.args[j].s = append([]byte{}, v.s...) // MIN/MAX of strings
		}
	}
	return ev, nil
}

// AddEvaluated adds a record Evaluate returned (by the same query).
func (a *Aggregate) AddEvaluated(ev *Evaluated) {
	gi, ok := a.index[ev.id]
	if !ok {
		gi = a.newGroup(ev.id, ev.keys)
	}
	a.addArgs(&a.groups[gi], ev.args)
}
