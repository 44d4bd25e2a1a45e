package sqljob

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"
)

// Converters of a row job into an existing table's columns: each value
// is converted to the column's type exactly, or the record is refused
// with the reason — never truncated, rounded, clamped or zero-filled, as
// a server whose sql_mode is not strict would do.

// numText reads v as a number's exact digits: neg, the integer digits
// without leading zeros ("" for 0) and the fraction's without trailing
// zeros. A string is a number when it is one's plain text
// (-12.50); true and false are 1 and 0.
func numText(v *val) (neg bool, ip, fp string, err error) {
	var s string
	switch v.k {
	case kNum:
		if v.s != nil && plainNumRE.Match(v.s) {
			s = string(v.s)
		} else {
			d, err := v.num("the value")
			if err != nil {
				return false, "", "", err
			}
			s = d.String()
		}
	case kStr:
		if !plainNumRE.Match(v.s) {
			return false, "", "", fmt.Errorf("%s is not a number", v.show())
		}
		s = string(v.s)
	case kBool:
		if v.b {
			return false, "1", "", nil
		}
		return false, "", "", nil
	default:
		return false, "", "", fmt.Errorf("a %s (%s) is not a number", v.k, v.show())
	}
	if s[0] == '-' {
		neg, s = true, s[1:]
	}
	ip, fp, _ = strings.Cut(s, ".")
	ip, fp = strings.TrimLeft(ip, "0"), strings.TrimRight(fp, "0")
	if ip == "" && fp == "" {
		neg = false // -0 is 0
	}
	return neg, ip, fp, nil
}

// intConv converts to an integer column of bits (8 to 64), signed or not.
func intConv(bits int, unsigned bool, typ string) conv {
	lo, hi := new(big.Int), new(big.Int)
	if unsigned {
		hi.Lsh(big.NewInt(1), uint(bits)).Sub(hi, big.NewInt(1))
	} else {
		hi.Lsh(big.NewInt(1), uint(bits-1)).Sub(hi, big.NewInt(1))
		lo.Neg(hi).Sub(lo, big.NewInt(1))
	}
	return func(v *val) (any, error) {
		if v.k == kNull {
			return nil, nil
		}
		neg, ip, fp, err := numText(v)
		if err != nil {
			return nil, fmt.Errorf("%v; the column is %s", err, typ)
		}
		if fp != "" {
			return nil, fmt.Errorf("%s has digits after the point; the column is %s (microbatch never rounds)", v.show(), typ)
		}
		n, ok := new(big.Int).SetString("0"+ip, 10)
		if neg {
			n.Neg(n)
		}
		if !ok || n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
			return nil, fmt.Errorf("%s is out of the range of %s (%s to %s)", v.show(), typ, lo, hi)
		}
		if n.IsInt64() {
			return n.Int64(), nil
		}
		return n.String(), nil // BIGINT UNSIGNED past int64: its text
	}
}

// decConv converts to DECIMAL(p,s).
func decConv(p, s int, unsigned bool, typ string) conv {
	return func(v *val) (any, error) {
		if v.k == kNull {
			return nil, nil
		}
		neg, ip, fp, err := numText(v)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%v; the column is %s", err, typ)
		case len(fp) > s:
			return nil, fmt.Errorf("%s has more than %d digits after the point; the column is %s (microbatch never rounds)", v.show(), s, typ)
		case len(ip) > p-s:
			return nil, fmt.Errorf("%s has more than %d digits before the point; the column is %s", v.show(), p-s, typ)
		case neg && unsigned:
			return nil, fmt.Errorf("%s is negative; the column is %s", v.show(), typ)
		}
		// The column's own text: s digits after the point, as the
		// server gives the value back ("1.5" is "1.50" in DECIMAL(10,2)),
		// and no negative zero.
		t := ip
		if t == "" {
			t = "0"
		}
		if s > 0 {
			t += "." + fp + strings.Repeat("0", s-len(fp))
		}
		if neg && strings.Trim(t, "0.") != "" {
			t = "-" + t
		}
		return t, nil
	}
}

