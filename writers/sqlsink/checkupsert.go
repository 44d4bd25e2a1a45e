package sqlsink

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// CheckUpsert makes sure u's table exists with u's columns and has a
// primary or unique key on exactly u.Keys. Without that key an upsert
// can't find the row to merge into: MySQL would silently insert duplicate
// rows, SQLite fails every batch. It also refuses per-column rules the
// database can't apply (writers.ErrBadMerge: MergeMin and MergeMax in
// SQLite). An append (writers.MergeAppend) needs the columns only: its
// rows are inserted, never merged, so the table needs no key. Call it
// once before writing.
func (w *Writer) CheckUpsert(ctx context.Context, u writers.Upsert) error {
	if err := u.Validate(); err != nil {
		return err
	}
	if err := w.checkPerColumn(u); err != nil {
		return err
	}
	cols := append(append([]string{}, u.Keys...), u.Values...)
	rows, err := w.db.QueryContext(ctx, "SELECT "+w.quoteIdents(cols)+" FROM "+w.quoteIdent(u.Table)+" WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("%w: %s with columns %s in %s (create it before writing): %v", ErrBadTable, u.Table, strings.Join(cols, ", "), w.display, err)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if u.Merge == writers.MergeAppend {
		return nil
	}
	keys, err := w.uniqueKeys(ctx, u.Table)
	if err != nil {
		return fmt.Errorf("reading the keys of %s in %s: %w", u.Table, w.display, err)
	}
	want := normalized(u.Keys)
	for _, k := range keys {
		if slices.Equal(normalized(k), want) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s has no primary or unique key on (%s), so an upsert can't find the row to merge into; add one", ErrBadTable, u.Table, strings.Join(u.Keys, ", "))
}

// uniqueKeys lists the column sets of a table's primary and unique keys.
func (w *Writer) uniqueKeys(ctx context.Context, table string) ([][]string, error) {
	var q string
	var args []any
	switch w.dialect {
	case offsets.Postgres:
		// The key and unique indexes of the table the search path finds
		// (a plain unique index too: ON CONFLICT takes either).
		q = `SELECT ic.relname, a.attname FROM pg_index i
 JOIN pg_class ic ON ic.oid = i.indexrelid
 JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
 WHERE i.indrelid = to_regclass(quote_ident(?)) AND i.indisunique AND i.indpred IS NULL
 ORDER BY ic.relname, k.n`
		args = []any{table}
	case offsets.MySQL:
		q = `SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX`
		args = []any{table}
	default:
		// Unique indexes, and the primary key, which has no index when it
		// is the rowid (INTEGER PRIMARY KEY).
		q = `SELECT il.name, ii.name FROM pragma_index_list(?) AS il, pragma_index_info(il.name) AS ii WHERE il."unique" = 1
 UNION ALL SELECT '(pk)', name FROM pragma_table_info(?) WHERE pk > 0`
		args = []any{table, table}
	}
	rows, err := w.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byIndex := map[string][]string{}
	var order []string
	for rows.Next() {
		var index, col string
		if err := rows.Scan(&index, &col); err != nil {
			return nil, err
		}
		if _, ok := byIndex[index]; !ok {
			order = append(order, index)
		}
		byIndex[index] = append(byIndex[index], col)
	}
	keys := make([][]string, 0, len(order))
	for _, i := range order {
		keys = append(keys, byIndex[i])
	}
	return keys, rows.Err()
}

func normalized(cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = strings.ToLower(c)
	}
	slices.Sort(out)
	return out
}

// quoteIdent quotes a name checked by Upsert.Validate (no quote of either
// kind in it), so that a column may be called like a reserved word (key,
// order): backquotes in MySQL and SQLite, double quotes in PostgreSQL,
// where the name then keeps its case as it does in MySQL's tables.
func (w *Writer) quoteIdent(name string) string {
	if w.dialect == offsets.Postgres {
		return `"` + name + `"`
	}
	return "`" + name + "`"
}

func (w *Writer) quoteIdents(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = w.quoteIdent(n)
	}
	return strings.Join(q, ", ")
}
