package sqljob

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// dialect is the sink database a query is compiled for (Options).
type dialect uint8

const (
	dMySQL dialect = iota
	dSQLite
	dPostgres
)

func (d dialect) String() string {
	switch d {
	case dSQLite:
		return "SQLite"
	case dPostgres:
		return "PostgreSQL"
	}
	return "MySQL/MariaDB"
}

func (q *Query) dialect() dialect {
	switch {
	case q.opts.SQLite:
		return dSQLite
	case q.opts.Postgres:
		return dPostgres
	}
	return dMySQL
}

// dialectOf is the database of a database/sql driver name: sqlite*, pgx
// (or postgres), else MySQL/MariaDB.
func dialectOf(driver string) dialect {
	switch {
	case strings.HasPrefix(driver, "sqlite"):
		return dSQLite
	case driver == "pgx" || strings.HasPrefix(driver, "postgres"):
		return dPostgres
	}
	return dMySQL
}

// checkDialect refuses a database of another kind than the query's.
func (q *Query) checkDialect(driver string) error {
	if d := dialectOf(driver); d != q.dialect() {
		return fmt.Errorf("the query was compiled for %s, the database is %s (set Options.SQLite for a SQLite sink, Options.Postgres for a PostgreSQL one)", q.dialect(), d)
	}
	return nil
}

// createTable runs a CREATE TABLE IF NOT EXISTS. PostgreSQL's IF NOT
// EXISTS is not atomic: two sessions creating one table at once may see
// it missing, and the loser fails on the catalog's unique key; run again,
// it sees the table.
func createTable(ctx context.Context, db DB, ddl string, d dialect) error {
	_, err := db.ExecContext(ctx, ddl)
	if err != nil && d == dPostgres {
		if _, tx := db.(*sqlx.Tx); !tx { // in a transaction the error aborted it
			_, err = db.ExecContext(ctx, ddl)
		}
	}
	return err
}

// ownersSchema is OwnersSchema of dialect d.
func ownersSchema(d dialect) string {
	if d != dPostgres {
		return OwnersSchema(d == dSQLite)
	}
	return `CREATE TABLE IF NOT EXISTS mb_sql_tables (
  tbl VARCHAR(64) COLLATE "C" NOT NULL,
  job VARCHAR(128) COLLATE "C" NOT NULL,
  fingerprint VARCHAR(64) COLLATE "C" NOT NULL,
  query_text TEXT NOT NULL,
  created_at TIMESTAMP(6) NOT NULL,
  PRIMARY KEY (tbl),
  UNIQUE (job)
)`
}

// postgresType is SQLType of an aggregate's column in PostgreSQL. Text
// keys and MIN/MAX of strings are BYTEA, as the built-in job's k: BYTEA
// compares byte by byte (as VARBINARY), so two keys are one row only when
// they are the same bytes, and it holds every byte — TEXT can't hold NUL
// (JSON's "\u0000") nor bytes that are not UTF-8 (a _key), which would
// otherwise be dead letters. Windows are TIMESTAMP(3) without time zone,
// in UTC as on MySQL.
func postgresType(c Column) string {
	switch {
	case c.Key && c.Window > 0:
		return "TIMESTAMP(3)"
	case c.Key || c.str:
		return "BYTEA"
	case c.agg == aggCount || c.agg == aggCountStar:
		return "BIGINT"
	}
	return "NUMERIC(38,9)"
}

// pgColumn is a column of information_schema.columns in PostgreSQL.
type pgColumn struct {
	Name      string  `db:"column_name"`
	DataType  string  `db:"data_type"`
	Prec      *int64  `db:"numeric_precision"`
	Scale     *int64  `db:"numeric_scale"`
	TimePrec  *int64  `db:"datetime_precision"`
	MaxLen    *int64  `db:"character_maximum_length"`
	Collation *string `db:"collation_name"`
	Nullable  string  `db:"is_nullable"`
	Default   *string `db:"column_default"`
	Identity  string  `db:"is_identity"`
	Generated string  `db:"is_generated"`
}