// textConv converts to a character column: valid UTF-8 (without
// characters past U+FFFF for utf8mb3) of at most n characters (chars) or
// n bytes; a CHAR (fixed) or a key refuses trailing spaces, which the
// column drops when read, or its collation ignores in comparing keys.
func textConv(n int64, chars, mb3, noTrailingSpace bool, typ string) conv {
	return func(v *val) (any, error) {
		if v.k == kNull {
			return nil, nil
		}
		s, err := valueText(v)
		if err != nil {
			return nil, fmt.Errorf("%v; the column is %s", err, typ)
		}
		if !utf8.Valid(s) {
			return nil, fmt.Errorf("%s is not valid UTF-8 text; the column is %s", quoteText(s), typ)
		}
		if mb3 {
			for _, r := range string(s) {
				if r > 0xFFFF {
					return nil, fmt.Errorf("%s has the character %U, which the column's utf8mb3 can't hold", quoteText(s), r)
				}
			}
		}
		l, unit := int64(len(s)), "bytes"
		if chars {
			l, unit = int64(utf8.RuneCount(s)), "characters"
		}
		if l > n {
			return nil, fmt.Errorf("%s is %d %s; the column is %s (microbatch never truncates)", quoteText(s), l, unit, typ)
		}
		if noTrailingSpace && len(s) > 0 && s[len(s)-1] == ' ' {
			return nil, fmt.Errorf("%s ends with a space, which the column (%s) drops or ignores; write to a VARBINARY column", quoteText(s), typ)
		}
		return string(s), nil
	}
}

// bytesConv converts to a binary column of at most n bytes (exactly n
// for BINARY(n), which pads a shorter value with zero bytes).
func bytesConv(n int64, fixed bool, typ string) conv {
	return func(v *val) (any, error) {
		if v.k == kNull {
			return nil, nil
		}
		s, err := valueText(v)
		if err != nil {
			return nil, fmt.Errorf("%v; the column is %s", err, typ)
		}
		switch l := int64(len(s)); {
		case l > n:
			return nil, fmt.Errorf("%s is %d bytes; the column is %s (microbatch never truncates)", quoteText(s), l, typ)
		case fixed && l != n:
			return nil, fmt.Errorf("%s is %d bytes; the column is %s, which would pad it with zero bytes", quoteText(s), l, typ)
		}
		return string(s), nil
	}
}

// timeConv converts to DATE (p < 0) or DATETIME(p).
func timeConv(p int, typ string) conv {
	return func(v *val) (any, error) {
		if v.k == kNull {
			return nil, nil
		}
		if v.k != kStr {
			return nil, fmt.Errorf("a %s (%s) is not a time's text; the column is %s", v.k, v.show(), typ)
		}
		t, frac, err := dateTime(v.s)
		if err != nil {
			return nil, fmt.Errorf("%v; the column is %s", err, typ)
		}
		if p < 0 {
			if t.Hour() != 0 || t.Minute() != 0 || t.Second() != 0 || frac != "" {
				return nil, fmt.Errorf("%s has a time of day; the column is %s", v.show(), typ)
			}
			return t.Format("2006-01-02"), nil
		}
		if len(frac) > p {
			return nil, fmt.Errorf("%s has more than %d digits after the second; the column is %s (microbatch never rounds)", v.show(), p, typ)
		}
		return timeText(t, frac, p), nil
	}
}

// jsonConv converts to a JSON column (MariaDB: a text column whose CHECK
// is JSON_VALID): the value as JSON text, as CAST(x AS JSON).
func jsonConv(n int64, typ string) conv {
	cast := castTimeJSON(func(e *env) (val, error) { return e.sc.f[0], nil }, castType{kind: 'J'}, "the value")
	return func(v *val) (any, error) {
		if v.k == kNull {
			return nil, nil
		}
		var e env
		e.sc.f = []val{*v}
		j, err := cast(&e)
		if err != nil {
			return nil, err
		}
		if int64(len(j.s)) > n {
			return nil, fmt.Errorf("%d bytes of JSON; the column is %s", len(j.s), typ)
		}
		return string(j.s), nil
	}
}

// notNull refuses NULL into a NOT NULL column (an explicit NULL fails
// the whole statement in strict mode, default or not).
func notNull(c conv, typ string) conv {
	return func(v *val) (any, error) {
		if v.k == kNull {
			return nil, fmt.Errorf("the value is null or missing; the column is %s NOT NULL", typ)
		}
		return c(v)
	}
}

