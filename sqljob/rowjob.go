package sqljob

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/microbatch/microbatch/writers"
)

// A row job is a query without aggregates and without GROUP BY: each
// record the WHERE accepts is one row. INSERT INTO appends it (two equal
// records are two rows); REPLACE INTO t (PRIMARY KEY (c, …)) keeps one
// row per key, the latest record's (see docs/sql-jobs.md, "Row jobs").

// RowBatch is the most rows the sinks put in one INSERT statement of a
// row job (a multi-row INSERT … VALUES (…), (…), …), as Plan says:
// writers.RowsPerStatement.
const RowBatch = writers.RowsPerStatement

// Meta is a record's own fields, which a query reads as _key,
// _partition, _offset and _timestamp.
type Meta struct {
	Key       []byte // nil: the record has no key (_key is NULL)
	Partition int32
	Offset    int64
	Timestamp time.Time // the zero time or before 1970: _timestamp is NULL
}

// Row is one record of a row job as a row of Query.Upsert(): Values in
// Upsert's column order (its Keys, then its Values). Values holds Go
// strings (text, decimals as exact text, DATETIME as
// "YYYY-MM-DD HH:MM:SS[.fff]"), int64s, and nil for NULL. A Row whose
// Values is nil is a record the WHERE filtered out: nothing to write.
//
// Delete: a Kafka tombstone (a null value) of an upsert whose key is the
// record's key: the row with Values' key is deleted; the values after the
// key are nil.
type Row struct {
	Values []any
	Delete bool
}

// rowJob is a row job's part of a Query.
type rowJob struct {
	upsert bool
	// order is the columns (indices of Query.cols) in Upsert's order: the
	// keys, then the others in SELECT order.
	order []int
	// tombstone: an upsert whose every key column is _key; a null value
	// deletes its key.
	tombstone bool
	// conv holds the converters bound to an existing table's column types
	// (CheckTable), by index of Query.cols; nil before: the types of the
	// table Query.DDL creates.
	conv atomic.Pointer[[]conv]
	pool sync.Pool // *env
}

// conv converts a value to what a column holds exactly, or says why it
// can't (the record's dead-letter reason, without the column's name).
type conv func(v *val) (any, error)

// colItem is a SELECT item with its column name.
type colItem struct {
	name string
	x    node
}

// RowJob reports whether q is a row job (no aggregate, no GROUP BY).
func (q *Query) RowJob() bool { return q.row != nil }

// Tombstones reports whether a tombstone (a null value) deletes its key:
// an upsert whose key columns are all _key.
func (q *Query) Tombstones() bool { return q.row != nil && q.row.tombstone }

// Upserting reports whether q is a row job that keeps one row per key
// (REPLACE INTO t (PRIMARY KEY (…)) SELECT …).
func (q *Query) Upserting() bool { return q.row != nil && q.row.upsert }

// KeyColumns are the names of the table's key columns: an upsert's
// PRIMARY KEY, an aggregate's GROUP BY columns; none for an append.
func (q *Query) KeyColumns() []string {
	var keys []string
	for _, i := range q.keys {
		keys = append(keys, q.cols[i].Name)
	}
	return keys
}

// verb checks INSERT and REPLACE against the key clause.
func (c *compiler) verb(st *statement) error {
	switch {
	case st.verb == "insert" && st.keyCols != nil:
		return c.errAt(st.keyPos, "INSERT INTO … (PRIMARY KEY …)", "INSERT INTO appends every record; for one row per key, the latest record's, write REPLACE INTO %s (PRIMARY KEY (%s)) SELECT …", st.table, strings.Join(st.keyCols, ", "))
	case st.verb == "replace" && (st.sel.groupPos != 0 || c.anyAggregate(&st.sel)):
		return c.errAt(st.verbPos, "REPLACE INTO", "not with GROUP BY or aggregates: an aggregate job merges its groups into the table already; write INSERT INTO")
	case st.verb == "replace" && st.keyCols == nil:
		return c.errAt(st.verbPos, "REPLACE INTO", "needs the table's key, to keep one row per key: REPLACE INTO %s (PRIMARY KEY (id)) SELECT id, … FROM … (the key's columns are SELECT columns)", st.table)
	}
	return nil
}

