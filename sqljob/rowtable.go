package sqljob

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// checkRowTable is CheckTable of a row job: every SELECT column is in
// the table with a type the job can write exactly, an upsert's primary
// key is its key columns (whole), and no unique key can refuse a row (an
// append's duplicate) or merge two keys. It binds each column's converter
// (Row converts to the table's real types from then on).
func (q *Query) checkRowTable(ctx context.Context, db *sqlx.DB) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("table %s exists and doesn't fit the query: %s (drop it, or write to a new table)", q.table, fmt.Sprintf(format, args...))
	}
	var convs []conv
	var err error
	switch {
	case q.opts.SQLite:
		convs, err = q.bindSQLite(ctx, db, bad)
	case q.opts.Postgres:
		convs, err = q.bindPostgres(ctx, db, bad)
	default:
		convs, err = q.bindMySQL(ctx, db, bad)
	}
	if err != nil {
		return err
	}
	q.row.conv.Store(&convs)
	return nil
}

// uniqueKey is a unique index: its columns, and whether one is a prefix
// or an expression (not the whole column).
type uniqueKey struct {
	name    string
	cols    []string
	partial bool
}

// checkKeys checks the table's unique keys against the job: an append's
// table has none made only of the job's columns (a second equal record
// would fail the write); an upsert's primary key is its key, and every
// other unique key holds the key's columns whole.
func (q *Query) checkKeys(pk []string, uniques []uniqueKey, autoInc map[string]bool, bad func(string, ...any) error) error {
	keys := q.KeyColumns()
	written := map[string]bool{}
	for _, c := range q.cols {
		written[strings.ToLower(c.Name)] = true
	}
	if !q.row.upsert {
		for _, u := range uniques {
			ours := true
			for _, c := range u.cols {
				if autoInc[strings.ToLower(c)] || !written[strings.ToLower(c)] {
					ours = false
				}
			}
			if ours && len(u.cols) > 0 {
				return bad("unique key %s (%s) would refuse a record equal to another on it, and an append writes every record; drop it, or keep one row per key with REPLACE INTO %s (PRIMARY KEY (%s)) SELECT …", u.name, strings.Join(u.cols, ", "), q.table, strings.Join(u.cols, ", "))
			}
		}
		return nil
	}
	if !sameSet(pk, keys) {
		return bad("its primary key is (%s); want (%s), the query's PRIMARY KEY", strings.Join(pk, ", "), strings.Join(keys, ", "))
	}
	for _, u := range uniques {
		if u.partial || !containsAll(u.cols, keys) {
			return bad("unique key %s would merge rows of different keys: drop it, or make it hold every key column (%s) whole", u.name, strings.Join(keys, ", "))
		}
	}
	return nil
}

func (q *Query) bindMySQL(ctx context.Context, db *sqlx.DB, bad func(string, ...any) error) ([]conv, error) {
	cols, err := mysqlColumns(ctx, db, q.table)
	if err != nil {
		return nil, err
	}
	// MariaDB's JSON is LONGTEXT with CHECK (json_valid(`c`)): such a
	// column takes JSON text only. Another CHECK could refuse a row the
	// job can't tell in advance (a failed write, not a dead letter).
	var checks []struct {
		Name   string `db:"CONSTRAINT_NAME"`
		Clause string `db:"CHECK_CLAUSE"`
	}
	jsonCol := map[string]bool{}
	if err := db.SelectContext(ctx, &checks, `SELECT cc.CONSTRAINT_NAME, cc.CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS cc
		JOIN information_schema.TABLE_CONSTRAINTS tc ON tc.CONSTRAINT_SCHEMA = cc.CONSTRAINT_SCHEMA AND tc.CONSTRAINT_NAME = cc.CONSTRAINT_NAME
		WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = ? AND tc.CONSTRAINT_TYPE = 'CHECK' AND cc.CONSTRAINT_SCHEMA = DATABASE()`, q.table); err == nil {
		for _, ch := range checks {
			cl := strings.ToLower(strings.ReplaceAll(ch.Clause, " ", ""))
			if strings.HasPrefix(cl, "json_valid(`") && strings.HasSuffix(cl, "`)") {
				jsonCol[strings.Trim(cl[len("json_valid("):len(cl)-1], "`")] = true
				continue
			}
			return nil, bad("CHECK %s (%s) could refuse a row, which would stop the job: drop it and filter in the query's WHERE", ch.Name, ch.Clause)
		}
	}
	have := map[string]mysqlColumn{}
	autoInc := map[string]bool{}
	for _, c := range cols {
		have[strings.ToLower(c.Name)] = c
		if strings.Contains(strings.ToLower(c.Extra), "auto_increment") {
			autoInc[strings.ToLower(c.Name)] = true
		}
	}
	convs := make([]conv, len(q.cols))
	written := map[string]bool{}
	for i, c := range q.cols {
		written[strings.ToLower(c.Name)] = true
		h, ok := have[strings.ToLower(c.Name)]
		if !ok {
			return nil, bad("it has no column %s", c.Name)
		}
		cv, err := mysqlConv(h, c.Key, jsonCol[strings.ToLower(h.Name)])
		if err != nil {
			return nil, bad("column %s %v", c.Name, err)
		}
		convs[i] = cv
	}
	for _, c := range cols {
		if !written[strings.ToLower(c.Name)] && c.Nullable != "YES" && c.Default == nil && !autoInc[strings.ToLower(c.Name)] {
			return nil, bad("extra column %s is NOT NULL without a default", c.Name)
		}
	}
	var parts []struct {
		Index  string  `db:"INDEX_NAME"`
		Column *string `db:"COLUMN_NAME"` // NULL: an expression (MySQL 8)
		Sub    *int64  `db:"SUB_PART"`
	}
	err = db.SelectContext(ctx, &parts, `SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX`, q.table)
	if err != nil {
		return nil, fmt.Errorf("reading the unique keys of %s: %w", q.table, err)
	}
	var pk []string
	var uniques []uniqueKey
	for _, p := range parts {
		if p.Index == "PRIMARY" && p.Column != nil {
			pk = append(pk, *p.Column)
		}
		if len(uniques) == 0 || uniques[len(uniques)-1].name != p.Index {
			uniques = append(uniques, uniqueKey{name: p.Index})
		}
		u := &uniques[len(uniques)-1]
		if p.Column != nil {
			u.cols = append(u.cols, *p.Column)
		}
		if p.Column == nil || p.Sub != nil {
			u.partial = true
		}
	}
	if q.row.upsert {
		var rest []uniqueKey
		for _, u := range uniques {
			if u.name == "PRIMARY" && u.partial {
				return nil, bad("its primary key holds a prefix of a column, which would merge keys that share it; want the key columns whole")
			}
			if u.name != "PRIMARY" {
				rest = append(rest, u)
			}
		}
		uniques = rest
	}
	return convs, q.checkKeys(pk, uniques, autoInc, bad)
}

