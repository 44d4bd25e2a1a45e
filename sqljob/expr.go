package sqljob

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"vitess.io/vitess/go/vt/sqlparser"
)

// expr compiles x into a closure. Every check that depends only on the
// query happens here, once; what depends on a record's values (a field's
// type) is checked by the closure and becomes the record's dead-letter
// reason.
func (c *compiler) expr(x sqlparser.Expr) (expr, error) {
	switch n := x.(type) {
	case *sqlparser.ColName:
		return c.field(n, c.colPath(n))
	case *sqlparser.JSONUnquoteExpr:
		ex, ok := n.JSONValue.(*sqlparser.JSONExtractExpr)
		if !ok {
			return nil, c.errExpr(x, "JSON_UNQUOTE", "takes JSON_EXTRACT(field, '$.path') (written field->>'$.path')")
		}
		return c.jsonPath(ex)
	case *sqlparser.JSONExtractExpr:
		return nil, c.errAt("->", 0, "->", "not supported: use ->> (the value, unquoted)")
	case *sqlparser.Literal:
		return c.literal(n)
	case sqlparser.BoolVal:
		v := val{k: kBool, b: bool(n)}
		return func(*env) (val, error) { return v, nil }, nil
	case *sqlparser.NullVal:
		return func(*env) (val, error) { return val{}, nil }, nil
	case *sqlparser.AndExpr:
		return c.logic(n.Left, n.Right, true)
	case *sqlparser.OrExpr:
		return c.logic(n.Left, n.Right, false)
	case *sqlparser.NotExpr:
		return c.not(n)
	case *sqlparser.ComparisonExpr:
		return c.comparison(n)
	case *sqlparser.IsExpr:
		return c.is(n)
	case *sqlparser.BinaryExpr:
		return c.arith(n)
	case *sqlparser.UnaryExpr:
		return c.unary(n)
	case *sqlparser.CaseExpr:
		return c.caseExpr(n)
	case *sqlparser.FuncExpr:
		return c.funcExpr(n)
	case *sqlparser.BetweenExpr:
		return c.between(n)
	case *sqlparser.CastExpr:
		return c.cast(n)
	case *sqlparser.ConvertExpr:
		return nil, c.errExpr(x, "CONVERT", "not supported: write CAST(x AS type)")
	case *sqlparser.SubstrExpr:
		return c.substr(n)
	}
	if isAggregate(x) {
		return nil, c.errExpr(x, exprText(x), "an aggregate inside an expression is not supported: select it as a column of its own")
	}
	return nil, c.errExpr(x, exprName(x), "not supported in a SQL job (see docs/sql-jobs.md for what is)")
}

var jsonPathRE = regexp.MustCompile(`json_unquote\(json_extract\(([^()]+?), ('[^']*')\)\)`)

// exprText prints x as the parser does, with the JSON operator as the
// user wrote it: customer->>'$.id', not json_unquote(json_extract(…)).
func exprText(x sqlparser.SQLNode) string {
	return jsonPathRE.ReplaceAllString(sqlparser.String(x), "$1->>$2")
}

