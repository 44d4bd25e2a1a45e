package sqljob

// The parser's side of funcs.go: parse nodes to the closures there, and
// each expression's static kind. This is the only file of the functions
// that knows the parser's types.

import (
	"strings"

	"vitess.io/vitess/go/vt/sqlparser"
)

// staticKindOf is what x yields whatever the record (see staticKind).
func staticKindOf(x sqlparser.Expr) staticKind {
	switch n := x.(type) {
	case *sqlparser.Literal:
		if n.Type == sqlparser.StrVal {
			return skString
		}
	case *sqlparser.NullVal:
		return skNull
	case *sqlparser.CastExpr:
		if n.Type != nil && strings.ToLower(n.Type.Type) == "char" {
			return skString
		}
	case *sqlparser.SubstrExpr:
		return skString
	case *sqlparser.FuncExpr:
		switch n.Name.Lowered() {
		case "lower", "upper", "lcase", "ucase", "concat":
			return skString
		case "if":
			if len(n.Exprs) == 3 {
				return branchKind(staticKindOf(n.Exprs[1]), staticKindOf(n.Exprs[2]))
			}
		case "coalesce", "ifnull":
			var ks []staticKind
			for _, a := range n.Exprs {
				ks = append(ks, staticKindOf(a))
			}
			return branchKind(ks...)
		}
	case *sqlparser.CaseExpr:
		var ks []staticKind
		for _, w := range n.Whens {
			ks = append(ks, staticKindOf(w.Val))
		}
		if n.Else != nil {
			ks = append(ks, staticKindOf(n.Else))
		}
		return branchKind(ks...)
	}
	return skOther
}

// stringFunc compiles LOWER, UPPER (LCASE, UCASE), CONCAT and IF.
func (c *compiler) stringFunc(n *sqlparser.FuncExpr) (expr, error) {
	name := n.Name.Lowered()
	var args []expr
	var whats []string
	for _, a := range n.Exprs {
		e, err := c.expr(a)
		if err != nil {
			return nil, err
		}
		args = append(args, e)
		whats = append(whats, exprText(a))
	}
	switch name {
	case "lower", "upper", "lcase", "ucase":
		if len(args) != 1 {
			return nil, c.errExpr(n, strings.ToUpper(name), "takes one argument: %s(name)", strings.ToUpper(name))
		}
		if name == "lower" || name == "lcase" {
			return lowerExpr(args[0], whats[0]), nil
		}
		return upperExpr(args[0], whats[0]), nil
	case "concat":
		if len(args) == 0 {
			return nil, c.errExpr(n, "CONCAT", "takes at least one argument")
		}
		return concatExpr(args, whats), nil
	case "if":
		if len(args) != 3 {
			return nil, c.errExpr(n, "IF", "takes three arguments: IF(condition, then, else)")
		}
		return ifExpr(args[0], args[1], args[2], whats[0]), nil
	}
	return nil, c.errExpr(n, "function "+strings.ToUpper(name), "not supported")
}

// substr compiles SUBSTRING(s, pos[, n]) (SUBSTR, FROM … FOR …).
func (c *compiler) substr(n *sqlparser.SubstrExpr) (expr, error) {
	if n.From == nil {
		return nil, c.errExpr(n, "SUBSTRING", "takes a position: SUBSTRING(s, pos[, len])")
	}
	s, err := c.expr(n.Name)
	if err != nil {
		return nil, err
	}
	pos, err := c.expr(n.From)
	if err != nil {
		return nil, err
	}
	var l expr
	lS := ""
	if n.To != nil {
		if l, err = c.expr(n.To); err != nil {
			return nil, err
		}
		lS = exprText(n.To)
	}
	return substringExpr(s, pos, l, exprText(n.Name), exprText(n.From), lS), nil
}

// between compiles x [NOT] BETWEEN lo AND hi.
func (c *compiler) between(n *sqlparser.BetweenExpr) (expr, error) {
	x, err := c.expr(n.Left)
	if err != nil {
		return nil, err
	}
	lo, err := c.expr(n.From)
	if err != nil {
		return nil, err
	}
	hi, err := c.expr(n.To)
	if err != nil {
		return nil, err
	}
	return betweenExpr(x, lo, hi, !n.IsBetween, exprText(n)), nil
}

// cast compiles CAST(x AS type).
func (c *compiler) cast(n *sqlparser.CastExpr) (expr, error) {
	if n.Array {
		return nil, c.errExpr(n, "CAST … ARRAY", "not supported")
	}
	ct := n.Type
	if ct.Charset.Name != "" || ct.Charset.Binary {
		return nil, c.errExpr(n, "CAST", "a character set is not supported: strings are UTF-8, compared as bytes")
	}
	var p, s int
	if ct.Length != nil {
		p = *ct.Length
	}
	if ct.Scale != nil {
		s = *ct.Scale
	}
	t, msg := newCastType(strings.ToLower(ct.Type), p, s, ct.Length != nil, ct.Scale != nil)
	if msg != "" {
		return nil, c.errExpr(n, "CAST", "%s", msg)
	}
	a, err := c.expr(n.Expr)
	if err != nil {
		return nil, err
	}
	return castExpr(a, t, exprText(n.Expr)), nil
}

// tumbleTime compiles TUMBLE's first argument: a time field, or
// FROM_UNIXTIME(field) for epoch seconds.
func (c *compiler) tumbleTime(x sqlparser.Expr) (expr, timeUnit, string, error) {
	if f, ok := x.(*sqlparser.FuncExpr); ok && f.Name.Lowered() == "from_unixtime" {
		if len(f.Exprs) != 1 {
			return nil, 0, "", c.errExpr(f, "FROM_UNIXTIME", "takes one argument, epoch seconds: TUMBLE(FROM_UNIXTIME(ts), '1m')")
		}
		e, err := c.expr(f.Exprs[0])
		return e, unitSeconds, exprText(f.Exprs[0]), err
	}
	e, err := c.expr(x)
	return e, unitMillis, exprText(x), err
}

// negText is the text of -x for a number x written as text (a literal):
// MySQL prints -5 for -(5) and 5 for -(-5).
func negText(s []byte) []byte {
	if s == nil || !plainNumRE.Match(s) {
		return nil
	}
	if s[0] == '-' {
		return s[1:]
	}
	return append([]byte("-"), s...)
}

// literalText is a number literal's text as MySQL prints it: integers and
// decimals as written; a float (1e2) is a double there, and has none.
func literalText(n *sqlparser.Literal) []byte {
	if n.Type == sqlparser.FloatVal {
		return nil
	}
	return []byte(n.Val)
}

// noGroupBy reports whether sel has no GROUP BY (a one-row table, see
// addGlobalKey), giving it an empty one, and refuses one without any
// aggregate: that would keep each record (a row job).
func (c *compiler) noGroupBy(sel *sqlparser.Select) (bool, error) {
	if sel.GroupBy != nil && len(sel.GroupBy.Exprs) > 0 {
		return false, nil
	}
	sel.GroupBy = &sqlparser.GroupBy{}
	for _, se := range sel.SelectExprs.Exprs {
		if ae, ok := se.(*sqlparser.AliasedExpr); ok && containsAggregate(ae.Expr) {
			return true, nil
		}
	}
	return false, c.errAt("select", 0, "GROUP BY", "missing: a query without GROUP BY keeps one row of aggregates (COUNT(*), SUM, MIN, MAX); one that keeps each record (a row job) is not supported yet")
}
