package sqljob

import (
	"fmt"
	"strings"
)

// The parser reads the one statement a SQL job is,
//
//	INSERT INTO <table> SELECT <item>, … FROM <topic> [[AS] alias]
//	    [WHERE <expr>] [GROUP BY <expr>, …]
//
// with MySQL's expression syntax and precedence, into a tree whose every
// node knows where it starts. It is hand-written for that subset: what a
// user might write that the subset lacks (joins, subqueries, HAVING,
// window functions, other dialects' window syntax) is recognised and
// refused at its place with the form to write instead, not reported as a
// syntax error somewhere else. A library parser of all of MySQL (Vitess's)
// served before; it registered glog's flags in the program's flag set,
// logged lines of its own and took 40 s of a cold build.

// node is a parsed expression.
type node interface{ at() int }

type (
	// colRef is a name of one to three parts: kind, customer.id,
	// clicks.customer.id.
	colRef struct {
		p     int
		parts []string
	}
	// pathRef is field->>'$.path' (or ->, which is refused).
	pathRef struct {
		p     int
		col   *colRef
		op    string
		opPos int
		path  string
	}
	litNode struct {
		p int
		k litKind
		s string
	}
	unaryNode struct {
		p  int
		op string // "-", "+", "not", "!", "~"
		x  node
	}
	binaryNode struct {
		p     int
		op    string // lower case: "and", "=", "+", "div", …
		opPos int
		l, r  node
	}
	likeNode struct {
		p      int
		x, pat node
		not    bool
		escPos int // 0: no ESCAPE
	}
	inNode struct {
		p    int
		x    node
		not  bool
		list []node
	}
	betweenNode struct {
		p          int
		x, lo, hi  node
		not        bool
		betweenPos int
	}
	isNode struct {
		p     int
		x     node
		not   bool
		what  string // "null", "true", "false", "unknown"
		isPos int
	}
	callNode struct {
		p           int
		name        string // lower case
		star        bool   // COUNT(*)
		distinct    bool
		distinctPos int
		args        []node
	}
	caseNode struct {
		p       int
		subject node // nil: CASE WHEN cond …
		whens   []whenClause
		els     node
	}
	whenClause struct{ cond, val node }
	castNode   struct {
		p      int
		x      node
		typ    string // upper case: SIGNED, UNSIGNED, DECIMAL, CHAR, …
		typPos int
		args   []int // DECIMAL(p, s), CHAR(n)
	}
)

type litKind uint8

const (
	litStr litKind = iota
	litNum
	litTrue
	litFalse
	litNull
)

func (n *colRef) at() int      { return n.p }
func (n *pathRef) at() int     { return n.p }
func (n *litNode) at() int     { return n.p }
func (n *unaryNode) at() int   { return n.p }
func (n *binaryNode) at() int  { return n.p }
func (n *likeNode) at() int    { return n.p }
func (n *inNode) at() int      { return n.p }
func (n *betweenNode) at() int { return n.p }
func (n *isNode) at() int      { return n.p }
func (n *callNode) at() int    { return n.p }
func (n *caseNode) at() int    { return n.p }
func (n *castNode) at() int    { return n.p }

// statement is the parsed INSERT … SELECT.
type statement struct {
	verb     string // "insert" or "replace"
	verbPos  int
	table    string
	tablePos int
	sel      selectStmt
}

type selectStmt struct {
	p        int
	items    []selectItem
	topic    string
	topicPos int
	alias    string
	where    node
	groupBy  []node
	groupPos int // 0: no GROUP BY
}

type selectItem struct {
	x     node
	alias string // "" when not named
}

type parser struct {
	sql   string
	toks  []tok
	i     int
	depth int
}

// maxNesting bounds the nesting of expressions, so a query of a thousand
// parentheses is refused rather than deep in the stack.
const maxNesting = 200

func parse(sql string) (*statement, error) {
	toks, err := lex(sql)
	if err != nil {
		return nil, err
	}
	p := &parser{sql: sql, toks: toks}
	return p.statement()
}

