package sqlsink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// Statement bounds. A statement holds at most maxParams placeholders (MySQL
// takes 65,535, SQLite 32,766), rowsPerStatement rows, and about
// statementBytes of values: with interpolateParams the driver sends the
// values inside the statement text, one packet, which MariaDB refuses
// past max_allowed_packet (16 MiB by default; MySQL 8: 64 MiB).
//
// rowsPerStatement is the batch size of a row job's INSERT (MergeAppend)
// and upsert, and of a DELETE's keys. BenchmarkRowJobMySQL (10,000 rows
// of 5 columns, ~120 bytes, a transaction; MariaDB 10.11 on a shared
// 2-core machine) put 500-1,000 rows a statement at the top and 5,000
// lower: prepared, 1,000 rows ran at 180,000-250,000 rows/s, as fast as
// LOAD DATA LOCAL INFILE from memory (160,000-250,000), and interpolated
// text at 120,000-170,000. LOAD DATA is not used: LOCAL makes every
// conversion error a warning even in strict mode (a too-long string is
// truncated, against the exactness row jobs promise), and its reader handlers
// live in the driver's process-global registry. The per-key upserts of
// aggregate jobs are bounded by maxParams and statementBytes only, as
// they always were.
const (
	rowsPerStatement = writers.RowsPerStatement
	statementBytes   = 4 << 20
)

// upsert writes rows of u through ex (a transaction, a connection or the
// pool). Every row is checked before the first statement runs.
//
//   - MergeAppend: multi-row INSERTs, every row one row of the table.
//   - MergeReplace with Delete rows (writers.Delete): the rows are folded
//     first, the last row of each key winning, so the kept upserts and
//     the deletes touch distinct keys and their order does not matter;
//     then one multi-row upsert and one multi-row DELETE (per chunk). Keys
//     are folded byte for byte (a string, []byte or integer key value as
//     it is), as the key columns microbatch creates compare them
//     (VARBINARY); into a table whose key collation folds case, rows of
//     keys "A" and "a" in one write are not folded together.
//   - otherwise: multi-row upserts (INSERT … ON DUPLICATE KEY UPDATE / ON
//     CONFLICT DO UPDATE), rows with the same key applied in turn. In
//     PostgreSQL, which refuses a statement that affects a row twice
//     (SQLSTATE 21000), the rows are first split by pgRounds.
func (w *Writer) upsert(ctx context.Context, ex sqlx.ExecerContext, u writers.Upsert, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	if err := u.Validate(); err != nil {
		return err
	}
	if err := w.checkPerColumn(u); err != nil {
		return err
	}
	deletes, err := w.checkRows(u, rows)
	if err != nil {
		return err
	}
	if w.dialect == offsets.Postgres {
		if rows, err = w.asBytes(ctx, ex, u, rows); err != nil {
			return err
		}
	}
	if deletes {
		kept, deleted := foldDeletes(u, rows)
		if err := w.insertRows(ctx, ex, u, kept); err != nil {
			return err
		}
		return w.deleteKeys(ctx, ex, u, deleted)
	}
	if c, ok := ex.(copyTx); ok && u.Merge == writers.MergeAppend {
		if err := w.copyAppend(ctx, c, u, rows); !errors.Is(err, errNoCopy) {
			return err
		}
	}
	if w.dialect == offsets.Postgres && u.Merge != writers.MergeAppend {
		// ON CONFLICT refuses a statement that touches a row twice.
		for _, round := range pgRounds(u, rows) {
			if err := w.insertRows(ctx, ex, u, round); err != nil {
				return err
			}
		}
		return nil
	}
	return w.insertRows(ctx, ex, u, rows)
}

// checkRows checks every row's width, the values of a per-column upsert,
// and that writers.Delete marks only rows of a MergeReplace upsert; it
// reports whether any row is a delete.
func (w *Writer) checkRows(u writers.Upsert, rows [][]any) (deletes bool, err error) {
	width := len(u.Keys) + len(u.Values)
	nk := len(u.Keys)
	for _, r := range rows {
		if len(r) != width {
			return false, fmt.Errorf("upserting into %s: row has %d values, want %d", u.Table, len(r), width)
		}
		if u.Merges != nil {
			if err := w.checkMergeable(u, r); err != nil {
				return false, err
			}
		}
		if r[nk] == writers.Delete {
			if !u.IsDelete(r) {
				return false, fmt.Errorf("%w: a row of %s is a delete (writers.Delete), which only a MergeReplace upsert with keys takes, not %s", writers.ErrBadValue, u.Table, u.Merge)
			}
			deletes = true
		}
	}
	return deletes, nil
}

// foldDeletes keeps the last row of each key of a MergeReplace upsert
// that has delete rows: the rows to upsert and the keys to delete.
func foldDeletes(u writers.Upsert, rows [][]any) (kept [][]any, deleted [][]any) {
	nk := len(u.Keys)
	last := make(map[string]int, len(rows)) // key -> index in rows of its last row
	order := make([]string, 0, len(rows))
	var b []byte
	for i, r := range rows {
		b = foldKey(b[:0], r[:nk])
		if _, ok := last[string(b)]; !ok {
			order = append(order, string(b))
		}
		last[string(b)] = i
	}
	for _, k := range order {
		r := rows[last[k]]
		if u.IsDelete(r) {
			deleted = append(deleted, r[:nk])
		} else {
			kept = append(kept, r)
		}
	}
	return kept, deleted
}

