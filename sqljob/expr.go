package sqljob

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// expr compiles x into a closure. Every check that depends only on the
// query happens here, once; what depends on a record's values (a field's
// type) is checked by the closure and becomes the record's dead-letter
// reason.
func (c *compiler) expr(x node) (expr, error) {
	switch n := x.(type) {
	case *colRef:
		if name, ok := metaName(n); ok {
			return metaExpr(name), nil
		}
		return c.field(c.colPath(n))
	case *pathRef:
		return c.jsonPath(n)
	case *litNode:
		return c.literal(n)
	case *unaryNode:
		if n.op == "not" {
			return c.not(n)
		}
		return c.unary(n)
	case *binaryNode:
		switch n.op {
		case "and", "or":
			return c.logic(n.l, n.r, n.op == "and")
		case "&&":
			return nil, c.errAt(n.opPos, "&&", "not supported: write AND")
		case "||":
			return nil, c.errAt(n.opPos, "||", "not supported: write OR (or CONCAT(a, b) to join strings)")
		case "=", "<>", "!=", "<", "<=", ">", ">=":
			return c.comparison(n)
		case "<=>":
			return nil, c.errAt(n.opPos, "operator <=>", "not supported: write a = b OR (a IS NULL AND b IS NULL)")
		}
		return c.arith(n)
	case *likeNode:
		return c.like(n)
	case *betweenNode:
		return c.between(n)
	case *castNode:
		return c.cast(n)
	case *inNode:
		return c.in(n)
	case *isNode:
		return c.is(n)
	case *caseNode:
		return c.caseExpr(n)
	case *callNode:
		if isAggregateName(n.name) {
			return nil, c.errAt(n.p, exprText(n), "an aggregate inside an expression is not supported: select it as a column of its own")
		}
		return c.funcExpr(n)
	}
	return nil, c.errAt(x.at(), exprName(x), "not supported in a SQL job (see docs/sql-jobs.md for what is)")
}

// exprName names an unsupported construct for its error.
func exprName(x node) string {
	s := exprText(x)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// colPath is a column's field path: kind -> [kind]; customer.id ->
// [customer id]; a.b.c -> [a b c]. A first part naming the topic (or its
// alias) names the record itself: clicks.kind -> [kind], c.customer.id
// -> [customer id].
func (c *compiler) colPath(n *colRef) []string {
	path := n.parts
	if len(path) > 1 && (path[0] == c.q.topic || (c.alias != "" && path[0] == c.alias)) {
		path = path[1:]
	}
	return append([]string(nil), path...)
}

func (c *compiler) field(path []string) (expr, error) {
	name := strings.Join(path, ".")
	before := c.q.nField
	slot := c.q.root.add(path, &c.q.nField, &c.q.nNode)
	if c.q.nField > before {
		c.paths = append(c.paths, name)
	}
	// A number is parsed once per record, where it is first used.
	return func(e *env) (val, error) {
		v := &e.sc.f[slot]
		if v.k == kNum && !v.nOK {
			if d, err := parseDec(v.s); err == nil {
				v.n, v.nOK = d, true
			}
		}
		return *v, nil
	}, nil
}

// jsonPath compiles field->>'$.a.b' (JSON_UNQUOTE(JSON_EXTRACT(…))): the
// member path under the field. Member names may be quoted ('$."odd
// name"'); array steps and wildcards are refused.
func (c *compiler) jsonPath(n *pathRef) (expr, error) {
	if n.op == "->" {
		return nil, c.errAt(n.opPos, "->", "not supported: use ->> (the value, unquoted)")
	}
	steps, err := parsePath(n.path)
	if err != nil {
		return nil, c.errAt(n.opPos, "->> path "+strconv.Quote(n.path), "%v", err)
	}
	return c.field(append(c.colPath(n.col), steps...))
}

func parsePath(p string) ([]string, error) {
	if !strings.HasPrefix(p, "$") {
		return nil, fmt.Errorf("a path starts with $")
	}
	var steps []string
	for i := 1; i < len(p); {
		if p[i] != '.' {
			return nil, fmt.Errorf("only member steps ($.a.b) are supported, not %q", p[i:])
		}
		i++
		if i < len(p) && p[i] == '"' {
			j := strings.IndexByte(p[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quoted member name")
			}
			steps = append(steps, p[i+1:i+1+j])
			i += j + 2
			continue
		}
		j := i
		for j < len(p) && p[j] != '.' && p[j] != '[' {
			j++
		}
		name := p[i:j]
		if name == "" || name == "*" || strings.ContainsAny(name, " *\"") {
			return nil, fmt.Errorf("member name %q: quote odd names ($.\"a b\"); wildcards are not supported", name)
		}
		steps = append(steps, name)
		i = j
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("the path names no member: $.name")
	}
	return steps, nil
}

func (c *compiler) literal(n *litNode) (expr, error) {
	var v val
	switch n.k {
	case litStr:
		v = val{k: kStr, s: []byte(n.s)}
	case litNum:
		d, err := parseDec([]byte(n.s))
		if err != nil {
			return nil, c.errAt(n.p, n.s, "%v", err)
		}
		v = numVal(d)
		v.s = literalText(n)
	case litTrue, litFalse:
		v = val{k: kBool, b: n.k == litTrue}
	case litNull:
	}
	return func(*env) (val, error) { return v, nil }, nil
}

func (c *compiler) logic(l, r node, and bool) (expr, error) {
	a, err := c.expr(l)
	if err != nil {
		return nil, err
	}
	b, err := c.expr(r)
	if err != nil {
		return nil, err
	}
	ls, rs := exprText(l), exprText(r)
	// Three-valued: AND is false if either is false, else null if either
	// is null; OR the dual.
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil {
			return val{}, err
		}
		xt, xn, err := truth(&x, ls)
		if err != nil {
			return val{}, err
		}
		if !xn && xt != and { // false AND …, true OR …
			return val{k: kBool, b: xt}, nil
		}
		y, err := b(e)
		if err != nil {
			return val{}, err
		}
		yt, yn, err := truth(&y, rs)
		if err != nil {
			return val{}, err
		}
		switch {
		case !yn && yt != and:
			return val{k: kBool, b: yt}, nil
		case xn || yn:
			return val{}, nil
		}
		return val{k: kBool, b: and}, nil
	}, nil
}

func (c *compiler) not(n *unaryNode) (expr, error) {
	a, err := c.expr(n.x)
	if err != nil {
		return nil, err
	}
	s := exprText(n.x)
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil {
			return val{}, err
		}
		t, null, err := truth(&x, s)
		if err != nil || null {
			return val{}, err
		}
		return val{k: kBool, b: !t}, nil
	}, nil
}