func (p *parser) peek() tok       { return p.toks[p.i] }
func (p *parser) peekN(n int) tok { return p.toks[min(p.i+n, len(p.toks)-1)] }
func (p *parser) next() tok {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// is reports whether the next token is the keyword (or operator) w.
func (p *parser) is(w string) bool {
	t := p.peek()
	return (t.kind == tIdent || t.kind == tOp) && t.low == w
}

func (p *parser) isAt(n int, w string) bool {
	t := p.peekN(n)
	return (t.kind == tIdent || t.kind == tOp) && t.low == w
}

func (p *parser) accept(w string) bool {
	if p.is(w) {
		p.i++
		return true
	}
	return false
}

// expect takes w or fails naming what it found instead.
func (p *parser) expect(w, why string) error {
	if p.accept(w) {
		return nil
	}
	return p.unexpected(p.peek(), why)
}

func (p *parser) errAt(pos int, construct, format string, args ...any) error {
	return errAtPos(p.sql, pos, construct, format, args...)
}

func errAtPos(sql string, pos int, construct, format string, args ...any) error {
	e := &Error{Construct: construct, Msg: fmt.Sprintf(format, args...)}
	e.Line, e.Col = lineCol(sql, pos)
	return e
}

// unexpected is the syntax error for token t where want was expected.
func (p *parser) unexpected(t tok, want string) error {
	switch {
	case t.kind == tEOF:
		return p.errAt(t.pos, "syntax error", "the statement ends too early: want %s", want)
	case t.kind == tIdent && reserved[t.low]:
		return p.errAt(t.pos, "syntax error", "near %q, a reserved word: quote it with backticks (`%s`) if it is a name; want %s", t.text, t.text, want)
	}
	return p.errAt(t.pos, "syntax error", "unexpected %s: want %s", show(t), want)
}

func show(t tok) string {
	switch t.kind {
	case tString:
		return "'" + t.text + "'"
	case tQIdent:
		return "`" + t.text + "`"
	}
	return fmt.Sprintf("%q", t.text)
}

const wantStatement = "INSERT INTO <table> SELECT … FROM <topic> [WHERE …] GROUP BY …"

func (p *parser) statement() (*statement, error) {
	t := p.peek()
	st := &statement{verbPos: t.pos}
	switch {
	case p.is("with"):
		return nil, p.errAt(t.pos, "WITH", "not supported: a SQL job is one %s, without common table expressions", wantStatement)
	case p.is("insert"):
		st.verb = "insert"
	case p.is("replace"):
		st.verb = "replace"
	case p.is("select"):
		return nil, p.errAt(t.pos, "statement", "a SQL job writes a table: want %s", wantStatement)
	case p.is("create") && (p.isAt(1, "table") || p.isAt(1, "stream")):
		return nil, p.errAt(t.pos, "statement", "CREATE %s … AS SELECT (ksqlDB, Flink) is written %s here; microbatch creates the table", strings.ToUpper(p.peekN(1).text), wantStatement)
	default:
		if t.kind == tEOF {
			return nil, p.errAt(t.pos, "statement", "empty: want %s", wantStatement)
		}
		return nil, p.errAt(t.pos, "statement", "want one %s", wantStatement)
	}
	p.next()
	if p.is("ignore") {
		return nil, p.errAt(p.peek().pos, "INSERT IGNORE", "not supported: write INSERT INTO")
	}
	for _, w := range []string{"low_priority", "delayed", "high_priority"} {
		if p.is(w) {
			return nil, p.errAt(p.peek().pos, strings.ToUpper(w), "not supported")
		}
	}
	if err := p.expect("into", "INTO after "+strings.ToUpper(st.verb)); err != nil {
		return nil, err
	}
	name, pos, err := p.name("the table's name")
	if err != nil {
		return nil, err
	}
	if p.is(".") {
		return nil, p.errAt(pos, "INSERT INTO", "want a table name without a database (the sink's DSN names the database)")
	}
	st.table, st.tablePos = name, pos
	switch {
	case p.is("("):
		return nil, p.errAt(p.peek().pos, "INSERT column list", "not supported: the SELECT's names (AS) are the table's columns")
	case p.is("partition"):
		return nil, p.errAt(p.peek().pos, "PARTITION", "not supported")
	case p.is("values") || p.is("value"):
		return nil, p.errAt(p.peek().pos, "VALUES", "not supported: a SQL job reads a topic: %s", wantStatement)
	case p.is("set"):
		return nil, p.errAt(p.peek().pos, "INSERT … SET", "not supported: %s", wantStatement)
	case p.is("with"):
		return nil, p.errAt(p.peek().pos, "WITH", "not supported: a SQL job is one SELECT, without common table expressions")
	}
	if !p.is("select") {
		return nil, p.unexpected(p.peek(), "SELECT")
	}
	if err := p.selectStmt(&st.sel); err != nil {
		return nil, err
	}
	switch t := p.peek(); {
	case p.is("on") && p.isAt(1, "duplicate"):
		return nil, p.errAt(t.pos, "ON DUPLICATE KEY UPDATE", "not supported: each column's aggregate says how it merges")
	case p.is("union") || p.is("except") || p.is("intersect"):
		return nil, p.errAt(t.pos, strings.ToUpper(t.text), "not supported: one SELECT")
	case p.is("emit"):
		return nil, p.errAt(t.pos, "EMIT", "not supported: a SQL job always updates its table as it reads (leave EMIT CHANGES out)")
	}
	p.accept(";")
	if t := p.peek(); t.kind != tEOF {
		if t.kind == tOp && t.text == ")" {
			return nil, p.errAt(t.pos, "syntax error", "unexpected \")\": no \"(\" before it is open")
		}
		return nil, p.unexpected(t, "the end of the statement (one statement only)")
	}
	return st, nil
}

// name reads a table, topic or column name: a word that isn't reserved,
// or any `quoted` name.
func (p *parser) name(what string) (string, int, error) {
	t := p.peek()
	switch {
	case t.kind == tQIdent:
		p.next()
		return t.text, t.pos, nil
	case t.kind == tIdent && !reserved[t.low]:
		p.next()
		return t.text, t.pos, nil
	}
	return "", t.pos, p.unexpected(t, what)
}

func (p *parser) selectStmt(s *selectStmt) error {
	s.p = p.next().pos // SELECT
	switch t := p.peek(); {
	case p.is("distinct") || p.is("distinctrow"):
		return p.errAt(t.pos, "DISTINCT", "not supported: GROUP BY the columns instead")
	case p.is("all"):
		p.next()
	}
	for {
		it, err := p.selectItem()
		if err != nil {
			return err
		}
		s.items = append(s.items, it)
		if !p.accept(",") {
			break
		}
	}
	if !p.is("from") {
		if t := p.peek(); t.kind == tEOF {
			return p.errAt(s.p, "FROM", "missing: FROM <topic>")
		}
		return p.unexpected(p.peek(), "FROM <topic> (or a comma and another column)")
	}
	if err := p.from(s); err != nil {
		return err
	}
	if p.accept("where") {
		w, err := p.expr()
		if err != nil {
			return err
		}
		s.where = w
	}
	if p.is("group") {
		s.groupPos = p.next().pos
		if err := p.expect("by", "BY after GROUP"); err != nil {
			return err
		}
		for {
			x, err := p.expr()
			if err != nil {
				return err
			}
			s.groupBy = append(s.groupBy, x)
			if !p.accept(",") {
				break
			}
		}
		if p.is("with") && p.isAt(1, "rollup") {
			return p.errAt(p.peekN(1).pos, "WITH ROLLUP", "not supported")
		}
	}
	t := p.peek()
	switch {
	case p.is("having"):
		return p.errAt(t.pos, "HAVING", "not supported: the table keeps every group; filter when you read it")
	case p.is("window"):
		return p.errAt(t.pos, "WINDOW", "not supported: group by a tumbling window with GROUP BY TUMBLE(ts, '1m')")
	case p.is("order"):
		return p.errAt(t.pos, "ORDER BY", "not supported: a table's rows have no order; sort when you read it")
	case p.is("limit"):
		return p.errAt(t.pos, "LIMIT", "not supported: every group is kept")
	case p.is("into"):
		return p.errAt(t.pos, "SELECT … INTO", "not supported")
	case p.is("for") || p.is("lock"):
		return p.errAt(t.pos, "locking clause", "not supported")
	}
	return nil
}

func (p *parser) selectItem() (selectItem, error) {
	t := p.peek()
	if p.is("*") {
		return selectItem{}, p.errAt(t.pos, "SELECT *", "not supported: name each column")
	}
	if (t.kind == tIdent || t.kind == tQIdent) && p.isAt(1, ".") && p.isAt(2, "*") {
		return selectItem{}, p.errAt(t.pos, "SELECT "+t.text+".*", "not supported: name each column")
	}
	x, err := p.expr()
	if err != nil {
		return selectItem{}, err
	}
	it := selectItem{x: x}
	if p.accept("as") {
		a := p.peek()
		switch {
		case a.kind == tString || a.kind == tQIdent || (a.kind == tIdent && !reserved[a.low]):
			p.next()
			it.alias = a.text
		default:
			return it, p.unexpected(a, "a column name after AS")
		}
		return it, nil
	}
	if a := p.peek(); a.kind == tQIdent || (a.kind == tIdent && !reserved[a.low]) || a.kind == tString {
		p.next()
		it.alias = a.text
	}
	return it, nil
}

func (p *parser) from(s *selectStmt) error {
	from := p.next()
	t := p.peek()
	switch {
	case p.is("("):
		if p.isAt(1, "select") || p.isAt(1, "with") {
			return p.errAt(p.peekN(1).pos, "subquery", "not supported: FROM one topic")
		}
		return p.unexpected(t, "a topic name")
	case p.is("table") && p.isAt(1, "("):
		return p.errAt(t.pos, "FROM TABLE(…)", "not supported: FROM names the topic (FROM `page-views`); a window goes in GROUP BY TUMBLE(ts, '1m')")
	case p.is("lateral") || p.is("unnest"):
		return p.errAt(t.pos, strings.ToUpper(t.text), "not supported: FROM one topic")
	case t.kind == tEOF:
		return p.errAt(from.pos, "FROM", "missing the topic: FROM <topic>")
	}
	name, pos, err := p.name("a topic name")
	if err != nil {
		return err
	}
	// A topic named with - or . written bare: page-views reads as
	// page minus views. Name the whole run of characters.
	if n := p.peek(); n.pos == p.toks[p.i-1].end && n.kind == tOp && (n.text == "-" || n.text == ".") && p.toks[p.i-1].kind == tIdent {
		end := n.end
		for j := p.i + 1; j < len(p.toks) && p.toks[j].pos == end && p.toks[j].kind != tEOF && p.toks[j].kind != tString; j++ {
			if tk := p.toks[j]; tk.kind == tOp && tk.text != "-" && tk.text != "." {
				break
			}
			end = p.toks[j].end
		}
		whole := p.sql[pos:end]
		if n.text == "." && !strings.Contains(whole, "-") {
			return p.errAt(pos, "FROM", "want a topic name, not %s: a topic name with dots is quoted with backticks (FROM `%s`)", whole, whole)
		}
		return p.errAt(pos, "FROM", "a topic name with %q is quoted with backticks: FROM `%s`", n.text, whole)
	}
	s.topic, s.topicPos = name, pos
	if p.accept("as") {
		a, _, err := p.name("an alias after AS")
		if err != nil {
			return err
		}
		s.alias = a
	} else if a := p.peek(); a.kind == tQIdent || (a.kind == tIdent && !reserved[a.low] && a.low != "window" && a.low != "emit") {
		p.next()
		s.alias = a.text
	}
	t = p.peek()
	switch {
	case p.is(","):
		return p.errAt(t.pos, "join", "not supported: FROM one topic")
	case p.is("join") || p.is("inner") || p.is("left") || p.is("right") || p.is("cross") || p.is("natural") || p.is("straight_join") || p.is("full"):
		pos := t.pos
		for j := p.i; j < len(p.toks); j++ {
			if p.toks[j].low == "join" || p.toks[j].low == "straight_join" {
				pos = p.toks[j].pos
				break
			}
		}
		return p.errAt(pos, "JOIN", "not supported: FROM one topic")
	case p.is("window"):
		return p.errAt(t.pos, "WINDOW", "not supported: a tumbling window (ksqlDB's WINDOW TUMBLING (SIZE 1 MINUTE)) is written as a group key: GROUP BY TUMBLE(ts, '1m')")
	}
	return nil
}

// Expressions, by MySQL's precedence from the loosest: OR, XOR, AND, NOT,
// comparisons and IS/IN/LIKE/BETWEEN, | & << >>, + -, * / DIV %, ^,
// unary, primaries.

func (p *parser) expr() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxNesting {
		return nil, p.errAt(p.peek().pos, "expression", "nested more than %d deep", maxNesting)
	}
	return p.or()
}