// foldKey appends key values to b so that two keys append the same bytes
// only if they are the same values: each value is its type's tag, its
// length and its bytes.
func foldKey(b []byte, key []any) []byte {
	for _, v := range key {
		var s string
		switch x := v.(type) {
		case string:
			b, s = append(b, 's'), x
		case []byte:
			b, s = append(b, 'b'), string(x)
		case int64:
			b, s = append(b, 'i'), strconv.FormatInt(x, 10)
		case int:
			b, s = append(b, 'i'), strconv.Itoa(x)
		case nil:
			b = append(b, 'n')
			continue
		default:
			b, s = append(b, 'v'), fmt.Sprintf("%T:%v", v, v)
		}
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	return b
}

// insertRows writes rows in multi-row statements (upsertSQL), each within
// the statement bounds.
func (w *Writer) insertRows(ctx context.Context, ex sqlx.ExecerContext, u writers.Upsert, rows [][]any) error {
	perRows := maxParams
	if u.Merge == writers.MergeAppend || u.Merges == nil && u.Merge == writers.MergeReplace {
		perRows = rowsPerStatement
	}
	return w.insertRowsPer(ctx, ex, u, rows, perRows)
}

// insertRowsPer is insertRows with at most perRows rows a statement. A
// write of two full statements or more prepares the full statement once
// on the server and executes it per chunk (binary protocol: the server
// parses it once and no values are escaped into text), which
// BenchmarkRowJobMySQL measured 1.3-1.6x as fast as interpolated text;
// the rest, and a smaller write, goes as text in one round trip each.
func (w *Writer) insertRowsPer(ctx context.Context, ex sqlx.ExecerContext, u writers.Upsert, rows [][]any, perRows int) error {
	width := len(u.Keys) + len(u.Values)
	perRows = min(perRows, maxParams/width)
	what := "upserting into"
	if u.Merge == writers.MergeAppend {
		what = "inserting into"
	}
	args := make([]any, 0, min(len(rows), perRows)*width)
	var full *sql.Stmt // the prepared statement of perRows rows
	defer func() {
		if full != nil {
			full.Close()
		}
	}()
	for len(rows) > 0 {
		n := chunkLen(rows, perRows)
		args = args[:0]
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		var err error
		if p, ok := ex.(preparer); ok && n == perRows && full == nil && len(rows) >= 2*perRows {
			if full, err = p.PrepareContext(ctx, w.upsertSQL(u, n)); err != nil {
				return fmt.Errorf("%s %s: preparing: %w", what, u.Table, err)
			}
		}
		if n == perRows && full != nil {
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = ex.ExecContext(ctx, w.upsertSQL(u, n), args...)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, u.Table, err)
		}
		rows = rows[n:]
	}
	return nil
}

// preparer is what insertRowsPer writes through that can prepare: a
// transaction, the XA writer's connection, the pool.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// deleteKeys deletes the rows with keys (each: the key values in
// u.Keys' order) in multi-row DELETEs: in MySQL/MariaDB
// "WHERE (k1 = ? AND k2 = ?) OR (…)", which its range optimizer reads as
// index lookups, in PostgreSQL "WHERE (k1, k2) IN ((?, ?), …)", and in
// SQLite "WHERE (k1, k2) IN (VALUES (?, ?), …)",
// since an OR chain that long passes SQLite's expression depth limit.
func (w *Writer) deleteKeys(ctx context.Context, ex sqlx.ExecerContext, u writers.Upsert, keys [][]any) error {
	var head, one, sep, tail string
	if w.dialect == offsets.MySQL {
		one = "(" + w.quoteIdent(u.Keys[0]) + " = ?"
		for _, k := range u.Keys[1:] {
			one += " AND " + w.quoteIdent(k) + " = ?"
		}
		head, one, sep = "DELETE FROM "+w.quoteIdent(u.Table)+" WHERE ", one+")", " OR "
	} else if w.dialect == offsets.Postgres {
		// A row list, not VALUES: the placeholders take the key columns'
		// types (a VALUES list's would be text, and BYTEA = text fails).
		head = "DELETE FROM " + w.quoteIdent(u.Table) + " WHERE (" + w.quoteIdents(u.Keys) + ") IN ("
		one, sep, tail = "("+strings.TrimSuffix(strings.Repeat("?, ", len(u.Keys)), ", ")+")", ", ", ")"
	} else {
		head = "DELETE FROM " + w.quoteIdent(u.Table) + " WHERE (" + w.quoteIdents(u.Keys) + ") IN (VALUES "
		one, sep, tail = "("+strings.TrimSuffix(strings.Repeat("?, ", len(u.Keys)), ", ")+")", ", ", ")"
	}
	perRows := min(maxParams/len(u.Keys), rowsPerStatement)
	args := make([]any, 0, min(len(keys), perRows)*len(u.Keys))
	var b strings.Builder
	for len(keys) > 0 {
		n := chunkLen(keys, perRows)
		args = args[:0]
		b.Reset()
		b.WriteString(head)
		for i, k := range keys[:n] {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(one)
			args = append(args, k...)
		}
		b.WriteString(tail)
		if _, err := ex.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("deleting from %s: %w", u.Table, err)
		}
		keys = keys[n:]
	}
	return nil
}

// chunkLen is how many of rows (at least one) the next statement takes:
// at most perRows, and no more than statementBytes of values.
func chunkLen(rows [][]any, perRows int) int {
	n, size := 0, 0
	for n < len(rows) && n < perRows {
		for _, v := range rows[n] {
			size += valueBytes(v)
		}
		if n > 0 && size > statementBytes {
			break
		}
		n++
	}
	return n
}

// valueBytes bounds a value's length in an interpolated statement: a
// string or []byte escaped (at most two bytes a byte) and quoted.
func valueBytes(v any) int {
	switch x := v.(type) {
	case string:
		return 2*len(x) + 12
	case []byte:
		return 2*len(x) + 12
	}
	return 24
}