// compare orders two non-null values of one kind: numbers by value,
// strings by their bytes (no collation: 'a' < 'b' < 'B'? no: bytes, so
// 'B' < 'a'), booleans false < true.
func compare(x, y *val, what string) (int, error) {
	if x.k != y.k {
		return 0, fmt.Errorf("%s compares a %s (%s) with a %s (%s)", what, x.k, x.show(), y.k, y.show())
	}
	switch x.k {
	case kNum:
		a, err := x.num(what)
		if err != nil {
			return 0, err
		}
		b, err := y.num(what)
		if err != nil {
			return 0, err
		}
		return a.cmp(b), nil
	case kStr, kJSON:
		return bytes.Compare(x.s, y.s), nil
	case kBool:
		switch {
		case x.b == y.b:
			return 0, nil
		case !x.b:
			return -1, nil
		}
		return 1, nil
	case kTime:
		switch {
		case x.n.m < y.n.m:
			return -1, nil
		case x.n.m > y.n.m:
			return 1, nil
		}
		return 0, nil
	}
	return 0, nil
}

func (c *compiler) comparison(n *binaryNode) (expr, error) {
	what := exprText(n)
	a, err := c.expr(n.l)
	if err != nil {
		return nil, err
	}
	b, err := c.expr(n.r)
	if err != nil {
		return nil, err
	}
	var test func(int) bool
	switch n.op {
	case "=":
		test = func(r int) bool { return r == 0 }
	case "<>", "!=":
		test = func(r int) bool { return r != 0 }
	case "<":
		test = func(r int) bool { return r < 0 }
	case "<=":
		test = func(r int) bool { return r <= 0 }
	case ">":
		test = func(r int) bool { return r > 0 }
	case ">=":
		test = func(r int) bool { return r >= 0 }
	}
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		y, err := b(e)
		if err != nil || y.k == kNull {
			return val{}, err
		}
		r, err := compare(&x, &y, what)
		if err != nil {
			return val{}, err
		}
		return val{k: kBool, b: test(r)}, nil
	}, nil
}