func (p *parser) binaryLevel(ops []string, next func() (node, error)) (node, error) {
	l, err := next()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		op := ""
		for _, o := range ops {
			if p.is(o) {
				op = o
				break
			}
		}
		if op == "" {
			return l, nil
		}
		p.next()
		r, err := next()
		if err != nil {
			return nil, err
		}
		l = &binaryNode{p: l.at(), op: op, opPos: t.pos, l: l, r: r}
	}
}

func (p *parser) or() (node, error)  { return p.binaryLevel([]string{"or", "||"}, p.xor) }
func (p *parser) xor() (node, error) { return p.binaryLevel([]string{"xor"}, p.and) }
func (p *parser) and() (node, error) { return p.binaryLevel([]string{"and", "&&"}, p.not) }

func (p *parser) not() (node, error) {
	if t := p.peek(); p.is("not") {
		p.next()
		x, err := p.not()
		if err != nil {
			return nil, err
		}
		return &unaryNode{p: t.pos, op: "not", x: x}, nil
	}
	return p.predicate()
}

var comparisons = []string{"=", "<=>", "<>", "!=", "<=", ">=", "<", ">"}

// The predicates bind as in MariaDB's grammar (which accepts all MySQL
// does and means the same by it): a comparison's right side is a whole
// predicate (a = b IN (1) is a = (b IN (1)), a = b BETWEEN 1 AND 2 is
// a = (b BETWEEN 1 AND 2)); IN and LIKE bind tighter than BETWEEN, whose
// bounds are predicates (x BETWEEN 1 AND 2 IN (1) is x BETWEEN 1 AND
// (2 IN (1))); IS and the comparisons take the result of all of them, left
// to right, and nothing but a comparison or IS follows an IS.

