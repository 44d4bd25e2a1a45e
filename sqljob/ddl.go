package sqljob

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// SQLType is column c's type in the sink's database.
func (q *Query) SQLType(c Column) string {
	if q.row != nil {
		return q.rowSQLType(c)
	}
	if q.opts.SQLite {
		switch {
		case c.Key:
			return "TEXT" // compared by memcmp (BINARY): bytes, as VARBINARY
		case c.agg == aggCount || c.agg == aggCountStar:
			return "INTEGER"
		case c.str:
			return "TEXT" // compared by memcmp (BINARY): bytes
		}
		// No declared type, as mb_totals.amount: an INTEGER while the sum
		// fits in int64, its exact decimal TEXT beyond (a typed column
		// would turn that text into an inexact REAL).
		return ""
	}
	if q.opts.Postgres {
		return postgresType(c)
	}
	switch {
	case c.Key && c.Window > 0:
		return "DATETIME(3)"
	case c.Key:
		return fmt.Sprintf("VARBINARY(%d)", q.keyW)
	case c.agg == aggCount || c.agg == aggCountStar:
		return "BIGINT"
	case c.str:
		return fmt.Sprintf("VARBINARY(%d)", textWidth)
	}
	return "DECIMAL(38,9)"
}

func quote(name string) string { return "`" + name + "`" }

// quoteIdent quotes a name in the query's database: `name` in MySQL and
// SQLite, "name" in PostgreSQL (names are letters, digits and _).
func (q *Query) quoteIdent(name string) string { return quoteIn(q.dialect(), name) }

func quoteIn(d dialect, name string) string {
	if d == dPostgres {
		return `"` + name + `"`
	}
	return quote(name)
}

