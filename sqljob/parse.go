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

// statement is the parsed INSERT … SELECT.
type statement struct {
	verb     string // "insert" or "replace"
	verbPos  int
	table    string
	tablePos int
	// keyCols are the names of REPLACE INTO t (PRIMARY KEY (c1, …)): an
	// upsert row job's key (nil: no key clause; keyPos is where it is).
	keyCols []string
	keyPos  int
	sel     selectStmt
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
	if p.is("(") && p.isAt(1, "primary") {
		if err := p.keyClause(st); err != nil {
			return nil, err
		}
	}
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

// keyClause reads an upsert's key, (PRIMARY KEY (c1, …)), as MySQL's
// CREATE TABLE t (PRIMARY KEY (id)) REPLACE SELECT … names it.
func (p *parser) keyClause(st *statement) error {
	st.keyPos = p.next().pos // (
	p.next()                 // PRIMARY
	if err := p.expect("key", "KEY after PRIMARY"); err != nil {
		return err
	}
	if err := p.expect("(", "( and the key's column names: (PRIMARY KEY (id))"); err != nil {
		return err
	}
	for {
		name, _, err := p.name("a column name of the key")
		if err != nil {
			return err
		}
		st.keyCols = append(st.keyCols, name)
		if !p.accept(",") {
			break
		}
	}
	if err := p.expect(")", ") after the key's column names"); err != nil {
		return err
	}
	return p.expect(")", ") closing the key clause: (PRIMARY KEY (id))")
}
