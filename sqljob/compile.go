package sqljob

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"vitess.io/vitess/go/vt/sqlparser"

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
	sc scanner
}

// Column is one column of the query's table.
type Column struct {
	Name   string
	Expr   string // the expression, as the parser prints it
	Key    bool   // part of the GROUP BY (the table's primary key)
	Window time.Duration
	agg    aggKind
	eval   expr
	str    bool // MIN/MAX of a string (its argument is statically one): compared as bytes
}

// Rule is how the sink merges a new value into the stored one.
func (c Column) Rule() string {
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
	toks  []token
	alias string   // FROM's alias, a qualifier that names the record
	paths []string // the fields read, in first-use order
}

// token is a word of the query and its byte offset, for positions.
type token struct {
	word string
	pos  int
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Compile parses and compiles one statement
// INSERT INTO <table> SELECT … FROM <topic> [WHERE …] GROUP BY ….
func Compile(sql string, opts Options) (*Query, error) {
	if opts.SQLite {
		opts.IntegerSums = true
	}
	c := &compiler{q: &Query{sql: sql, opts: opts, root: &pathNode{field: -1}}, sql: sql}
	parser, err := sqlparser.New(sqlparser.Options{})
	if err != nil {
		return nil, fmt.Errorf("sql: starting the parser: %w", err)
	}
	c.tokenize(parser)
	st, err := parser.Parse(sql)
	if err != nil {
		return nil, c.syntax(err)
	}
	ins, ok := st.(*sqlparser.Insert)
	if !ok || ins.Action != sqlparser.InsertAct {
		return nil, c.errAt(firstWord(sql), 0, "statement", "want one INSERT INTO <table> SELECT … FROM <topic> [WHERE …] GROUP BY …")
	}
	if err := c.insert(ins); err != nil {
		return nil, err
	}
	return c.q, nil
}

func firstWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return strings.ToLower(f[0])
}

var syntaxRE = regexp.MustCompile(`at position (\d+)(?: near '(.*)')?`)

// syntax turns the parser's error into one placed at the word it stopped
// on ("at position N" counts bytes up to the end of that word).
func (c *compiler) syntax(err error) error {
	msg := err.Error()
	e := &Error{Construct: "syntax error", Msg: msg}
	m := syntaxRE.FindStringSubmatch(msg)
	if m == nil {
		return e
	}
	var p int
	fmt.Sscan(m[1], &p)
	near := m[2]
	e.Line, e.Col = lineCol(c.sql, max(p-len(near)-1, 0))
	switch {
	case near == "":
		e.Msg = "the statement ends too early"
	case reserved(near):
		e.Msg = fmt.Sprintf("near %q, a reserved word: quote it with backticks (`%s`)", near, near)
	default:
		e.Msg = fmt.Sprintf("near %q", near)
	}
	return e
}

// reserved reports whether word is a keyword the parser won't take as a
// column name unquoted.
func reserved(word string) bool {
	_, err := sqlparser.NewTestParser().Parse("select " + word + " from t")
	return err != nil
}

// tokenize records where each word of the query starts, so that an error
// can point at the construct it refuses (the parser's tree has no
// positions).
func (c *compiler) tokenize(p *sqlparser.Parser) {
	tk := p.NewStringTokenizer(c.sql)
	lower := strings.ToLower(c.sql)
	at := 0 // where the previous word ended
	for len(c.toks) < 100000 {
		before := tk.Pos
		typ, word := tk.Scan()
		if typ == 0 {
			return
		}
		word = strings.ToLower(word)
		if word == "" { // an operator or punctuation: its text
			word = strings.TrimSpace(lower[min(before, len(lower)):min(max(tk.Pos, before), len(lower))])
			if word == "" && typ < 256 {
				word = string(rune(typ))
			}
		}
		// The tokenizer reads a character ahead; find the word itself.
		pos := at
		if i := strings.Index(lower[at:], word); i >= 0 && word != "" {
			pos = at + i
			at = pos + len(word)
		}
		c.toks = append(c.toks, token{word: word, pos: pos})
	}
}