// pgColumns reads table's columns in the current schema; a table without
// any does not exist.
func pgColumns(ctx context.Context, db *sqlx.DB, table string) ([]pgColumn, error) {
	var cols []pgColumn
	err := db.SelectContext(ctx, &cols, `SELECT column_name, data_type, numeric_precision, numeric_scale, datetime_precision,
		character_maximum_length, collation_name, is_nullable, column_default, is_identity, is_generated
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s does not exist", table)
	}
	return cols, nil
}

// pgUniqueKeys reads table's unique indexes (the primary key named
// "PRIMARY"), their columns in order; an expression or a partial index
// (WHERE) is partial. pk is the primary key's columns.
func pgUniqueKeys(ctx context.Context, db *sqlx.DB, table string) (pk []string, uniques []uniqueKey, err error) {
	var parts []struct {
		Index   string  `db:"index_name"`
		Primary bool    `db:"is_primary"`
		Partial bool    `db:"is_partial"`
		Column  *string `db:"column_name"`
	}
	err = db.SelectContext(ctx, &parts, `SELECT i.relname AS index_name, ix.indisprimary AS is_primary,
		(ix.indpred IS NOT NULL OR ix.indexprs IS NOT NULL) AS is_partial, a.attname AS column_name
		FROM pg_index ix
		JOIN pg_class i ON i.oid = ix.indexrelid
		CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)
		LEFT JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum AND k.attnum > 0
		WHERE ix.indrelid = to_regclass(quote_ident(?)) AND ix.indisunique
		  AND k.ord <= ix.indnkeyatts -- not the INCLUDE columns: they are not part of the key
		ORDER BY ix.indisprimary DESC, i.relname, k.ord`, table)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the unique keys of %s: %w", table, err)
	}
	for _, p := range parts {
		name := p.Index
		if p.Primary {
			name = "PRIMARY"
			if p.Column != nil {
				pk = append(pk, *p.Column)
			}
		}
		if len(uniques) == 0 || uniques[len(uniques)-1].name != name {
			uniques = append(uniques, uniqueKey{name: name})
		}
		u := &uniques[len(uniques)-1]
		if p.Column != nil {
			u.cols = append(u.cols, *p.Column)
		}
		if p.Column == nil || p.Partial {
			u.partial = true
		}
	}
	return pk, uniques, nil
}

// checkPostgresTable is CheckTable of an aggregate in PostgreSQL: the
// columns' types keep the values exactly (BYTEA keys and strings, BIGINT
// counts, NUMERIC with 29 digits before the point and 9 after,
// TIMESTAMP(3) windows), the primary key is the GROUP BY columns and no
// other unique key can merge groups (ON CONFLICT names the primary key;
// another unique key would make a row fail instead).
func (q *Query) checkPostgresTable(ctx context.Context, db *sqlx.DB) error {
	cols, err := pgColumns(ctx, db, q.table)
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("table %s exists and doesn't fit the query: %s (drop it, or write to a new table)", q.table, fmt.Sprintf(format, args...))
	}
	have := map[string]pgColumn{}
	for _, c := range cols {
		have[c.Name] = c
	}
	want := map[string]bool{}
	for _, c := range q.cols {
		want[c.Name] = true
		h, ok := have[c.Name]
		if !ok {
			return bad("it has no column %s (names are compared exactly: the job quotes them)", c.Name)
		}
		switch {
		case c.Key && c.Window > 0:
			if h.DataType != "timestamp without time zone" || h.TimePrec == nil || *h.TimePrec != 3 {
				return bad("window column %s is %s; want TIMESTAMP(3) (without time zone: the window's UTC start)", c.Name, h.DataType)
			}
		case c.Key:
			if h.DataType != "bytea" {
				return bad("key column %s is %s; want BYTEA (a character type's collation can merge keys, and TEXT holds no NUL byte)", c.Name, h.DataType)
			}
		case c.str:
			if h.DataType != "bytea" {
				return bad("column %s is %s; want BYTEA (%s of strings compares bytes; a character type's collation would not)", c.Name, h.DataType, c.Aggregate())
			}
			if h.Nullable != "YES" {
				return bad("column %s is NOT NULL; %s of no value is NULL", c.Name, c.Aggregate())
			}
		case c.agg == aggCount || c.agg == aggCountStar:
			if h.DataType != "bigint" && !(h.DataType == "numeric" && (h.Prec == nil || h.Scale != nil && *h.Scale == 0 && *h.Prec >= 19)) {
				return bad("count column %s is %s; want BIGINT", c.Name, typeText(h.DataType, h.Prec, h.Scale))
			}
		default:
			// NUMERIC without a precision keeps any value exactly.
			if h.DataType != "numeric" || h.Prec != nil && (h.Scale == nil || *h.Scale < maxScale || *h.Prec-*h.Scale < 29) {
				return bad("column %s is %s; want NUMERIC(38,9) (sums are exact: up to 29 digits before the point and 9 after)", c.Name, typeText(h.DataType, h.Prec, h.Scale))
			}
			if h.Nullable != "YES" {
				return bad("column %s is NOT NULL; %s of no value is NULL", c.Name, c.Aggregate())
			}
		}
	}
	for _, c := range cols {
		if !want[c.Name] && c.Nullable != "YES" && c.Default == nil && c.Identity != "YES" && c.Generated != "ALWAYS" {
			return bad("extra column %s is NOT NULL without a default", c.Name)
		}
	}
	pk, uniques, err := pgUniqueKeys(ctx, db, q.table)
	if err != nil {
		return err
	}
	var keys []string
	for _, i := range q.keys {
		keys = append(keys, q.cols[i].Name)
	}
	if !sameSet(pk, keys) {
		return bad("its primary key is (%s); want (%s), the GROUP BY columns", strings.Join(pk, ", "), strings.Join(keys, ", "))
	}
	for _, u := range uniques {
		if u.name == "PRIMARY" {
			continue
		}
		if u.partial || !containsAll(u.cols, keys) {
			return bad("unique key %s would refuse or merge rows of different groups: drop it, or make it hold every GROUP BY column (%s) whole", u.name, strings.Join(keys, ", "))
		}
	}
	return nil
}
