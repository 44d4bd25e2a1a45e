package sqljob

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// colType is the type a row job's column gets in a table microbatch
// creates, from its expression: a CAST's type, a record field's, else
// text holding the value's text.
type colType struct {
	kind byte // 'x' text, 'b' bytes (_key), 'i' INT, 'I' BIGINT, 'd' DECIMAL(p,s), 'c' VARCHAR(n), 't' DATETIME(p), 'j' JSON
	p, s int
}

// text reports whether a key column of this type is kept as bytes
// (VARBINARY), whose width the key's other columns share.
func (t colType) text() bool { return t.kind == 'x' || t.kind == 'b' || t.kind == 'c' || t.kind == 'j' }

// maxText is the most bytes of a MEDIUMTEXT or MEDIUMBLOB: a Kafka record
// (1 MiB by default) fits whole.
const maxText = 1<<24 - 1

func (c *compiler) staticType(x node) colType {
	switch n := x.(type) {
	case *castNode:
		var p, s int
		if len(n.args) > 0 {
			p = n.args[0]
		}
		if len(n.args) > 1 {
			s = n.args[1]
		}
		t, msg := newCastType(strings.ToLower(n.typ), p, s, len(n.args) > 0, len(n.args) > 1)
		if msg != "" {
			return colType{kind: 'x'} // c.expr refuses it
		}
		switch t.kind {
		case 'S':
			return colType{kind: 'I'}
		case 'D':
			return colType{kind: 'd', p: t.p, s: t.s}
		case 'C':
			if t.n >= 0 {
				return colType{kind: 'c', p: t.n}
			}
		case 'T':
			return colType{kind: 't', p: t.p}
		case 'J':
			return colType{kind: 'j'}
		}
	case *colRef:
		switch name, _ := metaName(n); name {
		case metaKey:
			return colType{kind: 'b'}
		case metaPartition:
			return colType{kind: 'i'}
		case metaOffset:
			return colType{kind: 'I'}
		case metaTimestamp:
			return colType{kind: 't', p: 3}
		}
	}
	return colType{kind: 'x'}
}

// rowSQLType is SQLType of a row job's column.
func (q *Query) rowSQLType(c Column) string {
	t := c.typ
	if q.opts.SQLite {
		if t.kind == 'i' || t.kind == 'I' {
			return "INTEGER"
		}
		return "TEXT" // decimals and times as their exact text
	}
	if q.opts.Postgres {
		return pgRowType(c)
	}
	if c.Key && t.text() {
		return fmt.Sprintf("VARBINARY(%d)", q.keyW) // bytes: no collation merges two keys
	}
	switch t.kind {
	case 'b':
		return "MEDIUMBLOB"
	case 'i':
		return "INT"
	case 'I':
		return "BIGINT"
	case 'd':
		return fmt.Sprintf("DECIMAL(%d,%d)", t.p, t.s)
	case 'c':
		return fmt.Sprintf("VARCHAR(%d)", t.p)
	case 't':
		if t.p == 0 {
			return "DATETIME"
		}
		return fmt.Sprintf("DATETIME(%d)", t.p)
	case 'j':
		// MariaDB's JSON is LONGTEXT CHECK (JSON_VALID(…)): the text as
		// written. MySQL's own JSON type rounds numbers to doubles: the
		// table check (mysqlConv) refuses it at start.
		return "JSON"
	}
	return "MEDIUMTEXT"
}

