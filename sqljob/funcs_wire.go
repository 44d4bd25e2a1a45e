package sqljob

// The parser's side of funcs.go: parse nodes to the closures there, and
// each expression's static kind. This is the only file of the functions
// that knows the parser's types.

import (
	"strings"
)

// staticKindOf is what x yields whatever the record (see staticKind).
func staticKindOf(x node) staticKind {
	switch n := x.(type) {
	case *litNode:
		switch n.k {
		case litStr:
			return skString
		case litNull:
			return skNull
		}
	case *castNode:
		if n.typ == "CHAR" {
			return skString
		}
	case *callNode:
		switch n.name {
		case "lower", "upper", "lcase", "ucase", "concat", "substring", "substr", "mid":
			return skString
		case "if":
			if len(n.args) == 3 {
				return branchKind(staticKindOf(n.args[1]), staticKindOf(n.args[2]))
			}
		case "coalesce", "ifnull":
			var ks []staticKind
			for _, a := range n.args {
				ks = append(ks, staticKindOf(a))
			}
			return branchKind(ks...)
		}
	case *caseNode:
		var ks []staticKind
		for _, w := range n.whens {
			ks = append(ks, staticKindOf(w.val))
		}
		if n.els != nil {
			ks = append(ks, staticKindOf(n.els))
		}
		return branchKind(ks...)
	}
	return skOther
}

// args compiles a call's arguments, with their text for messages.
func (c *compiler) args(n *callNode) ([]expr, []string, error) {
	var args []expr
	var whats []string
	for _, a := range n.args {
		e, err := c.expr(a)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, e)
		whats = append(whats, exprText(a))
	}
	return args, whats, nil
}

// stringFunc compiles LOWER, UPPER (LCASE, UCASE), CONCAT and IF.
func (c *compiler) stringFunc(n *callNode) (expr, error) {
	name := strings.ToUpper(n.name)
	args, whats, err := c.args(n)
	if err != nil {
		return nil, err
	}
	switch n.name {
	case "lower", "upper", "lcase", "ucase":
		if len(args) != 1 {
			return nil, c.errAt(n.p, name, "takes one argument: %s(name)", name)
		}
		if n.name == "lower" || n.name == "lcase" {
			return lowerExpr(args[0], whats[0]), nil
		}
		return upperExpr(args[0], whats[0]), nil
	case "concat":
		if len(args) == 0 {
			return nil, c.errAt(n.p, "CONCAT", "takes at least one argument")
		}
		return concatExpr(args, whats), nil
	case "if":
		if len(args) != 3 {
			return nil, c.errAt(n.p, "IF", "takes three arguments: IF(condition, then, else)")
		}
		return ifExpr(args[0], args[1], args[2], whats[0]), nil
	}
	return nil, c.errAt(n.p, "function "+name, "not supported")
}

// substr compiles SUBSTRING(s, pos[, n]) (SUBSTR, MID, FROM … FOR …).
func (c *compiler) substr(n *callNode) (expr, error) {
	if len(n.args) < 2 || len(n.args) > 3 {
		return nil, c.errAt(n.p, strings.ToUpper(n.name), "takes a string, a position and a length: SUBSTRING(s, pos[, len])")
	}
	args, whats, err := c.args(n)
	if err != nil {
		return nil, err
	}
	var l expr
	lS := ""
	if len(args) == 3 {
		l, lS = args[2], whats[2]
	}
	return substringExpr(args[0], args[1], l, whats[0], whats[1], lS), nil
}

// between compiles x [NOT] BETWEEN lo AND hi.
func (c *compiler) between(n *betweenNode) (expr, error) {
	x, err := c.expr(n.x)
	if err != nil {
		return nil, err
	}
	lo, err := c.expr(n.lo)
	if err != nil {
		return nil, err
	}
	hi, err := c.expr(n.hi)
	if err != nil {
		return nil, err
	}
	return betweenExpr(x, lo, hi, n.not, exprText(n)), nil
}

// cast compiles CAST(x AS type).
func (c *compiler) cast(n *castNode) (expr, error) {
	var p, s int
	if len(n.args) > 0 {
		p = n.args[0]
	}
	if len(n.args) > 1 {
		s = n.args[1]
	}
	if len(n.args) > 2 {
		return nil, c.errAt(n.typPos, "CAST", "%s takes at most two sizes", n.typ)
	}
	t, msg := newCastType(strings.ToLower(n.typ), p, s, len(n.args) > 0, len(n.args) > 1)
	if msg != "" {
		return nil, c.errAt(n.typPos, "CAST", "%s", msg)
	}
	a, err := c.expr(n.x)
	if err != nil {
		return nil, err
	}
	return castExpr(a, t, exprText(n.x)), nil
}

// tumbleTime compiles TUMBLE's first argument: a time field, or
// FROM_UNIXTIME(field) for epoch seconds.
func (c *compiler) tumbleTime(x node) (expr, timeUnit, string, error) {
	if f, ok := x.(*callNode); ok && f.name == "from_unixtime" {
		if len(f.args) != 1 {
			return nil, 0, "", c.errAt(f.p, "FROM_UNIXTIME", "takes one argument, epoch seconds: TUMBLE(FROM_UNIXTIME(ts), '1m')")
		}
		e, err := c.expr(f.args[0])
		return e, unitSeconds, exprText(f.args[0]), err
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
func literalText(n *litNode) []byte {
	if strings.ContainsAny(n.s, "eE") {
		return nil
	}
	return []byte(n.s)
}

// anyAggregate reports whether the SELECT list has an aggregate: without
// GROUP BY, it keeps one row of them (see addGlobalKey); without one, it
// would keep each record (a row job).
func (c *compiler) anyAggregate(sel *selectStmt) bool {
	for _, it := range sel.items {
		if findAggregate(it.x) != nil {
			return true
		}
	}
	return false
}
