package sqljob

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// ErrQuery marks a query microbatch can't run: a syntax error, or a
// construct it doesn't support. Its message names the construct and where
// it is (line and column).
var ErrQuery = errors.New("sql")

// Error is a refused query.
type Error struct {
	Line, Col int // 1-based; 0 when the place is not known
	Construct string
	Msg       string
}

func (e *Error) Error() string {
	where := ""
	if e.Line > 0 {
		where = fmt.Sprintf(" at line %d, column %d", e.Line, e.Col)
	}
	if e.Construct == "" {
		return fmt.Sprintf("sql%s: %s", where, e.Msg)
	}
	return fmt.Sprintf("sql: %s%s: %s", e.Construct, where, e.Msg)
}

func (e *Error) Unwrap() error { return ErrQuery }

// Options say what the sink can keep exactly.
type Options struct {
	// IntegerSums: the sink adds integers only (Redis, whose HINCRBY is
	// exact on integers of any size but has no decimal type). A record
	// whose SUM argument has digits after the point is dead-lettered.
	IntegerSums bool
	// SQLite: the sink is SQLite, which has no exact decimal type. Sums are
	// then integers (IntegerSums, exact at any size as the built-in job's
	// totals), MIN and MAX are refused, and the table's DDL is SQLite's.
	SQLite bool
	// Postgres: the sink is PostgreSQL. The table's DDL is PostgreSQL's
	// (NUMERIC, BIGINT, TIMESTAMP(3), BYTEA keys, double-quoted names).
	Postgres bool
}

// aggKind is an output column's aggregate, or a group key.
type aggKind uint8

const (
	aggKey aggKind = iota
	aggCount
	aggCountStar
	aggSum
	aggMin
	aggMax
)

// expr is one compiled expression.
type expr func(e *env) (val, error)

// env is one record's evaluation state.
type env struct {
	sc   scanner
	meta Meta // the record's own fields (_key, _partition, …)
}

// Column is one column of the query's table.
type Column struct {
	Name   string
	Expr   string // the expression, as the parser prints it
	Key    bool   // part of the GROUP BY (the table's primary key)
	Window time.Duration
	agg    aggKind
	eval   expr
	str    bool    // MIN/MAX of a string (its argument is statically one): compared as bytes
	typ    colType // a row job's column: the type its table gets
	rule   string  // a row job's column: its Rule
}

// Rule is how the sink merges a new value into the stored one.
func (c Column) Rule() string {
	if c.rule != "" {
		return c.rule
	}
	switch c.agg {
	case aggKey:
		return "key"
	case aggCount, aggCountStar, aggSum:
		return "add"
	case aggMin:
		return "least"
	}
	return "greatest"
}

// Aggregate is the column's function: "", COUNT, SUM, MIN or MAX.
func (c Column) Aggregate() string {
	return [...]string{"", "COUNT", "COUNT", "SUM", "MIN", "MAX"}[c.agg]
}

// Query is a compiled SQL job: safe for concurrent use; each goroutine
// aggregates into an Aggregate of its own.
type Query struct {
	sql    string
	table  string
	topic  string
	opts   Options
	root   *pathNode
	nField int
	nNode  int      // nodes of root's tree, below it
	fields []string // the paths read, for the plan
	where  expr
	whereS string
	cols   []Column
	keys   []int // indices of key columns in cols
	vals   []int // indices of aggregate columns in cols
	keyW   int   // bytes of a text key column
	pool   sync.Pool
	row    *rowJob // a row job's state; nil for an aggregate job
}

// Table is the table the query writes.
func (q *Query) Table() string { return q.table }

// Topic is the topic named in FROM.
func (q *Query) Topic() string { return q.topic }

// SQL is the query's text.
func (q *Query) SQL() string { return q.sql }

// Columns are the table's columns in SELECT order.
func (q *Query) Columns() []Column { return append([]Column(nil), q.cols...) }

