package sqljob

import (
	"strconv"
	"strings"
)

// exprText prints an expression for plans and messages: keywords and
// functions in lower case, names as written (quoted where they must be),
// parentheses only where precedence needs them — sum(price * qty),
// customer->>'$.id', kind in ('buy', 'view').
func exprText(n node) string {
	var b strings.Builder
	printNode(&b, n, nil)
	return b.String()
}

// printNode writes n; name, when set, prints a column reference (the
// canonical form resolves qualifiers).
func printNode(b *strings.Builder, n node, name func(*colRef) string) {
	switch n := n.(type) {
	case *colRef:
		if name != nil {
			b.WriteString(name(n))
			return
		}
		for i, part := range n.parts {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(quoteName(part))
		}
	case *pathRef:
		printNode(b, n.col, name)
		b.WriteString(n.op)
		b.WriteString(quoteString(n.path))
	case *litNode:
		switch n.k {
		case litStr:
			b.WriteString(quoteString(n.s))
		default:
			b.WriteString(n.s)
		}
	case *unaryNode:
		if n.op == "not" {
			b.WriteString("not ")
		} else {
			b.WriteString(n.op)
		}
		printChild(b, n.x, precUnary(n.op), name)
	case *binaryNode:
		pr := precOf(n.op)
		printChild(b, n.l, pr, name)
		b.WriteString(" " + n.op + " ")
		printChild(b, n.r, pr+1, name)
	case *likeNode:
		printChild(b, n.x, precCmp+1, name)
		b.WriteString(notText(n.not) + " like ")
		printChild(b, n.pat, precCmp+1, name)
	case *inNode:
		printChild(b, n.x, precCmp+1, name)
		b.WriteString(notText(n.not) + " in (")
		printList(b, n.list, name)
		b.WriteByte(')')
	case *betweenNode:
		printChild(b, n.x, precCmp+1, name)
		b.WriteString(notText(n.not) + " between ")
		printChild(b, n.lo, precCmp+1, name)
		b.WriteString(" and ")
		printChild(b, n.hi, precCmp+1, name)
	case *isNode:
		printChild(b, n.x, precCmp+1, name)
		b.WriteString(" is" + notText(n.not) + " " + n.what)
	case *callNode:
		b.WriteString(n.name + "(")
		if n.star {
			b.WriteByte('*')
		}
		if n.distinct {
			b.WriteString("distinct ")
		}
		printList(b, n.args, name)
		b.WriteByte(')')
	case *caseNode:
		b.WriteString("case")
		if n.subject != nil {
			b.WriteByte(' ')
			printNode(b, n.subject, name)
		}
		for _, w := range n.whens {
			b.WriteString(" when ")
			printNode(b, w.cond, name)
			b.WriteString(" then ")
			printNode(b, w.val, name)
		}
		if n.els != nil {
			b.WriteString(" else ")
			printNode(b, n.els, name)
		}
		b.WriteString(" end")
	case *castNode:
		b.WriteString("cast(")
		printNode(b, n.x, name)
		b.WriteString(" as " + strings.ToLower(n.typ))
		if len(n.args) > 0 {
			b.WriteByte('(')
			for i, a := range n.args {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(strconv.Itoa(a))
			}
			b.WriteByte(')')
		}
		b.WriteByte(')')
	}
}

func notText(not bool) string {
	if not {
		return " not"
	}
	return ""
}

func printList(b *strings.Builder, list []node, name func(*colRef) string) {
	for i, x := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		printNode(b, x, name)
	}
}

// printChild parenthesises x when it binds looser than its place needs.
func printChild(b *strings.Builder, x node, need int, name func(*colRef) string) {
	if prec(x) < need {
		b.WriteByte('(')
		printNode(b, x, name)
		b.WriteByte(')')
		return
	}
	printNode(b, x, name)
}

const (
	precOr = iota + 1
	precXor
	precAnd
	precNot
	precCmp
	precBit
	precAdd
	precMul
	precCaret
	precUnaryMinus
	precPrimary
)

func precOf(op string) int {
	switch op {
	case "or", "||":
		return precOr
	case "xor":
		return precXor
	case "and", "&&":
		return precAnd
	case "|", "&", "<<", ">>":
		return precBit
	case "+", "-":
		return precAdd
	case "*", "/", "div", "%", "mod":
		return precMul
	case "^":
		return precCaret
	}
	return precCmp
}

func precUnary(op string) int {
	if op == "not" {
		return precNot
	}
	return precUnaryMinus
}

func prec(n node) int {
	switch n := n.(type) {
	case *binaryNode:
		return precOf(n.op)
	case *unaryNode:
		return precUnary(n.op)
	case *likeNode, *inNode, *betweenNode, *isNode:
		return precCmp
	}
	return precPrimary
}

func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "\x00", `\0`).Replace(s) + "'"
}

// quoteName quotes a name that isn't a plain, unreserved word.
func quoteName(s string) string {
	plain := s != "" && !reserved[strings.ToLower(s)] && !(s[0] >= '0' && s[0] <= '9')
	for i := 0; i < len(s) && plain; i++ {
		plain = isIdentPart(s[i])
	}
	if plain {
		return s
	}
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}