// predicate reads comparisons and IS tests over betweens.
func (p *parser) predicate() (node, error) {
	x, err := p.between()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		switch {
		case p.is("is"):
			p.next()
			n := &isNode{p: x.at(), x: x, isPos: t.pos}
			n.not = p.accept("not")
			w := p.peek()
			switch {
			case p.is("null") || p.is("true") || p.is("false") || p.is("unknown"):
				p.next()
				n.what = w.low
			default:
				return nil, p.unexpected(w, "NULL, NOT NULL, TRUE or FALSE after IS")
			}
			x = n
			continue
		case p.isPredicateOp():
			if p.is("not") {
				t = p.peekN(1)
			}
			return nil, p.errAt(t.pos, "syntax error", "MySQL takes no %s right after IS …: put the IS test in parentheses", strings.ToUpper(t.text))
		}
		op := ""
		for _, o := range comparisons {
			if p.is(o) {
				op = o
				break
			}
		}
		if op == "" {
			return x, nil
		}
		p.next()
		if p.is("any") || p.is("all") || p.is("some") {
			return nil, p.errAt(p.peek().pos, "ANY/ALL", "not supported")
		}
		r, err := p.between()
		if err != nil {
			return nil, err
		}
		x = &binaryNode{p: x.at(), op: op, opPos: t.pos, l: x, r: r}
	}
}

