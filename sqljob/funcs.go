package sqljob

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The scalar functions (BETWEEN, CAST, LOWER, UPPER, CONCAT, SUBSTRING,
// IF) and TUMBLE's time values, as closures over compiled arguments. They
// follow MySQL (strict mode) where MySQL's answer is exact; where MySQL
// would round, truncate or guess (with a warning), the record is
// dead-lettered with the reason instead. Nothing here depends on the
// parser: funcs_wire.go turns parse nodes into these calls.

// staticKind is what an expression yields whatever the record: a string
// (a string literal, CAST(… AS CHAR), LOWER, UPPER, CONCAT, SUBSTRING, or
// IF/CASE/COALESCE whose every branch is a string) or anything else
// (skOther: a field, a number, …). JSON has no schema, so MIN and MAX
// compare strings only when their argument is statically a string.
type staticKind uint8

const (
	skOther staticKind = iota
	skString
	skNull // the NULL literal: no kind of its own (a branch that doesn't decide)
)

// branchKind is the static kind of IF/CASE/COALESCE over branches of
// kinds ks: a string when every branch that isn't NULL is one.
func branchKind(ks ...staticKind) staticKind {
	out := skNull
	for _, k := range ks {
		switch k {
		case skOther:
			return skOther
		case skString:
			out = skString
		}
	}
	return out
}

// strVal is a string value.
func strVal(b []byte) val { return val{k: kStr, s: b} }

// plainNumRE is a number written without an exponent: its text is what
// MySQL prints for the same DECIMAL literal.
var plainNumRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// text is v as MySQL's text of it, for CAST(… AS CHAR) and CONCAT: a
// string as it is; a number as written in the record (or the literal), if
// written without an exponent, or a CAST's result. Other values have no
// text MySQL would agree on, and are refused.
func text(v *val, what string) ([]byte, error) {
	switch v.k {
	case kStr:
		return v.s, nil
	case kNum:
		if v.s == nil {
			return nil, fmt.Errorf("%s is a computed number (%s), whose text MySQL gives with its operands' digits after the point; write CAST(… AS DECIMAL(p,s)) around it", what, v.show())
		}
		if !plainNumRE.Match(v.s) {
			return nil, fmt.Errorf("%s is %s, a number with an exponent, whose text MySQL gives as a double; write CAST(%s AS DECIMAL(p,s))", what, v.show(), what)
		}
		if v.s[0] == '-' && strings.Trim(string(v.s[1:]), "0.") == "" {
			return v.s[1:], nil // -0.0 is 0.0
		}
		return v.s, nil
	case kBool:
		return nil, fmt.Errorf("%s is a boolean (%s); for its text write CASE WHEN %s THEN 'true' ELSE 'false' END", what, v.show(), what)
	}
	return nil, fmt.Errorf("%s is a %s (%s), which has no text here", what, v.k, v.show())
}

// caseMapped reports whether LOWER and UPPER may map r: it has no case
// (maps to itself both ways), or it is in the ranges whose every letter
// the differential test against MariaDB checks (TestFuncsAgainstMariaDB):
// ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic. Elsewhere MySQL's
// collations and Unicode's case tables part ways often enough that a
// string with such a letter is dead-lettered rather than mapped.
func caseMapped(r rune) bool {
	switch {
	case r < 0x180, r >= 0x370 && r < 0x500:
		return !caseRefused[r]
	}
	return unicode.ToLower(r) == r && unicode.ToUpper(r) == r
}

// caseRefused are the letters of the checked ranges whose mapping MariaDB
// (utf8mb4_bin) doesn't share with Unicode's simple case mapping.
var caseRefused = map[rune]bool{}

func init() {
	for _, r := range "ͰͱͲͳͶͷͻͼͽͿϏϗϘϙϲϳϴϵϷϸϹϺϻϽϾϿҊҋӀӅӆӉӊӍӎӏӶӷӺӻӼӽӾӿ" {
		caseRefused[r] = true
	}
}

// caseExpr is LOWER (upper false) or UPPER of a: Unicode's simple case
// mapping, one character for one (ß stays ß, as in MySQL).
func caseMap(a expr, upper bool, what string) expr {
	name := "LOWER"
	m := unicode.ToLower
	if upper {
		name, m = "UPPER", unicode.ToUpper
	}
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		if x.k != kStr {
			return val{}, fmt.Errorf("%s takes a string; %s is a %s (%s): write %s(CAST(%s AS CHAR))", name, what, x.k, x.show(), name, what)
		}
		out := make([]byte, 0, len(x.s))
		for i := 0; i < len(x.s); {
			r, n := utf8.DecodeRune(x.s[i:])
			if r < utf8.RuneSelf {
				if upper && 'a' <= r && r <= 'z' {
					r -= 'a' - 'A'
				} else if !upper && 'A' <= r && r <= 'Z' {
					r += 'a' - 'A'
				}
				out = append(out, byte(r))
				i += n
				continue
			}
			if r == utf8.RuneError && n == 1 {
				return val{}, fmt.Errorf("%s: %s is not UTF-8 (%s)", name, what, x.show())
			}
			if !caseMapped(r) {
				return val{}, fmt.Errorf("%s: %s holds %q (U+%04X), a letter whose case MySQL maps differently from Unicode or not at all; only letters of Latin, Greek and Cyrillic are mapped", name, what, r, r)
			}
			out = utf8.AppendRune(out, m(r))
			i += n
		}
		return strVal(out), nil
	}
}

