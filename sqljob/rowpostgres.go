package sqljob

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/jmoiron/sqlx"
)

// Row jobs into PostgreSQL: the converters of its column types, and the
// table's check.

// pgRowType is rowSQLType in PostgreSQL: text keys BYTEA (bytes, as
// VARBINARY; see postgresType), _key BYTEA, INTEGER, BIGINT, NUMERIC(p,s),
// VARCHAR(n), TIMESTAMP(p) without time zone (UTC), JSON (kept as written;
// JSONB would rewrite it), and TEXT.
func pgRowType(c Column) string {
	t := c.typ
	if c.Key && t.text() || t.kind == 'b' {
		return "BYTEA"
	}
	switch t.kind {
	case 'i':
		return "INTEGER"
	case 'I':
		return "BIGINT"
	case 'd':
		return fmt.Sprintf("NUMERIC(%d,%d)", t.p, t.s)
	case 'c':
		return fmt.Sprintf("VARCHAR(%d)", t.p)
	case 't':
		return fmt.Sprintf("TIMESTAMP(%d)", t.p)
	case 'j':
		return "JSON"
	}
	return "TEXT"
}

// noNUL refuses text holding a NUL byte (JSON's "\u0000"), which
// PostgreSQL's character types can't hold.
func noNUL(c conv, typ string) conv {
	return func(v *val) (any, error) {
		out, err := c(v)
		if s, ok := out.(string); ok && err == nil && strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("%s holds a NUL byte, which PostgreSQL's %s can't hold; write to a BYTEA column", quoteText([]byte(s)), typ)
		}
		return out, err
	}
}

var pgIntBits = map[string]int{"smallint": 16, "integer": 32, "bigint": 64}

// pgConv is the converter of a PostgreSQL column, or why the column can't
// take a row job's values exactly.
func pgConv(h pgColumn, key bool) (conv, error) {
	typ := strings.ToUpper(h.DataType)
	if h.Generated == "ALWAYS" || h.Identity == "YES" && h.Default == nil {
		return nil, fmt.Errorf("is generated: the job can't write it")
	}
	var c conv
	switch dt := h.DataType; {
	case pgIntBits[dt] > 0:
		c = intConv(pgIntBits[dt], false, typ)
	case dt == "numeric":
		if h.Prec == nil || h.Scale == nil {
			return nil, fmt.Errorf("is NUMERIC without a precision, which keeps a value's own scale; want NUMERIC(p,s)")
		}
		typ = fmt.Sprintf("NUMERIC(%d,%d)", *h.Prec, *h.Scale)
		c = decConv(int(*h.Prec), int(*h.Scale), false, typ)
	case dt == "character varying" || dt == "text":
		n := int64(math.MaxInt32)
		if h.MaxLen != nil {
			n = *h.MaxLen
			typ = fmt.Sprintf("VARCHAR(%d)", n)
		}
		if key && (h.Collation == nil || *h.Collation != "C" && *h.Collation != "POSIX") {
			coll := "the database's default"
			if h.Collation != nil {
				coll = *h.Collation
			}
			return nil, fmt.Errorf("is a key column in collation %s, which may merge keys; want BYTEA (or COLLATE \"C\")", coll)
		}
		c = noNUL(textConv(n, true, false, false, typ), typ)
	case dt == "character":
		return nil, fmt.Errorf("is CHAR(n), which pads values with spaces; want VARCHAR(n) or TEXT")
	case dt == "bytea":
		c = bytesConv(math.MaxInt32, false, typ)
	case dt == "date":
		c = timeConv(-1, typ)
	case dt == "timestamp without time zone":
		p := 6
		if h.TimePrec != nil {
			p = int(*h.TimePrec)
		}
		typ = fmt.Sprintf("TIMESTAMP(%d)", p)
		c = timeConv(p, typ)
	case dt == "timestamp with time zone":
		return nil, fmt.Errorf("is TIMESTAMPTZ, which the session's time zone shows shifted; want TIMESTAMP(p) (microbatch writes UTC)")
	case dt == "json":
		c = noNULEscape(jsonConv(math.MaxInt32, typ))
	case dt == "jsonb":
		return nil, fmt.Errorf("is JSONB, which rewrites the JSON text (key order, spaces, duplicate keys); want JSON, which keeps it as written")
	case dt == "real" || dt == "double precision":
		return nil, fmt.Errorf("is %s, which rounds decimals; want NUMERIC(p,s)", typ)
	default:
		return nil, fmt.Errorf("is %s, a type row jobs don't write (integers, NUMERIC(p,s), VARCHAR/TEXT, BYTEA, DATE, TIMESTAMP and JSON are)", typ)
	}
	if h.Nullable != "YES" {
		c = notNull(c, typ)
	}
	return c, nil
}

// noNULEscape passes JSON text: PostgreSQL's JSON takes "\u0000" (it
// keeps the text) but no NUL byte, which JSON text never holds.
func noNULEscape(c conv) conv {
	return func(v *val) (any, error) {
		out, err := c(v)
		if s, ok := out.(string); ok && err == nil && bytes.IndexByte([]byte(s), 0) >= 0 {
			return nil, fmt.Errorf("the JSON text holds a NUL byte, which PostgreSQL's JSON can't hold")
		}
		return out, err
	}
}

// bindPostgres is checkRowTable in PostgreSQL.
func (q *Query) bindPostgres(ctx context.Context, db *sqlx.DB, bad func(string, ...any) error) ([]conv, error) {
	cols, err := pgColumns(ctx, db, q.table)
	if err != nil {
		return nil, err
	}
	var checks []string
	if err := db.SelectContext(ctx, &checks, `SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(quote_ident(?)) AND contype IN ('c', 'x', 'f')`, q.table); err != nil {
		return nil, fmt.Errorf("reading the constraints of %s: %w", q.table, err)
	}
	if len(checks) > 0 {
		return nil, bad("constraint %s could refuse a row, which would stop the job: drop it and filter in the query's WHERE", checks[0])
	}
	have := map[string]pgColumn{}
	autoInc := map[string]bool{}
	for _, c := range cols {
		have[c.Name] = c
		if c.Identity == "YES" || c.Default != nil && strings.HasPrefix(*c.Default, "nextval(") {
			autoInc[strings.ToLower(c.Name)] = true
		}
	}
	convs := make([]conv, len(q.cols))
	written := map[string]bool{}
	for i, c := range q.cols {
		written[c.Name] = true
		h, ok := have[c.Name]
		if !ok {
			return nil, bad("it has no column %s (names are compared exactly: the job quotes them)", c.Name)
		}
		cv, err := pgConv(h, c.Key)
		if err != nil {
			return nil, bad("column %s %v", c.Name, err)
		}
		convs[i] = cv
	}
	for _, c := range cols {
		if !written[c.Name] && c.Nullable != "YES" && c.Default == nil && c.Identity != "YES" && c.Generated != "ALWAYS" {
			return nil, bad("extra column %s is NOT NULL without a default", c.Name)
		}
	}
	pk, uniques, err := pgUniqueKeys(ctx, db, q.table)
	if err != nil {
		return nil, err
	}
	if q.row.upsert {
		var rest []uniqueKey
		for _, u := range uniques {
			if u.name != "PRIMARY" {
				rest = append(rest, u)
			}
		}
		uniques = rest
	}
	return convs, q.checkKeys(pk, uniques, autoInc, bad)
}
