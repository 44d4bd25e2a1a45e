package sqljob

import (
	"fmt"
	"strings"
)

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