func lowerExpr(a expr, what string) expr { return caseMap(a, false, what) }
func upperExpr(a expr, what string) expr { return caseMap(a, true, what) }

// concatExpr is CONCAT(args…): NULL if any is NULL, else the texts.
func concatExpr(args []expr, whats []string) expr {
	return func(e *env) (val, error) {
		var out []byte
		null := false
		for i, a := range args {
			x, err := a(e)
			if err != nil {
				return val{}, err
			}
			if x.k == kNull {
				null = true
				continue
			}
			t, err := text(&x, whats[i])
			if err != nil {
				return val{}, fmt.Errorf("CONCAT: %w", err)
			}
			out = append(out, t...)
		}
		if null {
			return val{}, nil
		}
		if out == nil {
			out = []byte{}
		}
		return strVal(out), nil
	}
}

// intArg is x as an int64 argument of name (SUBSTRING's position and
// length): a number without digits after the point.
func intArg(x *val, name, what string) (int64, error) {
	d, err := x.num(what)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if d.sc != 0 {
		return 0, fmt.Errorf("%s: %s is %s, not an integer (MySQL would round it)", name, what, d)
	}
	return d.m, nil
}

// substringExpr is SUBSTRING(s, pos[, n]) (n nil if absent): characters
// of s from pos (1-based; negative counts from the end; 0 gives ”), n of
// them or to the end.
func substringExpr(s, pos, n expr, what, posS, nS string) expr {
	return func(e *env) (val, error) {
		x, err := s(e)
		if err != nil {
			return val{}, err
		}
		p, err := pos(e)
		if err != nil {
			return val{}, err
		}
		var l val
		if n != nil {
			if l, err = n(e); err != nil {
				return val{}, err
			}
		}
		if x.k == kNull || p.k == kNull || (n != nil && l.k == kNull) {
			return val{}, nil
		}
		if x.k != kStr {
			return val{}, fmt.Errorf("SUBSTRING takes a string; %s is a %s (%s): write SUBSTRING(CAST(%s AS CHAR), …)", what, x.k, x.show(), what)
		}
		if !utf8.Valid(x.s) {
			return val{}, fmt.Errorf("SUBSTRING: %s is not UTF-8 (%s): its characters can't be counted", what, x.show())
		}
		start, err := intArg(&p, "SUBSTRING", posS)
		if err != nil {
			return val{}, err
		}
		count := int64(-1)
		if n != nil {
			if count, err = intArg(&l, "SUBSTRING", nS); err != nil {
				return val{}, err
			}
			if count <= 0 {
				return strVal([]byte{}), nil
			}
		}
		chars := int64(utf8.RuneCount(x.s))
		switch {
		case start == 0 || start > chars || -start > chars:
			return strVal([]byte{}), nil
		case start < 0:
			start = chars + start // 0-based
		default:
			start--
		}
		i := 0
		for range start {
			_, w := utf8.DecodeRune(x.s[i:])
			i += w
		}
		j := len(x.s)
		if count >= 0 && count < chars-start {
			j = i
			for range count {
				_, w := utf8.DecodeRune(x.s[j:])
				j += w
			}
		}
		return strVal(x.s[i:j:j]), nil
	}
}

