package sqljob

import (
	"strings"
	"unicode/utf8"
)

// The lexer turns a statement into tokens that know where they start and
// end, so that every refusal can point at what it refuses.

type tokKind uint8

const (
	tEOF    tokKind = iota
	tIdent          // a bare word: a name or a keyword
	tQIdent         // a `quoted` name
	tString         // 'text' or "text"
	tNumber         // 12, 1.5, 1e3
	tOp             // punctuation and operators
)

type tok struct {
	kind tokKind
	text string // the value: a name unquoted, a string's content, an operator
	low  string // lower case of text, for words
	pos  int    // byte offset of its first byte
	end  int    // byte offset after it
}

// operators the lexer knows, longest first.
var operators = []string{
	"->>", "<=>", "->", "<=", ">=", "<>", "!=", "||", "&&", "<<", ">>", ":=",
	"(", ")", ",", ".", "*", "+", "-", "/", "%", "=", "<", ">", ";", "!", "|", "&", "^", "~", "?", "@", "{", "}", "[", "]", ":",
}

// lex splits sql into tokens. An unterminated string, quoted name or
// comment, or a character no SQL uses, is an *Error at its place.
func lex(sql string) ([]tok, error) {
	var toks []tok
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case c == '#' || (strings.HasPrefix(sql[i:], "--") && (i+2 == len(sql) || sql[i+2] <= ' ')):
			// -- starts a comment before a space or a control character
			// (a tab, \r), as in MySQL; --1 is minus minus one.
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			continue
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			if strings.HasPrefix(sql[i:], "/*!") || strings.HasPrefix(sql[i:], "/*M!") {
				return nil, errAtPos(sql, i, "syntax error", "MySQL runs the SQL in an executable comment /*! … */: write it without the comment, or leave it out")
			}
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				return nil, errAtPos(sql, i, "syntax error", "a comment /* is never closed with */")
			}
			i += j + 4
			continue
		case isIdentStart(c) || c >= 0x80:
			j := i
			for j < len(sql) && (isIdentPart(sql[j]) || sql[j] >= 0x80) {
				j++
			}
			w := sql[i:j]
			if !utf8.ValidString(w) {
				return nil, errAtPos(sql, i, "syntax error", "the statement is not valid UTF-8")
			}
			if j < len(sql) && sql[j] == '\'' {
				switch lw := strings.ToLower(w); {
				case lw == "x" || lw == "b":
					return nil, errAtPos(sql, i, "syntax error", "hexadecimal and bit literals (%s'…') are not supported: write the value as a number or a string", w)
				case lw == "n" || lw[0] == '_':
					return nil, errAtPos(sql, i, "syntax error", "a character set before a string (%s'…') is not supported: strings are UTF-8; write the string alone", w)
				}
			}
			toks = append(toks, tok{kind: tIdent, text: w, low: strings.ToLower(w), pos: i, end: j})
			i = j
			continue
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9' && !afterName(toks, i)):
			j := lexNumber(sql, i)
			if j == i+1 && c == '0' && j < len(sql) && (sql[j] == 'x' || sql[j] == 'b') {
				return nil, errAtPos(sql, i, "syntax error", "hexadecimal and bit literals (0x…, 0b…) are not supported: write the value as a decimal number or a string")
			}
			if j < len(sql) && isIdentStart(sql[j]) { // 1abc is a name in MySQL; refuse it
				k := j
				for k < len(sql) && isIdentPart(sql[k]) {
					k++
				}
				return nil, errAtPos(sql, i, "syntax error", "%q is neither a number nor a name: quote a name that starts with a digit with backticks (`%s`)", sql[i:k], sql[i:k])
			}
			toks = append(toks, tok{kind: tNumber, text: sql[i:j], low: sql[i:j], pos: i, end: j})
			i = j
			continue
		case c == '`':
			var b strings.Builder
			j := i + 1
			for {
				k := strings.IndexByte(sql[j:], '`')
				if k < 0 {
					return nil, errAtPos(sql, i, "syntax error", "a name quoted with ` is never closed")
				}
				b.WriteString(sql[j : j+k])
				j += k + 1
				if j < len(sql) && sql[j] == '`' { // `` is one `
					b.WriteByte('`')
					j++
					continue
				}
				break
			}
			toks = append(toks, tok{kind: tQIdent, text: b.String(), low: strings.ToLower(b.String()), pos: i, end: j})
			i = j
			continue
		case c == '\'' || c == '"':
			s, j, ok := lexString(sql, i)
			if !ok {
				return nil, errAtPos(sql, i, "syntax error", "a string opened with %c is never closed", c)
			}
			toks = append(toks, tok{kind: tString, text: s, pos: i, end: j})
			i = j
			continue
		}
		op := ""
		for _, o := range operators {
			if strings.HasPrefix(sql[i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			r, _ := utf8.DecodeRuneInString(sql[i:])
			return nil, errAtPos(sql, i, "syntax error", "unexpected character %q", r)
		}
		toks = append(toks, tok{kind: tOp, text: op, low: op, pos: i, end: i + len(op)})
		i += len(op)
	}
	return append(toks, tok{kind: tEOF, pos: len(sql), end: len(sql)}), nil
}

// afterName: a '.' right after a name is a qualifier's dot (t.5 is not t
// followed by 0.5).
func afterName(toks []tok, i int) bool {
	if len(toks) == 0 {
		return false
	}
	t := toks[len(toks)-1]
	return t.end == i && (t.kind == tIdent || t.kind == tQIdent)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func lexNumber(s string, i int) int {
	digits := func(j int) int {
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return j
	}
	j := digits(i)
	if j < len(s) && s[j] == '.' {
		j = digits(j + 1)
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && s[k] >= '0' && s[k] <= '9' {
			j = digits(k)
		}
	}
	return j
}

// lexString reads a string literal as MySQL does (without
// NO_BACKSLASH_ESCAPES): a doubled quote is one, and a backslash escapes
// the next character (\n, \t, \0, \b, \r, \Z and \\ as MySQL; \% and \_
// stay two characters, for LIKE).
func lexString(s string, i int) (string, int, bool) {
	q := s[i]
	var b strings.Builder
	j := i + 1
	for j < len(s) {
		c := s[j]
		switch {
		case c == q:
			if j+1 < len(s) && s[j+1] == q {
				b.WriteByte(q)
				j += 2
				continue
			}
			return b.String(), j + 1, true
		case c == '\\' && j+1 < len(s):
			e := s[j+1]
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case '0':
				b.WriteByte(0)
			case 'Z':
				b.WriteByte(26)
			case '%', '_':
				b.WriteByte('\\')
				b.WriteByte(e)
			default:
				b.WriteByte(e)
			}
			j += 2
			continue
		}
		b.WriteByte(c)
		j++
	}
	return "", j, false
}

// lineCol turns a byte offset into a 1-based line and column (in
// characters).
func lineCol(s string, pos int) (int, int) {
	pos = min(max(pos, 0), len(s))
	line := 1 + strings.Count(s[:pos], "\n")
	col := 1 + utf8.RuneCountInString(s[strings.LastIndex(s[:pos], "\n")+1:pos])
	return line, col
}