// rowColumns compiles the SELECT list of a row job.
func (c *compiler) rowColumns(items []colItem) error {
	q, st := c.q, c.st
	rj := &rowJob{upsert: st.verb == "replace"}
	q.row = rj
	rule := "append"
	if rj.upsert {
		rule = "replace"
	}
	for _, it := range items {
		col := Column{Name: it.name, Expr: exprText(it.x), rule: rule, typ: c.staticType(it.x)}
		e, err := c.expr(it.x)
		if err != nil {
			return err
		}
		col.eval = e
		q.cols = append(q.cols, col)
	}
	keyed := map[int]bool{}
	for _, k := range st.keyCols {
		i := -1
		for j, col := range q.cols {
			if strings.EqualFold(col.Name, k) {
				i = j
			}
		}
		switch {
		case i < 0:
			return c.errAt(st.keyPos, "PRIMARY KEY ("+strings.Join(st.keyCols, ", ")+")", "%s is not a column of the SELECT: a key's columns are SELECT columns (name one with AS)", k)
		case keyed[i]:
			return c.errAt(st.keyPos, "PRIMARY KEY ("+strings.Join(st.keyCols, ", ")+")", "%s is named twice", k)
		}
		keyed[i] = true
		q.cols[i].Key, q.cols[i].rule = true, "key"
		q.keys = append(q.keys, i)
	}
	for i := range q.cols {
		if !keyed[i] {
			q.vals = append(q.vals, i)
		}
	}
	if rj.upsert && len(q.vals) == 0 {
		return c.errAt(st.keyPos, "PRIMARY KEY ("+strings.Join(st.keyCols, ", ")+")", "every column is a key column: select a column besides the key")
	}
	rj.order = append(append([]int(nil), q.keys...), q.vals...)
	rj.tombstone = rj.upsert
	for _, it := range items {
		for _, i := range q.keys {
			if q.cols[i].Name == it.name {
				if n, ok := it.x.(*colRef); !ok || !isMeta(n, "_key") {
					rj.tombstone = false
				}
			}
		}
	}
	text := 0
	for _, i := range q.keys {
		if q.cols[i].typ.text() {
			text++
		}
	}
	q.keyW = 1024
	if text > 0 {
		q.keyW = min(1024, (3072-17*(len(q.keys)-text))/text)
	}
	q.fields = c.paths
	return nil
}

// rowUpsert is Upsert of a row job: an append has no keys and every
// column a value (MergeAppend); an upsert replaces each key's row.
func (q *Query) rowUpsert() writers.Upsert {
	u := writers.Upsert{Table: q.table, Merge: writers.MergeAppend}
	if q.row.upsert {
		u.Merge = writers.MergeReplace
	}
	for _, i := range q.keys {
		u.Keys = append(u.Keys, q.cols[i].Name)
	}
	for _, i := range q.vals {
		u.Values = append(u.Values, q.cols[i].Name)
	}
	return u
}

// Record fields: the record's own, read as columns of these names.
const (
	metaKey       = "_key"
	metaPartition = "_partition"
	metaOffset    = "_offset"
	metaTimestamp = "_timestamp"
)

// metaName reports whether n names one of the record's own fields: an
// unqualified _key, _partition, _offset or _timestamp (a JSON field of
// that name is read with the FROM alias: t._key).
func metaName(n *colRef) (string, bool) {
	if len(n.parts) != 1 {
		return "", false
	}
	switch s := strings.ToLower(n.parts[0]); s {
	case metaKey, metaPartition, metaOffset, metaTimestamp:
		return s, true
	}
	return "", false
}

func isMeta(n *colRef, name string) bool {
	s, ok := metaName(n)
	return ok && s == name
}

// metaExpr reads a record field: _key is its bytes as a string (NULL
// without a key), _partition and _offset integers, _timestamp the UTC
// time as MySQL's DATETIME(3) text (NULL when unknown).
func metaExpr(name string) expr {
	switch name {
	case metaKey:
		return func(e *env) (val, error) {
			if e.meta.Key == nil {
				return val{}, nil
			}
			return strVal(e.meta.Key), nil
		}
	case metaPartition:
		return func(e *env) (val, error) { return intVal(int64(e.meta.Partition)), nil }
	case metaOffset:
		return func(e *env) (val, error) { return intVal(e.meta.Offset), nil }
	}
	return func(e *env) (val, error) {
		t := e.meta.Timestamp
		if t.IsZero() || t.UnixMilli() < 0 {
			return val{}, nil
		}
		return strVal(t.UTC().AppendFormat(nil, WindowLayout)), nil
	}
}