// DDL is the statement that creates the query's table in the sink's
// database (MySQL/MariaDB; SQLite with Options.SQLite, PostgreSQL with
// Options.Postgres: postgresType). Text keys are VARBINARY: every VARCHAR collation, _bin included, ignores
// trailing spaces, and the others merge case or Unicode forms; bytes keep
// every distinct key its own row. Windows are DATETIME(3) in UTC.
func (q *Query) DDL() string {
	if q.row != nil {
		return q.rowDDL()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (\n", q.quoteIdent(q.table))
	for _, c := range q.cols {
		null := "NULL"
		if c.Key || c.agg == aggCount || c.agg == aggCountStar {
			null = "NOT NULL"
		}
		typ := q.SQLType(c)
		if typ != "" {
			typ += " "
		}
		fmt.Fprintf(&b, "  %s %s%s,\n", q.quoteIdent(c.Name), typ, null)
	}
	var keys []string
	for _, i := range q.keys {
		keys = append(keys, q.quoteIdent(q.cols[i].Name))
	}
	fmt.Fprintf(&b, "  PRIMARY KEY (%s)\n)", strings.Join(keys, ", "))
	if q.dialect() == dMySQL {
		b.WriteString(" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
	}
	return b.String()
}

// Plan is what run --dry-run prints: fields read, filter, key columns,
// each output column with its type and merge rule, and the DDL.
func (q *Query) Plan() string {
	if q.row != nil {
		return q.rowPlan()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "topic:  %s\ntable:  %s\n", q.topic, q.table)
	fmt.Fprintf(&b, "fields read: %s\n", strings.Join(q.fields, ", "))
	if q.where != nil {
		fmt.Fprintf(&b, "filter: %s\n", q.whereS)
	} else {
		b.WriteString("filter: none\n")
	}
	var keys []string
	for _, i := range q.keys {
		keys = append(keys, q.cols[i].Name)
	}
	fmt.Fprintf(&b, "key:    %s\ncolumns:\n", strings.Join(keys, ", "))
	for _, c := range q.cols {
		rule := c.Rule()
		switch rule {
		case "key":
			rule = "group key"
			if c.Window > 0 {
				rule = fmt.Sprintf("group key, tumbling window of %s (its UTC start)", fmtDuration(c.Window))
			}
		case "add":
			rule = "merged by adding"
		case "least":
			rule = "merged by keeping the least"
		case "greatest":
			rule = "merged by keeping the greatest"
		}
		if c.str {
			rule += " (string, in byte order)"
		}
		typ := q.SQLType(c)
		if typ == "" {
			typ = "(no type)" // SQLite: an exact sum past int64 stays decimal text
		}
		fmt.Fprintf(&b, "  %-16s %-14s %-28s %s\n", c.Name, typ, c.Expr, rule)
	}
	fmt.Fprintf(&b, "DDL:\n%s;\n", q.DDL())
	return b.String()
}

// EnsureTable creates the query's table in the sink's database
// (MySQL/MariaDB; SQLite or PostgreSQL when compiled with Options.SQLite
// or Options.Postgres) if it is
// missing, and checks an existing one: every column present with a
// type that keeps its values exactly, the primary key exactly the GROUP BY
// columns (whole) and no other unique key that could merge groups. Extra columns must be nullable or have defaults (the job never
// writes them).
func (q *Query) EnsureTable(ctx context.Context, db *sqlx.DB) error {
	if err := createTable(ctx, db, q.DDL(), q.dialect()); err != nil {
		return fmt.Errorf("creating table %s: %w", q.table, err)
	}
	return q.CheckTable(ctx, db)
}

// CheckTable checks an existing table (see EnsureTable).
func (q *Query) CheckTable(ctx context.Context, db *sqlx.DB) error {
	if err := q.checkDialect(db.DriverName()); err != nil {
		return err
	}
	if q.row != nil {
		return q.checkRowTable(ctx, db)
	}
	if q.opts.SQLite {
		return q.checkSQLiteTable(ctx, db)
	}
	if q.opts.Postgres {
		return q.checkPostgresTable(ctx, db)
	}
	cols, err := mysqlColumns(ctx, db, q.table)
	if err != nil {
		return err
	}
	have := map[string]mysqlColumn{}
	for _, c := range cols {
		have[strings.ToLower(c.Name)] = c
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("table %s exists and doesn't fit the query: %s (drop it, or write to a new table)", q.table, fmt.Sprintf(format, args...))
	}
	want := map[string]bool{}
	for _, c := range q.cols {
		want[strings.ToLower(c.Name)] = true
		h, ok := have[strings.ToLower(c.Name)]
		if !ok {
			return bad("it has no column %s", c.Name)
		}
		dt := strings.ToLower(h.DataType)
		switch {
		case c.Key && c.Window > 0:
			if dt != "datetime" || h.TimePrec == nil || *h.TimePrec != 3 {
				return bad("window column %s is %s; want DATETIME(3)", c.Name, h.DataType)
			}
		case c.Key:
			if dt != "varbinary" {
				return bad("key column %s is %s; want VARBINARY (a character type's collation merges keys that differ in case or trailing spaces)", c.Name, h.DataType)
			}
			if h.MaxLen != nil && *h.MaxLen < int64(q.keyW) {
				return bad("key column %s holds %d bytes; want %d", c.Name, *h.MaxLen, q.keyW)
			}
		case c.str:
			if dt != "varbinary" {
				return bad("column %s is %s; want VARBINARY (%s of strings compares bytes; a character type's collation would not)", c.Name, h.DataType, c.Aggregate())
			}
			if h.MaxLen != nil && *h.MaxLen < textWidth {
				return bad("column %s holds %d bytes; want %d", c.Name, *h.MaxLen, textWidth)
			}
			if h.Nullable != "YES" {
				return bad("column %s is NOT NULL; %s of no value is NULL", c.Name, c.Aggregate())
			}
		case c.agg == aggCount || c.agg == aggCountStar:
			if dt != "bigint" && !(dt == "decimal" && h.Scale != nil && *h.Scale == 0 && h.Prec != nil && *h.Prec >= 19) {
				return bad("count column %s is %s; want BIGINT", c.Name, h.DataType)
			}
		default:
			if dt != "decimal" || h.Scale == nil || *h.Scale < maxScale || h.Prec == nil || *h.Prec-*h.Scale < 29 {
				return bad("column %s is %s; want DECIMAL(38,9) (sums are exact: up to 29 digits before the point and 9 after)", c.Name, typeText(h.DataType, h.Prec, h.Scale))
			}
			if strings.Contains(strings.ToLower(h.ColType), "unsigned") {
				return bad("column %s is %s; want it signed (a sum, a minimum or a maximum can be negative)", c.Name, h.ColType)
			}
			if h.Nullable != "YES" {
				return bad("column %s is NOT NULL; %s of no value is NULL", c.Name, c.Aggregate())
			}
		}
	}
	for _, c := range cols {
		if !want[strings.ToLower(c.Name)] && c.Nullable != "YES" && c.Default == nil && !strings.Contains(strings.ToLower(c.Extra), "auto_increment") {
			return bad("extra column %s is NOT NULL without a default", c.Name)
		}
	}
	// The upsert's ON DUPLICATE KEY UPDATE merges a row into the one it
	// conflicts with on any unique key: the primary key must be the whole
	// GROUP BY columns (a prefix of a column merges keys that share it),
	// and another unique key must hold every GROUP BY column whole (one
	// that doesn't merges different groups).
	type part struct {
		Index  string  `db:"INDEX_NAME"`
		Column *string `db:"COLUMN_NAME"` // NULL: an expression (MySQL 8)
		Sub    *int64  `db:"SUB_PART"`
	}
	var parts []part
	err = db.SelectContext(ctx, &parts, `SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX`, q.table)
	if err != nil {
		return fmt.Errorf("reading the unique keys of %s: %w", q.table, err)
	}
	var keys []string
	for _, i := range q.keys {
		keys = append(keys, q.cols[i].Name)
	}
	whole := map[string][]string{} // unique key -> its columns kept whole
	var order []string
	for _, p := range parts {
		if _, ok := whole[p.Index]; !ok {
			order = append(order, p.Index)
			whole[p.Index] = []string{}
		}
		if p.Column != nil && p.Sub == nil {
			whole[p.Index] = append(whole[p.Index], *p.Column)
		}
	}
	var pk []string
	for _, p := range parts {
		if p.Index == "PRIMARY" && p.Column != nil {
			pk = append(pk, *p.Column)
		}
	}
	if !sameSet(pk, keys) {
		return bad("its primary key is (%s); want (%s), the GROUP BY columns", strings.Join(pk, ", "), strings.Join(keys, ", "))
	}
	for _, idx := range order {
		if idx == "PRIMARY" {
			if len(whole[idx]) != len(pk) {
				return bad("its primary key holds a prefix of a column, which would merge keys that share it; want the GROUP BY columns whole")
			}
			continue
		}
		if !containsAll(whole[idx], keys) {
			return bad("unique key %s would merge different groups into one row: drop it, or make it hold every GROUP BY column (%s) whole", idx, strings.Join(keys, ", "))
		}
	}
	return nil
}

// containsAll reports whether set holds every name of want (ignoring case).
func containsAll(set, want []string) bool {
	m := map[string]bool{}
	for _, x := range set {
		m[strings.ToLower(x)] = true
	}
	for _, x := range want {
		if !m[strings.ToLower(x)] {
			return false
		}
	}
	return true
}

func typeText(dt string, p, s *int64) string {
	if p != nil && s != nil {
		return fmt.Sprintf("%s(%d,%d)", strings.ToUpper(dt), *p, *s)
	}
	return strings.ToUpper(dt)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[strings.ToLower(x)] = true
	}
	for _, x := range b {
		if !m[strings.ToLower(x)] {
			return false
		}
	}
	return true
}

// checkSQLiteTable is CheckTable in SQLite: the columns' declared types
// (TEXT keys without a collation that merges, INTEGER counts, untyped
// sums) and the primary key.
func (q *Query) checkSQLiteTable(ctx context.Context, db *sqlx.DB) error {
	cols, err := sqliteColumns(ctx, db, q.table)
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("table %s exists and doesn't fit the query: %s (drop it, or write to a new table)", q.table, fmt.Sprintf(format, args...))
	}
	var ddl string
	if err := db.GetContext(ctx, &ddl, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", q.table); err != nil {
		return fmt.Errorf("reading the definition of %s: %w", q.table, err)
	}
	if strings.Contains(strings.ToUpper(ddl), "COLLATE") {
		return bad("it declares a collation, which can merge keys that differ in case or spaces")
	}
	have := map[string]sqliteColumn{}
	for _, c := range cols {
		have[strings.ToLower(c.Name)] = c
	}
	want := map[string]bool{}
	var pk []string
	for _, c := range q.cols {
		want[strings.ToLower(c.Name)] = true
		h, ok := have[strings.ToLower(c.Name)]
		if !ok {
			return bad("it has no column %s", c.Name)
		}
		if t := strings.ToUpper(h.Type); t != q.SQLType(c) {
			w := q.SQLType(c)
			if w == "" {
				w = "no declared type (an exact sum past int64 is kept as decimal text)"
			}
			return bad("column %s is %q; want %s", c.Name, h.Type, w)
		}
	}
	for _, c := range cols {
		if c.PK > 0 {
			pk = append(pk, c.Name)
		}
		if !want[strings.ToLower(c.Name)] && c.NotNull != 0 && c.Default == nil {
			return bad("extra column %s is NOT NULL without a default", c.Name)
		}
	}
	var keys []string
	for _, i := range q.keys {
		keys = append(keys, q.cols[i].Name)
	}
	if !sameSet(pk, keys) {
		return bad("its primary key is (%s); want (%s), the GROUP BY columns", strings.Join(pk, ", "), strings.Join(keys, ", "))
	}
	return nil
}

// fmtDuration prints d without zero units: 1h, 1m30s, 250ms.
func fmtDuration(d time.Duration) string {
	s := d.String()
	for _, z := range []string{"h0m0s", "m0s"} {
		if strings.HasSuffix(s, z) {
			return strings.TrimSuffix(s, z) + z[:1]
		}
	}
	return s
}