// mysqlColumn is a column of information_schema.COLUMNS.
type mysqlColumn struct {
	Name      string  `db:"COLUMN_NAME"`
	DataType  string  `db:"DATA_TYPE"`
	ColType   string  `db:"COLUMN_TYPE"`
	Scale     *int64  `db:"NUMERIC_SCALE"`
	TimePrec  *int64  `db:"DATETIME_PRECISION"`
	Prec      *int64  `db:"NUMERIC_PRECISION"`
	MaxLen    *int64  `db:"CHARACTER_MAXIMUM_LENGTH"`
	Charset   *string `db:"CHARACTER_SET_NAME"`
	Collation *string `db:"COLLATION_NAME"`
	Nullable  string  `db:"IS_NULLABLE"`
	Default   *string `db:"COLUMN_DEFAULT"`
	Key       string  `db:"COLUMN_KEY"`
	Extra     string  `db:"EXTRA"`
}

// mysqlColumns reads table's columns; a table without any does not exist.
func mysqlColumns(ctx context.Context, db *sqlx.DB, table string) ([]mysqlColumn, error) {
	var cols []mysqlColumn
	err := db.SelectContext(ctx, &cols, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_SCALE, DATETIME_PRECISION, NUMERIC_PRECISION, CHARACTER_MAXIMUM_LENGTH,
		CHARACTER_SET_NAME, COLLATION_NAME, IS_NULLABLE, COLUMN_DEFAULT, COLUMN_KEY, EXTRA
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s does not exist", table)
	}
	return cols, nil
}

// sqliteColumn is a column of pragma_table_info.
type sqliteColumn struct {
	CID     int     `db:"cid"`
	Name    string  `db:"name"`
	Type    string  `db:"type"`
	NotNull int     `db:"notnull"`
	Default *string `db:"dflt_value"`
	PK      int     `db:"pk"`
}

// sqliteColumns reads table's columns; a table without any does not exist.
func sqliteColumns(ctx context.Context, db *sqlx.DB, table string) ([]sqliteColumn, error) {
	var cols []sqliteColumn
	if err := db.SelectContext(ctx, &cols, "SELECT cid, name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?)", table); err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s does not exist", table)
	}
	return cols, nil
}

var textSizes = map[string]int64{"tinytext": 255, "text": 65535, "mediumtext": 1<<24 - 1, "longtext": math.MaxUint32,
	"tinyblob": 255, "blob": 65535, "mediumblob": 1<<24 - 1, "longblob": math.MaxUint32}