func lineCol(s string, pos int) (int, int) {
	pos = min(pos, len(s))
	line := 1 + strings.Count(s[:pos], "\n")
	col := pos - strings.LastIndex(s[:pos], "\n")
	return line, col
}

// errAt makes an Error placed at the nth (0-based) token spelling word,
// or without a place when there is none.
func (c *compiler) errAt(word string, nth int, construct, format string, args ...any) error {
	e := &Error{Construct: construct, Msg: fmt.Sprintf(format, args...)}
	word = strings.ToLower(word)
	for _, t := range c.toks {
		if t.word == word {
			if nth == 0 {
				e.Line, e.Col = lineCol(c.sql, t.pos)
				break
			}
			nth--
		}
	}
	return e
}

// errAfter is errAt placed at the first word after the first anchor.
func (c *compiler) errAfter(anchor, word, construct, format string, args ...any) error {
	e := &Error{Construct: construct, Msg: fmt.Sprintf(format, args...)}
	seen := false
	for _, t := range c.toks {
		if seen && t.word == word {
			e.Line, e.Col = lineCol(c.sql, t.pos)
			break
		}
		seen = seen || t.word == anchor
	}
	return e
}

// errExpr places an error at the first word of expression x.
func (c *compiler) errExpr(x sqlparser.SQLNode, construct, format string, args ...any) error {
	return c.errAt(firstTokenOf(x), 0, construct, format, args...)
}

// firstTokenOf is the word an expression starts with, as the tokenizer
// gives it.
func firstTokenOf(x sqlparser.SQLNode) string {
	switch n := x.(type) {
	case *sqlparser.ColName:
		if !n.Qualifier.IsEmpty() {
			if !n.Qualifier.Qualifier.IsEmpty() {
				return n.Qualifier.Qualifier.String()
			}
			return n.Qualifier.Name.String()
		}
		return n.Name.String()
	case *sqlparser.FuncExpr:
		return n.Name.String()
	case *sqlparser.Avg:
		return "avg"
	case *sqlparser.Count, *sqlparser.CountStar:
		return "count"
	case *sqlparser.Sum:
		return "sum"
	case *sqlparser.Min:
		return "min"
	case *sqlparser.Max:
		return "max"
	case *sqlparser.CaseExpr:
		return "case"
	case *sqlparser.Subquery:
		return "select"
	case *sqlparser.JSONUnquoteExpr:
		return firstTokenOf(n.JSONValue)
	case *sqlparser.JSONExtractExpr:
		return firstTokenOf(n.JSONDoc)
	case *sqlparser.ComparisonExpr:
		return firstTokenOf(n.Left)
	case *sqlparser.BinaryExpr:
		return firstTokenOf(n.Left)
	case *sqlparser.AndExpr:
		return firstTokenOf(n.Left)
	case *sqlparser.OrExpr:
		return firstTokenOf(n.Left)
	case *sqlparser.IsExpr:
		return firstTokenOf(n.Left)
	case *sqlparser.Literal:
		return n.Val
	}
	s := exprText(x)
	if f := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '(' || r == '`' }); len(f) > 0 {
		return f[0]
	}
	return s
}