func (c *compiler) in(n *inNode) (expr, error) {
	what := exprText(n)
	a, err := c.expr(n.x)
	if err != nil {
		return nil, err
	}
	var list []expr
	for _, t := range n.list {
		e, err := c.expr(t)
		if err != nil {
			return nil, err
		}
		list = append(list, e)
	}
	neg := n.not
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		sawNull := false
		for _, l := range list {
			y, err := l(e)
			if err != nil {
				return val{}, err
			}
			if y.k == kNull {
				sawNull = true
				continue
			}
			r, err := compare(&x, &y, what)
			if err != nil {
				return val{}, err
			}
			if r == 0 {
				return val{k: kBool, b: !neg}, nil
			}
		}
		if sawNull {
			return val{}, nil
		}
		return val{k: kBool, b: neg}, nil
	}, nil
}

func (c *compiler) like(n *likeNode) (expr, error) {
	what := exprText(n)
	if n.escPos > 0 {
		return nil, c.errAt(n.escPos, "LIKE … ESCAPE", "not supported: \\ escapes %% and _")
	}
	a, err := c.expr(n.x)
	if err != nil {
		return nil, err
	}
	b, err := c.expr(n.pat)
	if err != nil {
		return nil, err
	}
	neg := n.not
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		p, err := b(e)
		if err != nil || p.k == kNull {
			return val{}, err
		}
		if x.k != kStr || p.k != kStr {
			return val{}, fmt.Errorf("%s: LIKE takes strings, got a %s (%s) and a %s", what, x.k, x.show(), p.k)
		}
		return val{k: kBool, b: like(x.s, p.s) != neg}, nil
	}, nil
}

// like matches s against a LIKE pattern: % any run, _ one character, \
// escapes the next; bytes compared exactly (case matters). Greedy with
// one backtrack point, the last %: O(len(s)·len(p)) whatever the pattern,
// so a record's long field can't make a pattern of many % take n^k steps.
func like(s, p []byte) bool {
	si, pi := 0, 0
	starP, starS := -1, 0 // the pattern after the last %, and where in s it was tried
	for si < len(s) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '%':
				pi++
				starP, starS = pi, si
				continue
			case '_':
				_, n := utf8.DecodeRune(s[si:])
				si, pi = si+n, pi+1
				continue
			default:
				w := 1
				if c == '\\' && pi+1 < len(p) {
					c, w = p[pi+1], 2
				}
				if s[si] == c {
					si, pi = si+1, pi+w
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		// The last % takes one more character; match again after it.
		_, n := utf8.DecodeRune(s[starS:])
		starS += n
		si, pi = starS, starP
	}
	for pi < len(p) && p[pi] == '%' {
		pi++
	}
	return pi == len(p)
}

func (c *compiler) is(n *isNode) (expr, error) {
	if n.what != "null" {
		return nil, c.errAt(n.isPos, "IS "+strings.ToUpper(n.what), "not supported: IS NULL and IS NOT NULL are")
	}
	a, err := c.expr(n.x)
	if err != nil {
		return nil, err
	}
	want := !n.not
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil {
			return val{}, err
		}
		return val{k: kBool, b: (x.k == kNull) == want}, nil
	}, nil
}

func (c *compiler) arith(n *binaryNode) (expr, error) {
	var op func(dec, dec) (dec, error)
	switch n.op {
	case "+":
		op = dec.add
	case "-":
		op = func(a, b dec) (dec, error) {
			nb, err := b.neg()
			if err != nil {
				return dec{}, err
			}
			return a.add(nb)
		}
	case "*":
		op = dec.mul
	case "/":
		return nil, c.errAt(n.opPos, "operator "+n.op, "not supported: a quotient is not exact; store SUMs and divide when you read")
	case "div", "%", "mod":
		return nil, c.errAt(n.opPos, "operator "+strings.ToUpper(n.op), "not supported: +, - and * are")
	default:
		return nil, c.errAt(n.opPos, "operator "+n.op, "not supported")
	}
	a, err := c.expr(n.l)
	if err != nil {
		return nil, err
	}
	b, err := c.expr(n.r)
	if err != nil {
		return nil, err
	}
	what := exprText(n)
	ls, rs := exprText(n.l), exprText(n.r)
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		y, err := b(e)
		if err != nil || y.k == kNull {
			return val{}, err
		}
		p, err := x.num(ls)
		if err != nil {
			return val{}, err
		}
		q, err := y.num(rs)
		if err != nil {
			return val{}, err
		}
		r, err := op(p, q)
		if err != nil {
			return val{}, fmt.Errorf("%s: %w", what, err)
		}
		return numVal(r), nil
	}, nil
}