// ifExpr is IF(cond, a, b): a when cond is true; b when it is false or
// NULL.
func ifExpr(cond, a, b expr, condText string) expr {
	return func(e *env) (val, error) {
		c, err := cond(e)
		if err != nil {
			return val{}, err
		}
		t, null, err := truth(&c, condText)
		if err != nil {
			return val{}, fmt.Errorf("IF: %w", err)
		}
		if t && !null {
			return a(e)
		}
		return b(e)
	}
}

// betweenExpr is x [NOT] BETWEEN lo AND hi: lo <= x AND x <= hi, three-
// valued (false if either comparison is false, else NULL if a value is
// NULL).
func betweenExpr(x, lo, hi expr, neg bool, what string) expr {
	return func(e *env) (val, error) {
		v, err := x(e)
		if err != nil || v.k == kNull {
			return val{}, err
		}
		l, err := lo(e)
		if err != nil {
			return val{}, err
		}
		h, err := hi(e)
		if err != nil {
			return val{}, err
		}
		null, ok := false, true
		if l.k == kNull {
			null = true
		} else {
			r, err := compare(&l, &v, what)
			if err != nil {
				return val{}, err
			}
			ok = r <= 0
		}
		if h.k == kNull {
			null = true
		} else {
			r, err := compare(&v, &h, what)
			if err != nil {
				return val{}, err
			}
			ok = ok && r <= 0
		}
		switch {
		case !ok:
			return val{k: kBool, b: neg}, nil
		case null:
			return val{}, nil
		}
		return val{k: kBool, b: !neg}, nil
	}
}

// castType is the type of a CAST.
type castType struct {
	kind byte // 'S' SIGNED, 'D' DECIMAL(p,s), 'C' CHAR or CHAR(n), 'T' DATETIME(p), 'J' JSON
	p, s int
	n    int // CHAR(n): at most n characters; -1 for CHAR
}

func (t castType) String() string {
	switch t.kind {
	case 'S':
		return "SIGNED"
	case 'D':
		return fmt.Sprintf("DECIMAL(%d,%d)", t.p, t.s)
	case 'T':
		if t.p == 0 {
			return "DATETIME"
		}
		return fmt.Sprintf("DATETIME(%d)", t.p)
	case 'J':
		return "JSON"
	}
	if t.n >= 0 {
		return fmt.Sprintf("CHAR(%d)", t.n)
	}
	return "CHAR"
}

// maxCastPrec is the most digits a DECIMAL cast may have: the columns
// hold DECIMAL(38,9).
const maxCastPrec = 38

// newCastType is the type name (lower case) with its length p and scale
// s as written (hasP, hasS), with MySQL's defaults: DECIMAL is
// DECIMAL(10,0), DECIMAL(p) is DECIMAL(p,0). It refuses, with what to
// write instead, a type or size it doesn't support.
func newCastType(name string, p, s int, hasP, hasS bool) (castType, string) {
	switch name {
	case "signed", "signed integer":
		return castType{kind: 'S'}, ""
	case "unsigned", "unsigned integer":
		return castType{}, "CAST AS UNSIGNED is not supported: write CAST(x AS SIGNED) (and WHERE x >= 0 to drop negatives)"
	case "decimal":
		t := castType{kind: 'D', p: 10}
		if hasP {
			t.p = p
		}
		if hasS {
			t.s = s
		}
		switch {
		case t.p < 1 || t.p > 65 || t.s > 30 || t.s > t.p:
			return castType{}, fmt.Sprintf("DECIMAL(%d,%d) is not a MySQL type: want 1 ≤ p ≤ 65 and 0 ≤ s ≤ min(p, 30)", t.p, t.s)
		case t.p > maxCastPrec || t.s > maxScale:
			return castType{}, fmt.Sprintf("DECIMAL(%d,%d) is more than the columns hold (DECIMAL(38,9)): want p ≤ %d and s ≤ %d", t.p, t.s, maxCastPrec, maxScale)
		}
		return t, ""
	case "char":
		t := castType{kind: 'C', n: -1}
		if hasP {
			t.n = p
		}
		return t, ""
	case "datetime":
		if hasS || p > 6 {
			return castType{}, "DATETIME(p) takes one size, 0 to 6 digits after the second"
		}
		return castType{kind: 'T', p: p}, ""
	case "json":
		if hasP {
			return castType{}, "JSON takes no size"
		}
		return castType{kind: 'J'}, ""
	}
	return castType{}, fmt.Sprintf("CAST AS %s is not supported: SIGNED, DECIMAL(p,s), CHAR, DATETIME(3) and JSON are", name)
}