// isPredicateOp: the next tokens are [NOT] IN, LIKE, BETWEEN, REGEXP, ….
func (p *parser) isPredicateOp() bool {
	if p.is("not") {
		return p.isAt(1, "in") || p.isAt(1, "like") || p.isAt(1, "between") || p.isAt(1, "regexp") || p.isAt(1, "rlike")
	}
	return p.is("in") || p.is("like") || p.is("between") || p.is("regexp") || p.is("rlike") || p.is("sounds") || p.is("member")
}

// between reads x [NOT] BETWEEN lo AND hi, right-associative, over IN and
// LIKE: its bounds are betweens themselves.
func (p *parser) between() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxNesting {
		return nil, p.errAt(p.peek().pos, "expression", "nested more than %d deep", maxNesting)
	}
	x, err := p.inLike()
	if err != nil {
		return nil, err
	}
	not := p.is("not") && p.isAt(1, "between")
	if !not && !p.is("between") {
		return x, nil
	}
	if not {
		p.next()
	}
	t := p.next()
	lo, err := p.between()
	if err != nil {
		return nil, err
	}
	if err := p.expect("and", "AND in BETWEEN … AND …"); err != nil {
		return nil, err
	}
	hi, err := p.between()
	if err != nil {
		return nil, err
	}
	return &betweenNode{p: x.at(), x: x, lo: lo, hi: hi, not: not, betweenPos: t.pos}, nil
}

// inLike reads [NOT] IN and [NOT] LIKE, left to right.
func (p *parser) inLike() (node, error) {
	x, err := p.bitOr()
	if err != nil {
		return nil, err
	}
	for p.isPredicateOp() && !p.is("between") && !(p.is("not") && p.isAt(1, "between")) {
		not := p.accept("not")
		y, err := p.afterNot(x, not)
		if err != nil {
			return nil, err
		}
		x = y
	}
	return x, nil
}