func (c *compiler) unary(n *unaryNode) (expr, error) {
	switch n.op {
	case "+":
		return c.expr(n.x)
	case "-":
	case "!":
		return nil, c.errAt(n.p, "operator !", "not supported: write NOT")
	default:
		return nil, c.errAt(n.p, "operator "+n.op, "not supported")
	}
	a, err := c.expr(n.x)
	if err != nil {
		return nil, err
	}
	what := exprText(n.x)
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		d, err := x.num(what)
		if err != nil {
			return val{}, err
		}
		d, err = d.neg()
		if err != nil {
			return val{}, err
		}
		v := numVal(d)
		v.s = negText(x.s)
		return v, nil
	}, nil
}

func (c *compiler) caseExpr(n *caseNode) (expr, error) {
	var subject expr
	var err error
	if n.subject != nil {
		if subject, err = c.expr(n.subject); err != nil {
			return nil, err
		}
	}
	type when struct {
		cond, val expr
		s         string
	}
	var whens []when
	for _, w := range n.whens {
		cond, err := c.expr(w.cond)
		if err != nil {
			return nil, err
		}
		v, err := c.expr(w.val)
		if err != nil {
			return nil, err
		}
		whens = append(whens, when{cond, v, exprText(w.cond)})
	}
	els := expr(func(*env) (val, error) { return val{}, nil })
	if n.els != nil {
		if els, err = c.expr(n.els); err != nil {
			return nil, err
		}
	}
	what := exprText(n)
	return func(e *env) (val, error) {
		var s val
		if subject != nil {
			if s, err = subject(e); err != nil {
				return val{}, err
			}
		}
		for _, w := range whens {
			x, err := w.cond(e)
			if err != nil {
				return val{}, err
			}
			var hit bool
			if subject != nil {
				if s.k == kNull || x.k == kNull {
					continue
				}
				r, err := compare(&s, &x, what)
				if err != nil {
					return val{}, err
				}
				hit = r == 0
			} else {
				t, null, err := truth(&x, w.s)
				if err != nil {
					return val{}, err
				}
				hit = t && !null
			}
			if hit {
				return w.val(e)
			}
		}
		return els(e)
	}, nil
}

func (c *compiler) funcExpr(n *callNode) (expr, error) {
	name := strings.ToUpper(n.name)
	switch n.name {
	case "coalesce", "ifnull":
		if len(n.args) == 0 || (n.name == "ifnull" && len(n.args) != 2) {
			return nil, c.errAt(n.p, name, "needs arguments")
		}
		var args []expr
		for _, a := range n.args {
			e, err := c.expr(a)
			if err != nil {
				return nil, err
			}
			args = append(args, e)
		}
		return func(e *env) (val, error) {
			for _, a := range args {
				v, err := a(e)
				if err != nil || v.k != kNull {
					return v, err
				}
			}
			return val{}, nil
		}, nil
	case "tumble":
		return nil, c.errAt(n.p, "TUMBLE", "is a group key: GROUP BY TUMBLE(ts, '1m') (and select it, AS a name)")
	case "lower", "upper", "lcase", "ucase", "concat", "if":
		return c.stringFunc(n)
	case "substring", "substr", "mid":
		return c.substr(n)
	case "convert":
		return nil, c.errAt(n.p, "CONVERT", "not supported: write CAST(x AS type)")
	case "from_unixtime":
		return nil, c.errAt(n.p, "FROM_UNIXTIME", "only inside TUMBLE, for epoch seconds: TUMBLE(FROM_UNIXTIME(ts), '1m')")
	case "regexp_like":
		return nil, c.errAt(n.p, "function "+name, "not supported: match with LIKE ('%%' any run, '_' one character)")
	case "json_extract", "json_unquote", "json_value":
		return nil, c.errAt(n.p, "function "+name, "not supported: write field->>'$.path'")
	}
	return nil, c.errAt(n.p, "function "+name, "not supported: COALESCE, IFNULL, IF, CONCAT, LOWER, UPPER, SUBSTRING, CAST and TUMBLE are (and the aggregates COUNT, SUM, MIN, MAX)")
}