func intVal(n int64) val {
	v := numVal(dec{m: n})
	v.s = strconv.AppendInt(nil, n, 10)
	return v
}

// Row evaluates one record of a row job: its row, a Row without Values
// when the WHERE filters it out, or a *Rejection for bad input (not
// JSON, a value its column can't hold exactly, a null key). Safe for
// concurrent use. A nil value is a tombstone: in an upsert whose key is
// _key it deletes the row of m.Key (the WHERE, which reads the value, is
// not applied); elsewhere it is bad input.
func (q *Query) Row(value []byte, m Meta) (Row, error) {
	rj := q.row
	if rj == nil {
		return Row{}, fmt.Errorf("sql: Row of an aggregate job (use an Aggregate)")
	}
	e, _ := rj.pool.Get().(*env)
	if e == nil {
		e = &env{sc: scanner{f: make([]val, q.nField), seen: make([]bool, q.nNode)}}
	}
	defer rj.pool.Put(e)
	e.meta = m
	defer func() { e.meta = Meta{} }()
	var convs []conv
	if p := rj.conv.Load(); p != nil {
		convs = *p
	}
	if value == nil && rj.tombstone {
		r := Row{Values: make([]any, len(rj.order)), Delete: true}
		for j, i := range q.keys {
			v, err := q.rowValue(e, i, convs)
			if err != nil {
				return Row{}, err
			}
			if v == nil {
				return Row{}, &Rejection{Reason: "a tombstone (null value) without a key: nothing to delete"}
			}
			r.Values[j] = v
		}
		return r, nil
	}
	clear(e.sc.f)
	if err := e.sc.scan(value, q.root); err != nil {
		return Row{}, &Rejection{Reason: err.Error()}
	}
	if q.where != nil {
		w, err := q.where(e)
		if err != nil {
			return Row{}, &Rejection{Reason: "WHERE: " + err.Error()}
		}
		t, null, err := truth(&w, q.whereS)
		if err != nil {
			return Row{}, &Rejection{Reason: "WHERE: " + err.Error()}
		}
		if !t || null {
			return Row{}, nil
		}
	}
	r := Row{Values: make([]any, len(rj.order))}
	for j, i := range rj.order {
		v, err := q.rowValue(e, i, convs)
		if err != nil {
			return Row{}, err
		}
		r.Values[j] = v
	}
	return r, nil
}

// rowValue evaluates column i and converts it to what its column holds.
func (q *Query) rowValue(e *env, i int, convs []conv) (any, error) {
	c := &q.cols[i]
	v, err := c.eval(e)
	if err != nil {
		return nil, &Rejection{Reason: c.Name + " = " + c.Expr + ": " + err.Error()}
	}
	if v.k == kNull && c.Key {
		return nil, &Rejection{Reason: fmt.Sprintf("key column %s (%s) is missing or null", c.Name, c.Expr)}
	}
	var out any
	if convs != nil {
		out, err = convs[i](&v)
	} else {
		out, err = q.createdConv(c, &v)
	}
	if err != nil {
		return nil, &Rejection{Reason: fmt.Sprintf("column %s = %s: %v", c.Name, c.Expr, err)}
	}
	return out, nil
}

// AddRecord is Add with the record's own fields, for a query that reads
// _key, _partition, _offset or _timestamp (Add reads them as NULL, 0, 0,
// NULL).
func (a *Aggregate) AddRecord(value []byte, m Meta) error {
	a.e.meta = m
	defer func() { a.e.meta = Meta{} }()
	return a.Add(value)
}

// EvaluateRecord is Evaluate with the record's own fields (see AddRecord).
func (q *Query) EvaluateRecord(value []byte, m Meta) (*Evaluated, error) {
	return q.evaluate(value, m)
}