func (c *compiler) insert(ins *sqlparser.Insert) error {
	q := c.q
	switch {
	case bool(ins.Ignore):
		return c.errAt("ignore", 0, "INSERT IGNORE", "not supported: write INSERT INTO")
	case len(ins.Columns) > 0:
		return c.errAt("(", 0, "INSERT column list", "not supported: the SELECT's names (AS) are the table's columns")
	case len(ins.OnDup) > 0:
		return c.errAt("on", 0, "ON DUPLICATE KEY UPDATE", "not supported: each column's aggregate says how it merges")
	case len(ins.Partitions) > 0:
		return c.errAt("partition", 0, "PARTITION", "not supported")
	case ins.RowAlias != nil:
		return c.errAt("as", 0, "row alias", "not supported")
	}
	tn, ok := ins.Table.Expr.(sqlparser.TableName)
	if !ok || !tn.Qualifier.IsEmpty() {
		return c.errAt("into", 0, "INSERT INTO", "want a table name without a database (the sink's DSN names the database)")
	}
	q.table = tn.Name.String()
	if !identRE.MatchString(q.table) {
		return c.errAt("into", 0, "table name", "%q: want letters, digits and _ (up to 64, not starting with a digit)", q.table)
	}
	if strings.HasPrefix(strings.ToLower(q.table), "mb_") {
		return c.errAt("into", 0, "table name", "%q: mb_ tables are microbatch's own", q.table)
	}
	sel, ok := ins.Rows.(*sqlparser.Select)
	if !ok {
		switch ins.Rows.(type) {
		case *sqlparser.Union:
			return c.errAt("union", 0, "UNION", "not supported: one SELECT")
		case sqlparser.Values:
			return c.errAt("values", 0, "VALUES", "not supported: INSERT INTO <table> SELECT … FROM <topic> … GROUP BY …")
		}
		return c.errAt("select", 0, "INSERT", "want INSERT INTO <table> SELECT …")
	}
	return c.selectStmt(sel)
}

func (c *compiler) selectStmt(sel *sqlparser.Select) error {
	q := c.q
	switch {
	case sel.With != nil:
		return c.errAt("with", 0, "WITH", "not supported")
	case sel.Distinct:
		return c.errAt("distinct", 0, "DISTINCT", "not supported: GROUP BY the columns instead")
	case sel.Having != nil:
		return c.errAt("having", 0, "HAVING", "not supported: the table keeps every group; filter when you read it")
	case len(sel.OrderBy) > 0:
		return c.errAt("order", 0, "ORDER BY", "not supported: a table's rows have no order; sort when you read it")
	case sel.Limit != nil:
		return c.errAt("limit", 0, "LIMIT", "not supported: every group is kept")
	case len(sel.Windows) > 0:
		return c.errAt("window", 0, "WINDOW", "not supported: use TUMBLE(ts, '1m') in GROUP BY")
	case sel.Into != nil:
		return c.errAt("into", 1, "SELECT … INTO", "not supported")
	case sel.Lock != sqlparser.NoLock:
		return c.errAt("for", 0, "locking clause", "not supported")
	}
	if len(sel.From) != 1 {
		if len(sel.From) == 0 {
			return c.errAt("select", 0, "FROM", "missing: FROM <topic>")
		}
		return c.errAfter("from", ",", "join", "not supported: FROM one topic")
	}
	switch f := sel.From[0].(type) {
	case *sqlparser.JoinTableExpr:
		return c.errAt("join", 0, "JOIN", "not supported: FROM one topic")
	case *sqlparser.AliasedTableExpr:
		switch t := f.Expr.(type) {
		case sqlparser.TableName:
			if !t.Qualifier.IsEmpty() {
				return c.errAt("from", 0, "FROM", "want a topic name, not %s", exprText(t))
			}
			q.topic = t.Name.String()
			if !record.ValidTopic(q.topic) {
				return c.errAt("from", 0, "FROM", "%q is not a valid topic name", q.topic)
			}
			if !f.As.IsEmpty() {
				c.alias = f.As.String()
			}
		case *sqlparser.DerivedTable:
			return c.errAt("select", 1, "subquery", "not supported: FROM one topic")
		default:
			return c.errAt("from", 0, "FROM", "want a topic name")
		}
	default:
		return c.errAt("from", 0, "FROM", "want one topic")
	}
	if err := c.noSubqueries(sel); err != nil {
		return err
	}
	if sel.Where != nil {
		w, err := c.expr(sel.Where.Expr)
		if err != nil {
			return err
		}
		q.where = w
		q.whereS = exprText(sel.Where.Expr)
	}
	return c.columns(sel)
}