// Kind is the static kind of a CAST to t.
func (t castType) staticKind() staticKind {
	if t.kind == 'C' {
		return skString
	}
	return skOther
}

var (
	intTextRE = regexp.MustCompile(`^-?[0-9]+$`)
	decTextRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)
)

// castExpr is CAST(a AS t). A value MySQL would round, truncate or clamp
// (with a warning) is refused instead: 1.5 AS SIGNED, 1.25 AS
// DECIMAL(5,1), 'abc' AS CHAR(2), '12x' AS SIGNED.
func castExpr(a expr, t castType, what string) expr {
	if t.kind == 'T' || t.kind == 'J' {
		return castTimeJSON(a, t, what)
	}
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		switch t.kind {
		case 'C':
			s, err := text(&x, what)
			if err != nil {
				return val{}, fmt.Errorf("CAST AS %s: %w", t, err)
			}
			if t.n >= 0 && utf8.RuneCount(s) > t.n {
				return val{}, fmt.Errorf("CAST AS %s: %s is %d characters (%s); MySQL would cut it", t, what, utf8.RuneCount(s), x.show())
			}
			return strVal(s), nil
		case 'S':
			var d dec
			switch x.k {
			case kNum:
				if d, err = x.num(what); err != nil {
					return val{}, fmt.Errorf("CAST AS SIGNED: %w", err)
				}
			case kStr:
				if !intTextRE.Match(x.s) {
					return val{}, fmt.Errorf("CAST AS SIGNED: %s is %s, not an integer's text", what, x.show())
				}
				n, err := strconv.ParseInt(string(x.s), 10, 64)
				if err != nil {
					return val{}, fmt.Errorf("CAST AS SIGNED: %s is %s, out of the range of a BIGINT", what, x.show())
				}
				d = dec{m: n}
			case kBool:
				if x.b {
					d.m = 1
				}
			default:
				return val{}, fmt.Errorf("CAST AS SIGNED: %s is a %s (%s)", what, x.k, x.show())
			}
			if d.sc != 0 {
				return val{}, fmt.Errorf("CAST AS SIGNED: %s is %s, which has digits after the point (MySQL would round it; microbatch never rounds)", what, d)
			}
			v := numVal(d)
			v.s = strconv.AppendInt(nil, d.m, 10)
			return v, nil
		}
		var d dec
		switch x.k {
		case kNum:
			if d, err = x.num(what); err != nil {
				return val{}, fmt.Errorf("CAST AS %s: %w", t, err)
			}
		case kStr:
			if !decTextRE.Match(x.s) {
				return val{}, fmt.Errorf("CAST AS %s: %s is %s, not a decimal's text (digits, an optional point and digits)", t, what, x.show())
			}
			if d, err = parseDec(x.s); err != nil {
				return val{}, fmt.Errorf("CAST AS %s: %w", t, err)
			}
		default:
			return val{}, fmt.Errorf("CAST AS %s: %s is a %s (%s)", t, what, x.k, x.show())
		}
		d = d.trim()
		if int(d.sc) > t.s {
			return val{}, fmt.Errorf("CAST AS %s: %s is %s, which has more than %d digits after the point (MySQL would round it; microbatch never rounds)", t, what, d, t.s)
		}
		m, ok := d.scaleTo(uint8(t.s))
		if !ok || len(strconv.FormatInt(abs(m), 10)) > t.p {
			return val{}, fmt.Errorf("CAST AS %s: %s is %s, out of the type's range (MySQL would clamp it)", t, what, d)
		}
		v := numVal(d)
		v.s = dec{m: m, sc: uint8(t.s)}.append(nil)
		return v, nil
	}
}