// rowDDL is DDL of a row job: an append's table has no key.
func (q *Query) rowDDL() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (\n", q.quoteIdent(q.table))
	var lines []string
	for _, c := range q.cols {
		null := "NULL"
		if c.Key {
			null = "NOT NULL"
		}
		lines = append(lines, fmt.Sprintf("  %s %s %s", q.quoteIdent(c.Name), q.SQLType(c), null))
	}
	if q.row.upsert {
		var keys []string
		for _, i := range q.keys {
			keys = append(keys, q.quoteIdent(q.cols[i].Name))
		}
		lines = append(lines, fmt.Sprintf("  PRIMARY KEY (%s)", strings.Join(keys, ", ")))
	}
	b.WriteString(strings.Join(lines, ",\n"))
	b.WriteString("\n)")
	if q.dialect() == dMySQL {
		b.WriteString(" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
	}
	return b.String()
}

// rowPlan is Plan of a row job.
func (q *Query) rowPlan() string {
	var b strings.Builder
	fmt.Fprintf(&b, "topic:  %s\ntable:  %s\n", q.topic, q.table)
	if q.row.upsert {
		fmt.Fprintf(&b, "mode:   upsert: one row per key, the latest record's; %s\n", map[bool]string{
			true:  "a tombstone (null value) deletes its key",
			false: "a null value is a dead letter (only a key of _key is deleted by tombstones)"}[q.row.tombstone])
	} else {
		b.WriteString("mode:   append: every record the filter accepts is a row of its own\n")
	}
	fmt.Fprintf(&b, "fields read: %s\n", strings.Join(q.fields, ", "))
	if q.where != nil {
		fmt.Fprintf(&b, "filter: %s\n", q.whereS)
	} else {
		b.WriteString("filter: none\n")
	}
	key := "none"
	if q.row.upsert {
		key = strings.Join(q.KeyColumns(), ", ")
	}
	fmt.Fprintf(&b, "key:    %s\ncolumns:\n", key)
	for _, c := range q.cols {
		rule := "value"
		if c.Key {
			rule = "key"
		}
		fmt.Fprintf(&b, "  %-16s %-14s %-28s %s\n", c.Name, q.SQLType(c), c.Expr, rule)
	}
	var cols, marks []string
	for _, i := range q.row.order {
		cols = append(cols, q.quoteIdent(q.cols[i].Name))
		marks = append(marks, "?")
	}
	ins := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s), (…)", q.quoteIdent(q.table), strings.Join(cols, ", "), strings.Join(marks, ", "))
	if q.row.upsert {
		if q.dialect() != dMySQL {
			ins += fmt.Sprintf(" ON CONFLICT (%s) DO UPDATE SET …", strings.Join(cols[:len(q.keys)], ", "))
		} else {
			ins += " ON DUPLICATE KEY UPDATE …"
		}
		ins += "; a tombstone: DELETE by key"
	}
	fmt.Fprintf(&b, "insert: %s\n        multi-row INSERT, up to %d rows per statement (fewer for wide rows: 30,000 values, about 4 MiB)\n", ins, RowBatch)
	fmt.Fprintf(&b, "DDL:\n%s;\n", q.DDL())
	return b.String()
}

// createdConv converts v to what c holds in the table DDL creates.
func (q *Query) createdConv(c *Column, v *val) (any, error) {
	if v.k == kNull {
		return nil, nil
	}
	t := c.typ
	switch t.kind {
	case 'i', 'I':
		d, err := v.num(c.Expr)
		if err != nil {
			return nil, err
		}
		return d.m, nil // a SIGNED cast or a record field: an integer
	case 'd', 't':
		return string(v.s), nil // the cast's text, at the type's scale
	}
	s, err := valueText(v)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Key && t.text() && len(s) > q.keyW:
		return nil, fmt.Errorf("%d bytes; the key column holds %d", len(s), q.keyW)
	case t.kind != 'b' && !utf8.Valid(s):
		return nil, fmt.Errorf("%s is not valid UTF-8 text", quoteText(s))
	case len(s) > maxText:
		return nil, fmt.Errorf("%d bytes; the column holds %d", len(s), maxText)
	}
	return string(s), nil
}

// valueText is a value's text in a text column: a string's text, a
// number as written (a computed one as its exact decimal), true or
// false, an object or array as its JSON text, a window's start.
func valueText(v *val) ([]byte, error) {
	switch v.k {
	case kStr, kJSON:
		return v.s, nil
	case kNum:
		if v.s != nil {
			return v.s, nil
		}
		return v.n.append(nil), nil
	case kBool:
		return strconv.AppendBool(nil, v.b), nil
	case kTime:
		return time.UnixMilli(v.n.m).UTC().AppendFormat(nil, WindowLayout), nil
	}
	return nil, fmt.Errorf("a %s has no text", v.k)
}

func quoteText(s []byte) string { return (&val{k: kStr, s: s}).show() }

