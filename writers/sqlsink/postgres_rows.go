package sqlsink

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/microbatch/microbatch/writers"
)

// asBytes returns rows with the strings of u's BYTEA columns as []byte,
// copying the rows it changes; rows is returned as it is when there is
// nothing to change. pgx sends a Go string as text, which BYTEA reads in
// its escape syntax ("\x41" is "A", a lone backslash is an error); sent
// as []byte, the column gets the string's bytes, as VARBINARY does in
// MySQL. A SQL job's keys and MIN/MAX of strings are BYTEA columns.
func (w *Writer) asBytes(ctx context.Context, ex sqlx.ExecerContext, u writers.Upsert, rows [][]any) ([][]any, error) {
	cols, err := w.byteaOf(ctx, ex, u.Table)
	if err != nil {
		return nil, err
	}
	var idx []int
	for j, c := range append(append([]string{}, u.Keys...), u.Values...) {
		for _, b := range cols {
			if c == b {
				idx = append(idx, j)
			}
		}
	}
	if len(idx) == 0 {
		return rows, nil
	}
	out := make([][]any, len(rows))
	for r, row := range rows {
		out[r] = row
		copied := false
		for _, i := range idx {
			s, ok := row[i].(string)
			if !ok {
				continue
			}
			if !copied {
				out[r], copied = append([]any(nil), row...), true
			}
			out[r][i] = []byte(s)
		}
	}
	return out, nil
}

// byteaOf is table's BYTEA columns: the built-in tables' from
// byteaColumns, another table's read once from the catalog (a table not
// there yet is read again on the next write), through ex when it can
// read: a transaction holding the pool's last connection would wait
// forever for another.
func (w *Writer) byteaOf(ctx context.Context, ex sqlx.ExecerContext, table string) ([]string, error) {
	if cols, ok := byteaColumns[table]; ok {
		return cols, nil
	}
	w.mu.Lock()
	cols, ok := w.bytea[table]
	w.mu.Unlock()
	if ok {
		return cols, nil
	}
	var all []struct {
		Name string `db:"column_name"`
		Type string `db:"data_type"`
	}
	var q sqlx.QueryerContext = w.db
	if qx, ok := ex.(sqlx.QueryerContext); ok {
		q = qx
	}
	// The table the statements reach: the first of that name on the
	// search_path (as to_regclass finds it), not only current_schema().
	if err := sqlx.SelectContext(ctx, q, &all, `SELECT attname AS column_name, format_type(atttypid, NULL) AS data_type FROM pg_attribute
		WHERE attrelid = to_regclass(quote_ident(?)) AND attnum > 0 AND NOT attisdropped`, table); err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	cols = []string{}
	for _, c := range all {
		if c.Type == "bytea" {
			cols = append(cols, c.Name)
		}
	}
	if len(all) > 0 {
		w.mu.Lock()
		if w.bytea == nil {
			w.bytea = map[string][]string{}
		}
		w.bytea[table] = cols
		w.mu.Unlock()
	}
	return cols, nil
}

// pgRounds splits the rows of an upsert into statements PostgreSQL takes:
// ON CONFLICT DO UPDATE refuses a statement whose rows repeat a key
// ("cannot affect row a second time", SQLSTATE 21000), where MySQL and
// SQLite apply them in turn. Rows without a repeated key are one round.
// A MergeReplace upsert keeps each key's last row (the one MySQL would
// leave). Otherwise (adding, per-column merges) round i holds each key's
// i-th row, in order, and the rounds run one after another: each merges
// into what the one before left, as MySQL applies the rows in turn, so
// the result is exactly MySQL's, whatever the columns' types. Keys are
// compared as foldKey does, value by value.
func pgRounds(u writers.Upsert, rows [][]any) [][][]any {
	nk := len(u.Keys)
	seen := make(map[string]int, len(rows)) // key -> rows of it so far
	rounds := 1
	var b []byte
	for _, r := range rows {
		b = foldKey(b[:0], r[:nk])
		seen[string(b)]++
		rounds = max(rounds, seen[string(b)])
	}
	if rounds == 1 {
		return [][][]any{rows}
	}
	if u.Merge == writers.MergeReplace && u.Merges == nil {
		kept, _ := foldDeletes(u, rows) // no row is a delete here: the last of each key
		return [][][]any{kept}
	}
	out := make([][][]any, rounds)
	clear(seen)
	for _, r := range rows {
		b = foldKey(b[:0], r[:nk])
		i := seen[string(b)]
		seen[string(b)]++
		out[i] = append(out[i], r)
	}
	return out
}