// exprName names an unsupported construct for its error.
func exprName(x sqlparser.Expr) string {
	s := exprText(x)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// colPath is a column's field path: kind -> [kind]; customer.id ->
// [customer id]; a.b.c -> [a b c]. A qualifier naming the topic (or its
// alias) names the record itself: clicks.kind -> [kind].
func (c *compiler) colPath(n *sqlparser.ColName) []string {
	var path []string
	if !n.Qualifier.Qualifier.IsEmpty() {
		path = append(path, n.Qualifier.Qualifier.String())
	}
	if !n.Qualifier.Name.IsEmpty() {
		path = append(path, n.Qualifier.Name.String())
	}
	if len(path) == 1 && (path[0] == c.q.topic || path[0] == c.alias) {
		path = nil
	}
	return append(path, n.Name.String())
}

func (c *compiler) field(x sqlparser.Expr, path []string) (expr, error) {
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
func (c *compiler) jsonPath(ex *sqlparser.JSONExtractExpr) (expr, error) {
	col, ok := ex.JSONDoc.(*sqlparser.ColName)
	if !ok || len(ex.PathList) != 1 {
		return nil, c.errExpr(ex, "->>", "takes a field and one path: customer->>'$.id'")
	}
	lit, ok := ex.PathList[0].(*sqlparser.Literal)
	if !ok || lit.Type != sqlparser.StrVal {
		return nil, c.errExpr(ex, "->>", "the path is a string: customer->>'$.id'")
	}
	steps, err := parsePath(lit.Val)
	if err != nil {
		return nil, c.errExpr(ex, "->> path "+strconv.Quote(lit.Val), "%v", err)
	}
	return c.field(ex, append(c.colPath(col), steps...))
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

func (c *compiler) literal(n *sqlparser.Literal) (expr, error) {
	var v val
	switch n.Type {
	case sqlparser.StrVal:
		v = val{k: kStr, s: []byte(n.Val)}
	case sqlparser.IntVal, sqlparser.DecimalVal, sqlparser.FloatVal:
		d, err := parseDec([]byte(n.Val))
		if err != nil {
			return nil, c.errExpr(n, n.Val, "%v", err)
		}
		v = numVal(d)
		v.s = literalText(n)
	default:
		return nil, c.errExpr(n, n.Val, "this kind of literal is not supported")
	}
	return func(*env) (val, error) { return v, nil }, nil
}

func (c *compiler) logic(l, r sqlparser.Expr, and bool) (expr, error) {
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

func (c *compiler) not(n *sqlparser.NotExpr) (expr, error) {
	a, err := c.expr(n.Expr)
	if err != nil {
		return nil, err
	}
	s := exprText(n.Expr)
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

func (c *compiler) comparison(n *sqlparser.ComparisonExpr) (expr, error) {
	what := exprText(n)
	if n.Modifier != sqlparser.Missing {
		return nil, c.errExpr(n, "ANY/ALL", "not supported")
	}
	a, err := c.expr(n.Left)
	if err != nil {
		return nil, err
	}
	switch n.Operator {
	case sqlparser.InOp, sqlparser.NotInOp:
		tup, ok := n.Right.(sqlparser.ValTuple)
		if !ok {
			return nil, c.errExpr(n, "IN", "takes a list of values: IN ('a', 'b')")
		}
		var list []expr
		for _, t := range tup {
			e, err := c.expr(t)
			if err != nil {
				return nil, err
			}
			list = append(list, e)
		}
		neg := n.Operator == sqlparser.NotInOp
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
	case sqlparser.LikeOp, sqlparser.NotLikeOp:
		if n.Escape != nil {
			return nil, c.errAt("escape", 0, "LIKE … ESCAPE", "not supported: \\ escapes %% and _")
		}
		b, err := c.expr(n.Right)
		if err != nil {
			return nil, err
		}
		neg := n.Operator == sqlparser.NotLikeOp
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
	case sqlparser.RegexpOp, sqlparser.NotRegexpOp, sqlparser.NullSafeEqualOp:
		return nil, c.errExpr(n, n.Operator.ToString(), "not supported")
	}
	b, err := c.expr(n.Right)
	if err != nil {
		return nil, err
	}
	op := n.Operator
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
		var t bool
		switch op {
		case sqlparser.EqualOp:
			t = r == 0
		case sqlparser.NotEqualOp:
			t = r != 0
		case sqlparser.LessThanOp:
			t = r < 0
		case sqlparser.LessEqualOp:
			t = r <= 0
		case sqlparser.GreaterThanOp:
			t = r > 0
		case sqlparser.GreaterEqualOp:
			t = r >= 0
		}
		return val{k: kBool, b: t}, nil
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

func (c *compiler) is(n *sqlparser.IsExpr) (expr, error) {
	a, err := c.expr(n.Left)
	if err != nil {
		return nil, err
	}
	switch n.Right {
	case sqlparser.IsNullOp, sqlparser.IsNotNullOp:
		want := n.Right == sqlparser.IsNullOp
		return func(e *env) (val, error) {
			x, err := a(e)
			if err != nil {
				return val{}, err
			}
			return val{k: kBool, b: (x.k == kNull) == want}, nil
		}, nil
	}
	return nil, c.errExpr(n, "IS TRUE/FALSE", "not supported: IS NULL and IS NOT NULL are")
}

func (c *compiler) arith(n *sqlparser.BinaryExpr) (expr, error) {
	var op func(dec, dec) (dec, error)
	switch n.Operator {
	case sqlparser.PlusOp:
		op = dec.add
	case sqlparser.MinusOp:
		op = func(a, b dec) (dec, error) {
			nb, err := b.neg()
			if err != nil {
				return dec{}, err
			}
			return a.add(nb)
		}
	case sqlparser.MultOp:
		op = dec.mul
	case sqlparser.DivOp, sqlparser.IntDivOp, sqlparser.ModOp:
		return nil, c.errExpr(n, "operator "+n.Operator.ToString(), "not supported: a quotient is not exact; store SUMs and divide when you read")
	default:
		return nil, c.errExpr(n, "operator "+n.Operator.ToString(), "not supported")
	}
	a, err := c.expr(n.Left)
	if err != nil {
		return nil, err
	}
	b, err := c.expr(n.Right)
	if err != nil {
		return nil, err
	}
	what := exprText(n)
	ls, rs := exprText(n.Left), exprText(n.Right)
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

func (c *compiler) unary(n *sqlparser.UnaryExpr) (expr, error) {
	a, err := c.expr(n.Expr)
	if err != nil {
		return nil, err
	}
	switch n.Operator {
	case sqlparser.UPlusOp:
		return a, nil
	case sqlparser.UMinusOp:
	default:
		return nil, c.errExpr(n, "operator "+n.Operator.ToString(), "not supported")
	}
	what := exprText(n.Expr)
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

func (c *compiler) caseExpr(n *sqlparser.CaseExpr) (expr, error) {
	var subject expr
	var err error
	if n.Expr != nil {
		if subject, err = c.expr(n.Expr); err != nil {
			return nil, err
		}
	}
	type when struct {
		cond, val expr
		s         string
	}
	var whens []when
	for _, w := range n.Whens {
		cond, err := c.expr(w.Cond)
		if err != nil {
			return nil, err
		}
		v, err := c.expr(w.Val)
		if err != nil {
			return nil, err
		}
		whens = append(whens, when{cond, v, exprText(w.Cond)})
	}
	els := expr(func(*env) (val, error) { return val{}, nil })
	if n.Else != nil {
		if els, err = c.expr(n.Else); err != nil {
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

func (c *compiler) funcExpr(n *sqlparser.FuncExpr) (expr, error) {
	switch n.Name.Lowered() {
	case "coalesce", "ifnull":
		if len(n.Exprs) == 0 || (n.Name.Lowered() == "ifnull" && len(n.Exprs) != 2) {
			return nil, c.errExpr(n, strings.ToUpper(n.Name.String()), "needs arguments")
		}
		var args []expr
		for _, a := range n.Exprs {
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
		return nil, c.errExpr(n, "TUMBLE", "is a group key: GROUP BY TUMBLE(ts, '1m') (and select it, AS a name)")
	case "lower", "upper", "lcase", "ucase", "concat", "if":
		return c.stringFunc(n)
	case "from_unixtime":
		return nil, c.errExpr(n, "FROM_UNIXTIME", "only inside TUMBLE, for epoch seconds: TUMBLE(FROM_UNIXTIME(ts), '1m')")
	}
	return nil, c.errExpr(n, "function "+strings.ToUpper(n.Name.String()), "not supported: COALESCE, IFNULL, IF, CONCAT, LOWER, UPPER, SUBSTRING, CAST and TUMBLE are (and the aggregates COUNT, SUM, MIN, MAX)")
}