// Upsert is the query's table as the sinks write it: the GROUP BY columns
// as keys, the aggregates as values with their merge rules.
func (q *Query) Upsert() writers.Upsert {
	if q.row != nil {
		return q.rowUpsert()
	}
	u := writers.Upsert{Table: q.table, Merge: writers.MergeAdd}
	for _, i := range q.keys {
		u.Keys = append(u.Keys, q.cols[i].Name)
	}
	for _, i := range q.vals {
		c := q.cols[i]
		u.Values = append(u.Values, c.Name)
		m := writers.MergeAdd
		switch c.agg {
		case aggMin:
			m = writers.MergeMin
		case aggMax:
			m = writers.MergeMax
		}
		if c.str {
			m = textMerge(c.agg)
		}
		u.Merges = append(u.Merges, m)
	}
	return u
}

// compiler holds what compiling one query learns.
type compiler struct {
	q     *Query
	sql   string
	alias string   // FROM's alias, a qualifier that names the record
	paths []string // the fields read, in first-use order
	st    *statement
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Compile parses and compiles one statement
// INSERT INTO <table> SELECT … FROM <topic> [WHERE …] [GROUP BY …].
func Compile(sql string, opts Options) (*Query, error) {
	if opts.SQLite && opts.Postgres {
		return nil, &Error{Msg: "Options.SQLite and Options.Postgres name two databases: set the one of the sink"}
	}
	if opts.SQLite {
		opts.IntegerSums = true
	}
	st, err := parse(sql)
	if err != nil {
		return nil, err
	}
	c := &compiler{q: &Query{sql: sql, opts: opts, root: &pathNode{field: -1}}, sql: sql, st: st}
	if err := c.statement(st); err != nil {
		return nil, err
	}
	return c.q, nil
}

// errAt makes an Error placed at byte offset pos of the query.
func (c *compiler) errAt(pos int, construct, format string, args ...any) error {
	return errAtPos(c.sql, pos, construct, format, args...)
}

func (c *compiler) statement(st *statement) error {
	q := c.q
	if err := c.verb(st); err != nil {
		return err
	}
	q.table = st.table
	if !identRE.MatchString(q.table) {
		return c.errAt(st.tablePos, "table name", "%q: want letters, digits and _ (up to 64, not starting with a digit)", q.table)
	}
	if strings.HasPrefix(strings.ToLower(q.table), "mb_") {
		return c.errAt(st.tablePos, "table name", "%q: mb_ tables are microbatch's own", q.table)
	}
	sel := &st.sel
	q.topic = sel.topic
	if !record.ValidTopic(q.topic) {
		return c.errAt(sel.topicPos, "FROM", "%q is not a valid topic name", q.topic)
	}
	c.alias = sel.alias
	if sel.where != nil {
		if a := findAggregate(sel.where); a != nil {
			return c.errAt(a.at(), strings.ToUpper(a.name), "an aggregate can't be in WHERE (HAVING is not supported either: the table keeps every group; filter when you read it)")
		}
		w, err := c.expr(sel.where)
		if err != nil {
			return err
		}
		q.where = w
		q.whereS = exprText(sel.where)
	}
	return c.columns(sel)
}

// columns compiles the SELECT list against the GROUP BY.
func (c *compiler) columns(sel *selectStmt) error {
	q := c.q
	var items []colItem
	aliases := map[string]node{}
	for _, it := range sel.items {
		name := it.alias
		if name == "" {
			// A field is named by its last part, as MySQL names it:
			// customer.id -> id, `audit-clicks`.kind -> kind.
			col, ok := it.x.(*colRef)
			if !ok {
				return c.errAt(it.x.at(), exprName(it.x), "give it a column name with AS")
			}
			name = col.parts[len(col.parts)-1]
		}
		if !identRE.MatchString(name) {
			return c.errAt(it.x.at(), "column "+name, "want letters, digits and _ (up to 64, not starting with a digit): name it with AS")
		}
		for _, prev := range items {
			if strings.EqualFold(prev.name, name) {
				return c.errAt(it.x.at(), "column "+name, "named twice: give one a column name of its own with AS")
			}
		}
		items = append(items, colItem{name, it.x})
		aliases[strings.ToLower(name)] = it.x
	}
	// A GROUP BY expression is matched with a SELECT expression by its
	// canonical form, in which a field is its path: c.kind, kind and
	// `clicks`.kind are one key; a bare name that is a column's name (AS)
	// is that column.
	resolve := func(g node) node {
		if col, ok := g.(*colRef); ok && len(col.parts) == 1 {
			if a, ok := aliases[strings.ToLower(col.parts[0])]; ok {
				return a
			}
		}
		return g
	}
	grouped := map[string]bool{}
	for _, g := range sel.groupBy {
		x := resolve(g)
		if a := findAggregate(x); a != nil {
			return c.errAt(g.at(), "GROUP BY "+exprText(g), "an aggregate can't be a group key")
		}
		if lit, ok := x.(*litNode); ok && lit.k == litNum {
			return c.errAt(g.at(), "GROUP BY "+lit.s, "positions are not supported: name the column")
		}
		grouped[c.canonical(x)] = true
	}
	used := map[string]bool{}
	global := sel.groupPos == 0
	if global && !c.anyAggregate(sel) {
		return c.rowColumns(items)
	}
	for _, it := range items {
		col := Column{Name: it.name, Expr: exprText(it.x)}
		if call, ok := it.x.(*callNode); ok && isAggregateName(call.name) {
			if err := c.aggregate(&col, call); err != nil {
				return err
			}
			q.vals = append(q.vals, len(q.cols))
			q.cols = append(q.cols, col)
			continue
		}
		if a := findAggregate(it.x); a != nil {
			return c.errAt(a.at(), exprText(it.x), "an aggregate inside an expression is not supported: select the aggregate as a column of its own")
		}
		canon := c.canonical(it.x)
		if !grouped[canon] {
			if global {
				return c.errAt(it.x.at(), col.Expr, "is not an aggregate: without GROUP BY every column is one (the table is one row); add GROUP BY %s", col.Expr)
			}
			return c.errAt(it.x.at(), col.Expr, "is neither aggregated nor in GROUP BY")
		}
		used[canon] = true
		col.Key = true
		if err := c.key(&col, it.x); err != nil {
			return err
		}
		q.keys = append(q.keys, len(q.cols))
		q.cols = append(q.cols, col)
	}
	for _, g := range sel.groupBy {
		if !used[c.canonical(resolve(g))] {
			return c.errAt(g.at(), "GROUP BY "+exprText(g), "is not selected: every group key must be a column of the table")
		}
	}
	if len(q.vals) == 0 {
		return c.errAt(sel.p, "SELECT", "no aggregate: select COUNT(*), SUM, MIN or MAX of something")
	}
	if global {
		return c.addGlobalKey(sel.p)
	}
	text := 0
	for _, i := range q.keys {
		if q.cols[i].Window == 0 {
			text++
		}
	}
	q.keyW = 1024
	if text > 0 {
		q.keyW = min(1024, (3072-8*(len(q.keys)-text))/text)
	}
	q.fields = c.paths
	return nil
}

// canonical prints x with each field as its path, so that two spellings
// of one expression compare equal.
func (c *compiler) canonical(x node) string {
	var b strings.Builder
	printNode(&b, x, func(n *colRef) string {
		if name, ok := metaName(n); ok {
			return "\x01" + name // the record's own field, not a JSON field of that name
		}
		return "\x00" + strings.Join(c.colPath(n), "\x00")
	})
	return b.String()
}

// aggregates are MySQL's aggregate functions: the supported ones and
// those refused by name.
var aggregates = map[string]bool{"count": true, "sum": true, "min": true, "max": true, "avg": true,
	"group_concat": true, "std": true, "stddev": true, "stddev_pop": true, "stddev_samp": true, "variance": true,
	"var_pop": true, "var_samp": true, "bit_and": true, "bit_or": true, "bit_xor": true, "json_arrayagg": true,
	"json_objectagg": true, "any_value": true}

func isAggregateName(name string) bool { return aggregates[name] }

// findAggregate returns the first aggregate call in x, or nil.
func findAggregate(x node) *callNode {
	var found *callNode
	walk(x, func(n node) bool {
		if call, ok := n.(*callNode); ok && isAggregateName(call.name) {
			found = call
			return false
		}
		return found == nil
	})
	return found
}

// walk calls f on x and its descendants until f returns false.
func walk(x node, f func(node) bool) bool {
	if x == nil {
		return true
	}
	if !f(x) {
		return false
	}
	var kids []node
	switch n := x.(type) {
	case *unaryNode:
		kids = []node{n.x}
	case *binaryNode:
		kids = []node{n.l, n.r}
	case *likeNode:
		kids = []node{n.x, n.pat}
	case *inNode:
		kids = append([]node{n.x}, n.list...)
	case *betweenNode:
		kids = []node{n.x, n.lo, n.hi}
	case *isNode:
		kids = []node{n.x}
	case *callNode:
		kids = n.args
	case *caseNode:
		kids = []node{n.subject, n.els}
		for _, w := range n.whens {
			kids = append(kids, w.cond, w.val)
		}
	case *castNode:
		kids = []node{n.x}
	}
	for _, k := range kids {
		if !walk(k, f) {
			return false
		}
	}
	return true
}

func (c *compiler) aggregate(col *Column, a *callNode) error {
	name := strings.ToUpper(a.name)
	switch a.name {
	case "count":
		if a.star {
			col.agg = aggCountStar
			return nil
		}
		if a.distinct {
			return c.errAt(a.distinctPos, "COUNT(DISTINCT …)", "not supported: an exact distinct count can't be merged across batches")
		}
		col.agg = aggCount
	case "sum":
		if a.distinct {
			return c.errAt(a.distinctPos, "SUM(DISTINCT …)", "not supported")
		}
		col.agg = aggSum
	case "min":
		col.agg = aggMin
	case "max":
		col.agg = aggMax
	case "avg":
		return c.errAt(a.p, "AVG", "not supported: an average can't be merged across batches; select SUM(x) and COUNT(x) and divide when you read")
	default:
		return c.errAt(a.p, name, "this aggregate is not supported: COUNT, SUM, MIN and MAX are")
	}
	if a.distinct && (col.agg == aggMin || col.agg == aggMax) {
		a.distinct = false // MIN(DISTINCT x) is MIN(x)
	}
	if len(a.args) != 1 {
		return c.errAt(a.p, col.Expr, "%s takes one argument", name)
	}
	arg := a.args[0]
	col.str = (col.agg == aggMin || col.agg == aggMax) && staticKindOf(arg) == skString
	if c.q.opts.SQLite && (col.agg == aggMin || col.agg == aggMax) && !col.str {
		return c.errAt(a.p, col.Aggregate(), "not supported on a SQLite sink: it has no exact decimal type to compare in; use mysql:// (or redis:// with --strategy idempotent)")
	}
	if in := findAggregate(arg); in != nil {
		return c.errAt(in.at(), col.Expr, "an aggregate inside an aggregate is not supported")
	}
	e, err := c.expr(arg)
	if err != nil {
		return err
	}
	col.eval = e
	return nil
}

// key compiles a group key column; TUMBLE makes it a window.
func (c *compiler) key(col *Column, x node) error {
	if f, ok := x.(*callNode); ok && f.name == "tumble" {
		if len(f.args) != 2 {
			return c.errAt(f.p, "TUMBLE", "takes a time field and a duration: TUMBLE(ts, '1m')")
		}
		lit, ok := f.args[1].(*litNode)
		if !ok || lit.k != litStr {
			return c.errAt(f.args[1].at(), "TUMBLE", "the window's size is a duration string such as '1m' or '15s'")
		}
		d, err := time.ParseDuration(lit.s)
		if err != nil || d < time.Millisecond || d%time.Millisecond != 0 {
			return c.errAt(lit.p, "TUMBLE", "window size %q: want a Go duration of whole milliseconds, at least 1ms ('1m', '15s', '1h')", lit.s)
		}
		ts, unit, what, err := c.tumbleTime(f.args[0])
		if err != nil {
			return err
		}
		col.Window = d
		col.eval = tumble(ts, d.Milliseconds(), unit, what)
		return nil
	}
	e, err := c.expr(x)
	if err != nil {
		return err
	}
	col.eval = e
	return nil
}