var intBits = map[string]int{"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}

// mysqlConv is the converter of a MySQL/MariaDB column, or why the
// column can't take a row job's values exactly.
func mysqlConv(h mysqlColumn, key, isJSON bool) (conv, error) {
	dt := strings.ToLower(h.DataType)
	typ := strings.ToUpper(h.ColType)
	unsigned := strings.Contains(strings.ToLower(h.ColType), "unsigned")
	// VIRTUAL GENERATED, STORED GENERATED (MySQL), PERSISTENT (MariaDB);
	// not MySQL's DEFAULT_GENERATED, an expression default the job writes
	// over.
	if extra := strings.ToUpper(h.Extra); strings.Contains(extra, "VIRTUAL") || strings.Contains(extra, "STORED") || strings.Contains(extra, "PERSISTENT") {
		return nil, fmt.Errorf("is generated (%s): the job can't write it", h.Extra)
	}
	n := int64(0)
	if h.MaxLen != nil {
		n = *h.MaxLen
	}
	var c conv
	switch {
	case dt == "json":
		// MySQL's own JSON type (MariaDB's JSON is LONGTEXT): it stores
		// numbers with a fraction as doubles, and rewrites key order and
		// duplicates; 0.10000000000000000001 would be kept as 0.1.
		return nil, fmt.Errorf("is MySQL's JSON, which rounds numbers to doubles and rewrites the text; want LONGTEXT CHECK (JSON_VALID(…)) (MariaDB's JSON)")
	case isJSON:
		c = jsonConv(textSizes[dt], typ)
	case intBits[dt] > 0:
		c = intConv(intBits[dt], unsigned, typ)
	case dt == "decimal" || dt == "numeric":
		if h.Prec == nil || h.Scale == nil {
			return nil, fmt.Errorf("is %s without a precision", typ)
		}
		c = decConv(int(*h.Prec), int(*h.Scale), unsigned, typ)
	case dt == "char" || dt == "varchar" || textSizes[dt] > 0 && strings.HasSuffix(dt, "text"):
		cs := ""
		if h.Charset != nil {
			cs = strings.ToLower(*h.Charset)
		}
		if cs != "utf8mb4" && cs != "utf8mb3" && cs != "utf8" {
			return nil, fmt.Errorf("is %s in character set %s; want utf8mb4 (or VARBINARY for bytes)", typ, cs)
		}
		if key && (h.Collation == nil || !strings.HasSuffix(strings.ToLower(*h.Collation), "_bin")) {
			coll := ""
			if h.Collation != nil {
				coll = *h.Collation
			}
			return nil, fmt.Errorf("is a key column in collation %s, which merges keys that differ in case or accents; want VARBINARY (or a _bin collation)", coll)
		}
		chars := dt == "char" || dt == "varchar"
		if !chars {
			n = textSizes[dt]
		}
		c = textConv(n, chars, cs != "utf8mb4", key || dt == "char", typ)
	case dt == "binary" || dt == "varbinary":
		c = bytesConv(n, dt == "binary", typ)
	case textSizes[dt] > 0:
		c = bytesConv(textSizes[dt], false, typ)
	case dt == "date":
		c = timeConv(-1, typ)
	case dt == "datetime":
		p := 0
		if h.TimePrec != nil {
			p = int(*h.TimePrec)
		}
		c = timeConv(p, typ)
	case dt == "timestamp":
		return nil, fmt.Errorf("is TIMESTAMP, which the session's time zone shifts; want DATETIME(3) (microbatch writes UTC)")
	case dt == "float" || dt == "double" || dt == "real":
		return nil, fmt.Errorf("is %s, which rounds decimals; want DECIMAL(p,s)", typ)
	default:
		return nil, fmt.Errorf("is %s, a type row jobs don't write (integers, DECIMAL, CHAR/VARCHAR/TEXT, BINARY/VARBINARY/BLOB, DATE, DATETIME and JSON are)", typ)
	}
	if h.Nullable != "YES" {
		c = notNull(c, typ)
	}
	return c, nil
}

// sqliteNumRE is text SQLite's NUMERIC affinity turns into a number.
var sqliteNumRE = regexp.MustCompile(`^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$`)

var canonicalIntRE = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)

// sqliteConv is the converter of a SQLite column by its declared type's
// affinity: INTEGER takes integers, TEXT and no type any text, NUMERIC
// (DECIMAL, DATETIME, …) text that isn't a number and integers (it would
// keep 1.10 as the floating-point 1.1), REAL is refused.
func sqliteConv(declared string, notNullCol bool) (conv, error) {
	t := strings.ToUpper(declared)
	var c conv
	switch {
	case strings.Contains(t, "INT"):
		c = intConv(64, false, declared)
	case strings.Contains(t, "CHAR") || strings.Contains(t, "CLOB") || strings.Contains(t, "TEXT") || strings.Contains(t, "BLOB") || t == "":
		c = func(v *val) (any, error) {
			if v.k == kNull {
				return nil, nil
			}
			s, err := valueText(v)
			if err != nil {
				return nil, err
			}
			return string(s), nil
		}
	case strings.Contains(t, "REAL") || strings.Contains(t, "FLOA") || strings.Contains(t, "DOUB"):
		return nil, fmt.Errorf("is %s, which rounds decimals; want TEXT (or INTEGER)", declared)
	default:
		ints := intConv(64, false, declared)
		c = func(v *val) (any, error) {
			if v.k == kNull {
				return nil, nil
			}
			s, err := valueText(v)
			if err != nil {
				return nil, err
			}
			if !sqliteNumRE.Match(s) && v.k != kBool {
				return string(s), nil
			}
			if !canonicalIntRE.Match(s) && v.k != kBool {
				return nil, fmt.Errorf("%s would be kept as a floating-point number by the column's NUMERIC affinity (%s); want a TEXT column", quoteText(s), declared)
			}
			return ints(v)
		}
	}
	if notNullCol {
		c = notNull(c, declared)
	}
	return c, nil
}