func (q *Query) bindSQLite(ctx context.Context, db *sqlx.DB, bad func(string, ...any) error) ([]conv, error) {
	cols, err := sqliteColumns(ctx, db, q.table)
	if err != nil {
		return nil, err
	}
	var ddl string
	if err := db.GetContext(ctx, &ddl, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", q.table); err != nil {
		return nil, fmt.Errorf("reading the definition of %s: %w", q.table, err)
	}
	if q.row.upsert && strings.Contains(strings.ToUpper(ddl), "COLLATE") {
		return nil, bad("it declares a collation, which can merge keys that differ in case or spaces")
	}
	idx := map[string]int{}
	var pk []string
	autoInc := map[string]bool{}
	for i, c := range cols {
		idx[strings.ToLower(c.Name)] = i
		if c.PK > 0 {
			pk = append(pk, c.Name)
		}
	}
	rowid := len(pk) == 1 && strings.EqualFold(cols[idx[strings.ToLower(pk[0])]].Type, "INTEGER")
	convs := make([]conv, len(q.cols))
	written := map[string]bool{}
	for i, c := range q.cols {
		written[strings.ToLower(c.Name)] = true
		j, ok := idx[strings.ToLower(c.Name)]
		if !ok {
			return nil, bad("it has no column %s", c.Name)
		}
		cv, err := sqliteConv(cols[j].Type, cols[j].NotNull != 0 || cols[j].PK > 0)
		if err != nil {
			return nil, bad("column %s %v", c.Name, err)
		}
		convs[i] = cv
	}
	if rowid && !written[strings.ToLower(pk[0])] {
		autoInc[strings.ToLower(pk[0])] = true // the rowid: SQLite numbers a row the job leaves it out of
	}
	for _, c := range cols {
		if !written[strings.ToLower(c.Name)] && c.NotNull != 0 && c.Default == nil && !autoInc[strings.ToLower(c.Name)] {
			return nil, bad("extra column %s is NOT NULL without a default", c.Name)
		}
	}
	var uniques []uniqueKey
	var list []struct {
		Name   string `db:"name"`
		Unique int    `db:"unique"`
		Origin string `db:"origin"`
	}
	if err := db.SelectContext(ctx, &list, `SELECT name, "unique", origin FROM pragma_index_list(?)`, q.table); err != nil {
		return nil, fmt.Errorf("reading the unique keys of %s: %w", q.table, err)
	}
	for _, ix := range list {
		if ix.Unique == 0 || q.row.upsert && ix.Origin == "pk" {
			continue
		}
		var names []*string
		if err := db.SelectContext(ctx, &names, "SELECT name FROM pragma_index_info(?)", ix.Name); err != nil {
			return nil, fmt.Errorf("reading the unique keys of %s: %w", q.table, err)
		}
		u := uniqueKey{name: ix.Name}
		for _, n := range names {
			if n == nil {
				u.partial = true
				continue
			}
			u.cols = append(u.cols, *n)
		}
		uniques = append(uniques, u)
	}
	if !q.row.upsert && rowid {
		uniques = append(uniques, uniqueKey{name: "PRIMARY KEY", cols: pk}) // the rowid has no index of its own
	}
	return convs, q.checkKeys(pk, uniques, autoInc, bad)
}