// noSubqueries refuses a subquery anywhere.
func (c *compiler) noSubqueries(sel *sqlparser.Select) error {
	var found bool
	_ = sqlparser.Walk(func(n sqlparser.SQLNode) (bool, error) {
		if _, ok := n.(*sqlparser.Subquery); ok {
			found = true
			return false, nil
		}
		return true, nil
	}, sel.SelectExprs, sel.Where, sel.GroupBy)
	if found {
		return c.errAt("select", 1, "subquery", "not supported")
	}
	return nil
}

// columns compiles the SELECT list against the GROUP BY.
func (c *compiler) columns(sel *sqlparser.Select) error {
	q := c.q
	global, err := c.noGroupBy(sel)
	if err != nil {
		return err
	}
	if sel.GroupBy.WithRollup {
		return c.errAt("rollup", 0, "WITH ROLLUP", "not supported")
	}
	// The GROUP BY's expressions, by printed form; an alias resolves to
	// its select expression.
	type item struct {
		name string
		x    sqlparser.Expr
	}
	var items []item
	aliases := map[string]sqlparser.Expr{}
	for _, se := range sel.SelectExprs.Exprs {
		ae, ok := se.(*sqlparser.AliasedExpr)
		if !ok {
			return c.errAt("*", 0, "SELECT *", "not supported: name each column")
		}
		name := ae.As.String()
		if name == "" {
			if col, ok := ae.Expr.(*sqlparser.ColName); ok && col.Qualifier.IsEmpty() {
				name = col.Name.String()
			} else {
				return c.errExpr(ae.Expr, exprText(ae.Expr), "give it a column name with AS")
			}
		}
		if !identRE.MatchString(name) {
			return c.errExpr(ae.Expr, "column "+name, "want letters, digits and _ (up to 64, not starting with a digit)")
		}
		for _, it := range items {
			if strings.EqualFold(it.name, name) {
				return c.errExpr(ae.Expr, "column "+name, "named twice")
			}
		}
		items = append(items, item{name, ae.Expr})
		aliases[strings.ToLower(name)] = ae.Expr
	}
	grouped := map[string]bool{}
	for _, g := range sel.GroupBy.Exprs {
		x := g
		if col, ok := g.(*sqlparser.ColName); ok && col.Qualifier.IsEmpty() {
			if a, ok := aliases[col.Name.Lowered()]; ok {
				x = a
			}
		}
		if isAggregate(x) {
			return c.errExpr(g, "GROUP BY "+exprText(g), "an aggregate can't be a group key")
		}
		if lit, ok := x.(*sqlparser.Literal); ok && lit.Type == sqlparser.IntVal {
			return c.errExpr(g, "GROUP BY "+lit.Val, "positions are not supported: name the column")
		}
		grouped[exprText(x)] = true
	}
	used := map[string]bool{}
	for _, it := range items {
		col := Column{Name: it.name, Expr: exprText(it.x)}
		if isAggregate(it.x) {
			if err := c.aggregate(&col, it.x); err != nil {
				return err
			}
			q.vals = append(q.vals, len(q.cols))
			q.cols = append(q.cols, col)
			continue
		}
		if !grouped[col.Expr] {
			if global {
				return c.errExpr(it.x, col.Expr, "is not an aggregate: without GROUP BY every column is one (the table is one row); add GROUP BY %s", col.Expr)
			}
			if containsAggregate(it.x) {
				return c.errExpr(it.x, col.Expr, "an aggregate inside an expression is not supported: select the aggregate as a column of its own")
			}
			return c.errExpr(it.x, col.Expr, "is neither aggregated nor in GROUP BY")
		}
		used[col.Expr] = true
		col.Key = true
		if err := c.key(&col, it.x); err != nil {
			return err
		}
		q.keys = append(q.keys, len(q.cols))
		q.cols = append(q.cols, col)
	}
	for _, g := range sel.GroupBy.Exprs {
		x := g
		if col, ok := g.(*sqlparser.ColName); ok && col.Qualifier.IsEmpty() {
			if a, ok := aliases[col.Name.Lowered()]; ok {
				x = a
			}
		}
		if !used[exprText(x)] {
			return c.errExpr(g, "GROUP BY "+exprText(g), "is not selected: every group key must be a column of the table")
		}
	}
	if len(q.vals) == 0 {
		return c.errAt("select", 0, "SELECT", "no aggregate: select COUNT(*), SUM, MIN or MAX of something")
	}
	if global {
		return c.addGlobalKey()
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

func isAggregate(x sqlparser.Expr) bool {
	switch x.(type) {
	case *sqlparser.CountStar, *sqlparser.Count, *sqlparser.Sum, *sqlparser.Min, *sqlparser.Max, *sqlparser.Avg:
		return true
	case sqlparser.AggrFunc:
		return true
	}
	return false
}

func containsAggregate(x sqlparser.Expr) bool {
	found := false
	_ = sqlparser.Walk(func(n sqlparser.SQLNode) (bool, error) {
		if e, ok := n.(sqlparser.Expr); ok && isAggregate(e) {
			found = true
			return false, nil
		}
		return true, nil
	}, x)
	return found
}

func (c *compiler) aggregate(col *Column, x sqlparser.Expr) error {
	var arg sqlparser.Expr
	switch a := x.(type) {
	case *sqlparser.CountStar:
		col.agg = aggCountStar
		if a.OverClause != nil {
			return c.errAt("over", 0, "OVER", "window functions are not supported")
		}
		return nil
	case *sqlparser.Count:
		if a.Distinct {
			return c.errAt("distinct", 0, "COUNT(DISTINCT …)", "not supported: an exact distinct count can't be merged across batches")
		}
		if len(a.Args) != 1 {
			return c.errExpr(x, col.Expr, "COUNT takes one argument")
		}
		col.agg, arg = aggCount, a.Args[0]
	case *sqlparser.Sum:
		if a.Distinct {
			return c.errAt("distinct", 0, "SUM(DISTINCT …)", "not supported")
		}
		col.agg, arg = aggSum, a.Arg
	case *sqlparser.Min:
		col.agg, arg = aggMin, a.Arg
	case *sqlparser.Max:
		col.agg, arg = aggMax, a.Arg
	case *sqlparser.Avg:
		return c.errAt("avg", 0, "AVG", "not supported: an average can't be merged across batches; select SUM(x) and COUNT(x) and divide when you read")
	default:
		return c.errExpr(x, col.Expr, "this aggregate is not supported: COUNT, SUM, MIN and MAX are")
	}
	col.str = (col.agg == aggMin || col.agg == aggMax) && staticKindOf(arg) == skString
	if c.q.opts.SQLite && (col.agg == aggMin || col.agg == aggMax) && !col.str {
		return c.errExpr(x, col.Aggregate(), "not supported on a SQLite sink: it has no exact decimal type to compare in; use mysql:// (or redis:// with --strategy idempotent)")
	}
	if containsAggregate(arg) {
		return c.errExpr(arg, col.Expr, "an aggregate inside an aggregate is not supported")
	}
	e, err := c.expr(arg)
	if err != nil {
		return err
	}
	col.eval = e
	return nil
}

// key compiles a group key column; TUMBLE makes it a window.
func (c *compiler) key(col *Column, x sqlparser.Expr) error {
	if f, ok := x.(*sqlparser.FuncExpr); ok && f.Name.Lowered() == "tumble" {
		if len(f.Exprs) != 2 {
			return c.errExpr(x, "TUMBLE", "takes a time field and a duration: TUMBLE(ts, '1m')")
		}
		lit, ok := f.Exprs[1].(*sqlparser.Literal)
		if !ok || lit.Type != sqlparser.StrVal {
			return c.errExpr(x, "TUMBLE", "the window's size is a duration string such as '1m' or '15s'")
		}
		d, err := time.ParseDuration(lit.Val)
		if err != nil || d < time.Millisecond || d%time.Millisecond != 0 {
			return c.errExpr(x, "TUMBLE", "window size %q: want a Go duration of whole milliseconds, at least 1ms ('1m', '15s', '1h')", lit.Val)
		}
		ts, unit, what, err := c.tumbleTime(f.Exprs[0])
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