// afterNot parses IN, LIKE, REGEXP after x (and a NOT).
func (p *parser) afterNot(x node, not bool) (node, error) {
	t := p.next()
	switch t.low {
	case "in":
		if !p.is("(") {
			return nil, p.unexpected(p.peek(), "a list of values after IN: IN ('a', 'b')")
		}
		if p.isAt(1, "select") || p.isAt(1, "with") {
			return nil, p.errAt(p.peekN(1).pos, "subquery", "not supported")
		}
		list, err := p.list()
		if err != nil {
			return nil, err
		}
		return &inNode{p: x.at(), x: x, not: not, list: list}, nil
	case "like":
		pat, err := p.bitOr()
		if err != nil {
			return nil, err
		}
		n := &likeNode{p: x.at(), x: x, pat: pat, not: not}
		if p.is("escape") {
			n.escPos = p.next().pos
			if _, err := p.primary(); err != nil {
				return nil, err
			}
		}
		return n, nil
	case "regexp", "rlike":
		return nil, p.errAt(t.pos, strings.ToUpper(t.text), "not supported: match with LIKE ('%%' any run, '_' one character)")
	}
	return nil, p.errAt(t.pos, strings.ToUpper(t.text), "not supported")
}

// list reads ( expr, … ).
func (p *parser) list() ([]node, error) {
	p.next() // (
	var list []node
	for {
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		list = append(list, x)
		if p.accept(")") {
			return list, nil
		}
		if !p.is(",") {
			return nil, p.unexpected(p.peek(), "a comma or \")\"")
		}
		p.next()
	}
}

func (p *parser) bitOr() (node, error) {
	return p.binaryLevel([]string{"|", "&", "<<", ">>"}, p.add)
}

func (p *parser) add() (node, error) { return p.binaryLevel([]string{"+", "-"}, p.mul) }

func (p *parser) mul() (node, error) {
	return p.binaryLevel([]string{"*", "/", "div", "%", "mod"}, p.caret)
}

func (p *parser) caret() (node, error) { return p.binaryLevel([]string{"^"}, p.unary) }

func (p *parser) unary() (node, error) {
	t := p.peek()
	if p.is("-") || p.is("+") || p.is("!") || p.is("~") {
		p.next()
		p.depth++
		defer func() { p.depth-- }()
		if p.depth > maxNesting {
			return nil, p.errAt(t.pos, "expression", "nested more than %d deep", maxNesting)
		}
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &unaryNode{p: t.pos, op: t.text, x: x}, nil
	}
	return p.primary()
}

// callable are reserved words that are also functions: IF(…).
var callable = map[string]bool{"if": true, "left": true, "right": true, "mod": true, "replace": true, "insert": true,
	"char": true, "convert": true, "database": true, "schema": true, "repeat": true, "match": true, "values": true,
	"current_date": true, "current_time": true, "current_timestamp": true, "localtime": true, "localtimestamp": true,
	"utc_date": true, "utc_time": true, "utc_timestamp": true, "current_user": true}

func (p *parser) primary() (node, error) {
	t := p.peek()
	switch t.kind {
	case tEOF:
		return nil, p.unexpected(t, "an expression")
	case tString:
		p.next()
		s := t.text
		for p.peek().kind == tString { // 'a' 'b' is 'ab', as in MySQL
			s += p.next().text
		}
		return &litNode{p: t.pos, k: litStr, s: s}, nil
	case tNumber:
		p.next()
		return &litNode{p: t.pos, k: litNum, s: t.text}, nil
	case tQIdent:
		return p.column()
	case tOp:
		switch t.text {
		case "(":
			if p.isAt(1, "select") || p.isAt(1, "with") {
				return nil, p.errAt(p.peekN(1).pos, "subquery", "not supported")
			}
			p.next()
			x, err := p.expr()
			if err != nil {
				return nil, err
			}
			if p.is(",") {
				return nil, p.errAt(t.pos, "row constructor", "not supported: compare one value at a time")
			}
			if err := p.expect(")", "\")\""); err != nil {
				return nil, err
			}
			return x, nil
		case "?", "@", ":=":
			return nil, p.errAt(t.pos, t.text, "variables and placeholders are not supported")
		}
		return nil, p.unexpected(t, "an expression")
	}
	// a word
	switch t.low {
	case "null", "true", "false":
		p.next()
		k := map[string]litKind{"null": litNull, "true": litTrue, "false": litFalse}[t.low]
		return &litNode{p: t.pos, k: k, s: t.low}, nil
	case "case":
		return p.caseExpr()
	case "cast":
		if p.isAt(1, "(") {
			return p.cast()
		}
	case "interval":
		return nil, p.interval()
	case "exists":
		return nil, p.errAt(t.pos, "EXISTS", "not supported: a subquery")
	case "binary", "collate":
		return nil, p.errAt(t.pos, strings.ToUpper(t.text), "not supported: strings compare by their bytes already")
	case "date", "time", "timestamp":
		if p.peekN(1).kind == tString {
			return nil, p.errAt(t.pos, strings.ToUpper(t.text)+" literal", "not supported: compare with the value as the records hold it")
		}
	case "select":
		return nil, p.errAt(t.pos, "subquery", "not supported")
	}
	if p.isAt(1, "(") && (!reserved[t.low] || callable[t.low]) {
		return p.call()
	}
	if reserved[t.low] {
		return nil, p.unexpected(t, "an expression")
	}
	return p.column()
}