// timeUnit is how TUMBLE reads a number: epoch milliseconds, or epoch
// seconds (TUMBLE(FROM_UNIXTIME(ts), …)).
type timeUnit uint8

const (
	unitMillis timeUnit = iota
	unitSeconds
)

// minEpochMillis is the least epoch-milliseconds value TUMBLE takes:
// 1e11, 1973-03-03 09:46:40 UTC. A smaller number is most likely epoch
// seconds (1e11 seconds is the year 5138), which as milliseconds would
// silently land in January 1970.
const minEpochMillis = 100_000_000_000

// maxEpochSeconds is the most epoch seconds FROM_UNIXTIME takes: a larger
// number is most likely milliseconds.
const maxEpochSeconds = minEpochMillis

// mysqlTimeLayout is MySQL's DATETIME text, read as UTC.
const mysqlTimeLayout = "2006-01-02 15:04:05.999999999"

// tumble computes the start of a's window of size ms: a is an integer of
// unit (epoch milliseconds from 1973-03-03, or epoch seconds), an RFC
// 3339 time, or MySQL's 'YYYY-MM-DD HH:MM:SS[.fff]' in UTC.
func tumble(a expr, size int64, unit timeUnit, what string) expr {
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		var ms int64
		switch {
		case x.k == kNum && unit == unitSeconds:
			d, err := x.num(what)
			if err != nil {
				return val{}, fmt.Errorf("FROM_UNIXTIME: %w", err)
			}
			if d.m < 0 || d.cmp(dec{m: maxEpochSeconds}) >= 0 {
				return val{}, fmt.Errorf("FROM_UNIXTIME: %s is %s, not epoch seconds from 1970 to the year 5138 (for epoch milliseconds write TUMBLE(%s, …))", what, x.show(), what)
			}
			// Whole milliseconds, rounded down: the window is the same,
			// sizes being whole milliseconds.
			if d.sc <= 3 {
				ms = d.m * pow10[3-d.sc]
			} else {
				ms = d.m / pow10[d.sc-3]
			}
		case x.k == kNum:
			d, err := x.num(what)
			if err != nil {
				return val{}, err
			}
			if d.sc != 0 {
				return val{}, fmt.Errorf("TUMBLE: %s is %s, not whole epoch milliseconds", what, x.show())
			}
			if d.m < minEpochMillis {
				return val{}, fmt.Errorf("TUMBLE: %s is %s, which as epoch milliseconds is before 1973-03-03 (%s): for epoch seconds write TUMBLE(FROM_UNIXTIME(%s), …)", what, x.show(), time.UnixMilli(d.m).UTC().Format("2006-01-02 15:04:05.000"), what)
			}
			ms = d.m
		case x.k == kStr && unit == unitSeconds:
			return val{}, fmt.Errorf("FROM_UNIXTIME: %s is a string (%s), not epoch seconds (write TUMBLE(%s, …) for a time's text)", what, x.show(), what)
		case x.k == kStr:
			t, err := time.Parse(time.RFC3339Nano, string(x.s))
			if err != nil {
				if t, err = time.Parse(mysqlTimeLayout, string(x.s)); err != nil {
					return val{}, fmt.Errorf("TUMBLE: %s is %s, neither an RFC 3339 time nor 'YYYY-MM-DD HH:MM:SS[.fff]' (UTC)", what, x.show())
				}
			}
			ms = t.UnixMilli()
		default:
			return val{}, fmt.Errorf("TUMBLE: %s is a %s (%s), neither epoch milliseconds nor a time's text", what, x.k, x.show())
		}
		// DATETIME holds years 1000 to 9999.
		if ms < -30610224000000 || ms > 253402300799999 {
			return val{}, fmt.Errorf("TUMBLE: %s is %s, outside years 1000–9999 (epoch microseconds? TUMBLE takes milliseconds)", what, x.show())
		}
		start := ms - ms%size
		if ms%size < 0 {
			start -= size
		}
		return timeVal(start), nil
	}
}