// dateTimeRE is a time's text: MySQL's 'YYYY-MM-DD[ HH:MM:SS[.f]]' (UTC),
// or RFC 3339 with its zone.
var dateTimeRE = regexp.MustCompile(`^([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(Z|[+-][0-9]{2}:[0-9]{2})?)?$`)

// dateTime reads a time's text exactly: a valid date in years 1000 to
// 9999 (and a zone's time moved to UTC); it returns the time and the
// fraction's digits (trailing zeros dropped).
func dateTime(s []byte) (time.Time, string, error) {
	m := dateTimeRE.FindSubmatch(s)
	if m == nil {
		return time.Time{}, "", fmt.Errorf("%s is not a time: want 'YYYY-MM-DD HH:MM:SS[.fff]' (UTC) or RFC 3339", quoteText(s))
	}
	n := func(b []byte) int { x, _ := strconv.Atoi(string(b)); return x }
	y, mo, d := n(m[1]), n(m[2]), n(m[3])
	h, mi, sec := 0, 0, 0
	if m[4] != nil {
		h, mi, sec = n(m[4]), n(m[5]), n(m[6])
	}
	t := time.Date(y, time.Month(mo), d, h, mi, sec, 0, time.UTC)
	if t.Year() != y || int(t.Month()) != mo || t.Day() != d || t.Hour() != h || t.Minute() != mi || t.Second() != sec {
		return time.Time{}, "", fmt.Errorf("%s is not a valid date and time", quoteText(s))
	}
	if z := string(m[8]); z != "" && z != "Z" {
		zh, zm := n([]byte(z[1:3])), n([]byte(z[4:6]))
		off := time.Duration(zh)*time.Hour + time.Duration(zm)*time.Minute
		if zh > 23 || zm > 59 {
			return time.Time{}, "", fmt.Errorf("%s has an invalid zone", quoteText(s))
		}
		if z[0] == '+' {
			off = -off
		}
		t = t.Add(off)
	}
	if t.Year() < 1000 || t.Year() > 9999 {
		return time.Time{}, "", fmt.Errorf("%s is outside the years 1000 to 9999", quoteText(s))
	}
	return t, strings.TrimRight(string(m[7]), "0"), nil
}

// timeText is t with p digits of fraction (frac's, zero-padded): MySQL's
// DATETIME(p) text.
func timeText(t time.Time, frac string, p int) string {
	s := t.Format("2006-01-02 15:04:05")
	if p > 0 {
		s += "." + frac + strings.Repeat("0", p-len(frac))
	}
	return s
}

// castTimeJSON is CAST(a AS DATETIME(p)) and CAST(a AS JSON). A time
// with more digits after the second than p (not zeros) is refused, never
// rounded; a number is not a time here. JSON is the value as JSON text: a
// string quoted, an object or array as written.
func castTimeJSON(a expr, t castType, what string) expr {
	return func(e *env) (val, error) {
		x, err := a(e)
		if err != nil || x.k == kNull {
			return val{}, err
		}
		if t.kind == 'J' {
			var s []byte
			switch x.k {
			case kStr:
				if !utf8.Valid(x.s) {
					return val{}, fmt.Errorf("CAST AS JSON: %s is not valid UTF-8 text", what)
				}
				var b bytes.Buffer
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				enc.Encode(string(x.s))
				s = bytes.TrimRight(b.Bytes(), "\n")
			default:
				if s, err = valueText(&x); err != nil {
					return val{}, fmt.Errorf("CAST AS JSON: %s: %w", what, err)
				}
				s = append([]byte(nil), s...)
			}
			return val{k: kJSON, s: s}, nil
		}
		if x.k != kStr {
			return val{}, fmt.Errorf("CAST AS %s: %s is a %s (%s), not a time's text", t, what, x.k, x.show())
		}
		tm, frac, err := dateTime(x.s)
		if err != nil {
			return val{}, fmt.Errorf("CAST AS %s: %s: %w", t, what, err)
		}
		if len(frac) > t.p {
			return val{}, fmt.Errorf("CAST AS %s: %s is %s, which has more than %d digits after the second (microbatch never rounds)", t, what, x.show(), t.p)
		}
		return strVal([]byte(timeText(tm, frac, t.p))), nil
	}
}