// column reads a name of up to three parts and a ->> path after it.
func (p *parser) column() (node, error) {
	first := p.peek()
	c := &colRef{p: first.pos}
	for {
		t := p.next()
		if t.kind != tIdent && t.kind != tQIdent {
			return nil, p.unexpected(t, "a name after \".\"")
		}
		c.parts = append(c.parts, t.text)
		if !p.is(".") {
			break
		}
		p.next()
		if len(c.parts) == 3 {
			end := p.peek().end
			for j := p.i; j+1 < len(p.toks) && p.toks[j].kind != tEOF && (p.toks[j].text == "." || p.toks[j].kind == tIdent || p.toks[j].kind == tQIdent) && p.toks[j].pos <= end; j++ {
				end = p.toks[j].end
			}
			whole := p.sql[first.pos:end]
			head, rest, _ := strings.Cut(whole, ".")
			return nil, p.errAt(first.pos, whole, "a name has three parts at most (topic.field.member); for deeper members write %s->>'$.%s'", head, rest)
		}
		if t := p.peek(); t.kind != tIdent && t.kind != tQIdent {
			return nil, p.unexpected(t, "a name after \".\"")
		}
	}
	if p.is("->>") || p.is("->") {
		op := p.next()
		pt := p.peek()
		if pt.kind != tString {
			return nil, p.unexpected(pt, "a path string after "+op.text+": customer->>'$.id'")
		}
		p.next()
		return &pathRef{p: c.p, col: c, op: op.text, opPos: op.pos, path: pt.text}, nil
	}
	return c, nil
}

func (p *parser) call() (node, error) {
	t := p.next()
	n := &callNode{p: t.pos, name: t.low}
	p.next() // (
	switch {
	case p.is("*"):
		if n.name != "count" {
			return nil, p.errAt(p.peek().pos, "*", "only COUNT(*) takes *")
		}
		p.next()
		n.star = true
	case p.is(")"):
	default:
		if p.is("distinct") {
			n.distinctPos = p.next().pos
			n.distinct = true
		} else {
			p.accept("all")
		}
		for {
			x, err := p.expr()
			if err != nil {
				return nil, err
			}
			n.args = append(n.args, x)
			if p.is(",") {
				p.next()
				continue
			}
			break
		}
		if p.is("order") || p.is("separator") {
			return nil, p.errAt(p.peek().pos, strings.ToUpper(p.peek().text), "not supported in a function call")
		}
		if p.is("from") && len(n.args) == 1 && (n.name == "substring" || n.name == "substr") {
			// SUBSTRING(s FROM pos [FOR len]) is SUBSTRING(s, pos[, len]).
			for _, w := range []string{"from", "for"} {
				if !p.accept(w) {
					break
				}
				x, err := p.expr()
				if err != nil {
					return nil, err
				}
				n.args = append(n.args, x)
			}
		}
	}
	if err := p.expect(")", "\")\" to close "+strings.ToUpper(n.name)+"("); err != nil {
		return nil, err
	}
	switch {
	case p.is("over"):
		return nil, p.errAt(p.peek().pos, "OVER", "window functions are not supported: an aggregate is per group of the GROUP BY (a time window: GROUP BY TUMBLE(ts, '1m'))")
	case p.is("filter") && p.isAt(1, "("):
		return nil, p.errAt(p.peek().pos, "FILTER", "not supported: put the condition inside the aggregate: SUM(CASE WHEN … THEN x END), COUNT(CASE WHEN … THEN 1 END)")
	case p.is("within"):
		return nil, p.errAt(p.peek().pos, "WITHIN GROUP", "not supported")
	}
	return n, nil
}

func (p *parser) caseExpr() (node, error) {
	n := &caseNode{p: p.next().pos}
	if !p.is("when") {
		s, err := p.expr()
		if err != nil {
			return nil, err
		}
		n.subject = s
	}
	for p.accept("when") {
		cond, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect("then", "THEN after CASE … WHEN …"); err != nil {
			return nil, err
		}
		v, err := p.expr()
		if err != nil {
			return nil, err
		}
		n.whens = append(n.whens, whenClause{cond, v})
	}
	if len(n.whens) == 0 {
		return nil, p.unexpected(p.peek(), "WHEN in CASE")
	}
	if p.accept("else") {
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		n.els = e
	}
	if err := p.expect("end", "END to close CASE"); err != nil {
		return nil, err
	}
	return n, nil
}

func (p *parser) cast() (node, error) {
	n := &castNode{p: p.next().pos}
	p.next() // (
	x, err := p.expr()
	if err != nil {
		return nil, err
	}
	n.x = x
	if err := p.expect("as", "AS <type> in CAST(x AS <type>)"); err != nil {
		return nil, err
	}
	t := p.next()
	if t.kind != tIdent {
		return nil, p.unexpected(t, "a type: SIGNED, DECIMAL(p,s), CHAR")
	}
	n.typ, n.typPos = strings.ToUpper(t.text), t.pos
	if n.typ == "SIGNED" || n.typ == "UNSIGNED" {
		p.accept("integer")
		p.accept("int")
	}
	if p.accept("(") {
		for {
			a := p.next()
			if a.kind != tNumber || strings.ContainsAny(a.text, ".eE") || len(a.text) > 4 {
				return nil, p.unexpected(a, "a whole number in "+n.typ+"(…)")
			}
			v := 0
			fmt.Sscan(a.text, &v)
			n.args = append(n.args, v)
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect(")", "\")\" after the type's size"); err != nil {
			return nil, err
		}
	}
	switch t := p.peek(); {
	case p.is("character") || p.is("charset") || p.is("collate"):
		return nil, p.errAt(t.pos, "CAST", "a character set is not supported: strings are UTF-8, compared as bytes")
	case p.is("array"):
		return nil, p.errAt(t.pos, "CAST … ARRAY", "not supported")
	}
	if err := p.expect(")", "\")\" to close CAST("); err != nil {
		return nil, err
	}
	return n, nil
}

// interval refuses INTERVAL '1' MINUTE with the duration to write.
func (p *parser) interval() error {
	t := p.next()
	v := p.peek()
	u := p.peekN(1)
	hint := "'1m'"
	if v.kind == tString || v.kind == tNumber {
		units := map[string]string{"second": "s", "minute": "m", "hour": "h", "millisecond": "ms"}
		if s, ok := units[strings.TrimSuffix(u.low, "s")]; ok {
			hint = "'" + strings.TrimSpace(v.text) + s + "'"
		} else if strings.TrimSuffix(u.low, "s") == "day" {
			var n int
			if _, err := fmt.Sscan(v.text, &n); err == nil {
				hint = fmt.Sprintf("'%dh'", 24*n)
			}
		}
	}
	return p.errAt(t.pos, "INTERVAL", "not supported: write a duration as a string: TUMBLE(ts, %s)", hint)
}

// reserved are MySQL's reserved words that a SQL job might meet where a
// name is expected: unquoted, MySQL refuses them as names, and so does
// this parser (quote them with backticks).
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`accessible add all alter analyze and as asc asensitive before between bigint
	binary blob both by call cascade case change char character check collate column condition constraint
	continue convert create cross current_date current_time current_timestamp current_user cursor database
	databases day_hour day_microsecond day_minute day_second dec decimal declare default delayed delete desc
	describe deterministic distinct distinctrow div double drop dual each else elseif enclosed escaped except
	exists exit explain false fetch float float4 float8 for force foreign from fulltext function generated get
	grant group having high_priority hour_microsecond hour_minute hour_second if ignore in index infile inner
	inout insensitive insert int int1 int2 int3 int4 int8 integer intersect interval into is iterate join
	key keys kill lateral leading leave left like limit linear lines load localtime localtimestamp lock long
	longblob longtext loop low_priority match maxvalue mediumblob mediumint mediumtext middleint
	minute_microsecond minute_second mod modifies natural not no_write_to_binlog null numeric on optimize
	option optionally or order out outer outfile over partition precision primary procedure purge read reads
	read_write real recursive references regexp release rename repeat replace require resignal restrict return
	revoke right rlike schema schemas second_microsecond select sensitive separator set show signal smallint
	spatial specific sql sqlexception sqlstate sqlwarning sql_big_result sql_calc_found_rows sql_small_result
	ssl starting stored straight_join table terminated then tinyblob tinyint tinytext to trailing trigger
	true undo union unique unlock unsigned update usage use using utc_date utc_time utc_timestamp values
	varbinary varchar varcharacter varying virtual when where while window with write xor year_month zerofill`) {
		m[w] = true
	}
	return m
}()
