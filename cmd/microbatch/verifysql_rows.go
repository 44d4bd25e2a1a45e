package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// verify --sql of a row job: the rows recomputed from Kafka against the
// table's rows.
//
// An append (INSERT INTO) is compared as a multiset: each distinct row —
// every column's exact text, NULL apart from '' — must be in the table as
// many times as records made it, no more (a duplicate is extra), no fewer
// (a lost record is missing). An upsert (REPLACE INTO) is compared by key:
// the table's row of a key must be the key's latest record, in offset
// order; a key whose records are in several partitions may hold the
// latest of any of them (the partitions commit in no set order), and a
// key whose latest record is a tombstone must have no row. The table's
// values are compared as the exact text the job wrote (a DECIMAL's
// scale, a string's trailing spaces), a DATETIME as its text in the
// column's precision.

// rowsWant is a row job recomputed.
type rowsWant struct {
	upsert bool
	nk     int
	// append: a row's text -> its values and counts.
	counts map[string]*rowCount
	// upsert: the keys' RowField -> the latest row of each partition.
	keys map[string]*keyRows
}

type rowCount struct {
	vals      []any
	want, got int64
}

type keyRows struct {
	keys   []any
	latest map[int32]sqljob.Row
	seen   bool
}

func newRowsWant(q *sqljob.Query) *rowsWant {
	return &rowsWant{upsert: q.Upserting(), nk: len(q.Upsert().Keys), counts: map[string]*rowCount{}, keys: map[string]*keyRows{}}
}

// add takes one record's row (read in offset order within a partition).
func (w *rowsWant) add(p int32, r sqljob.Row) error {
	if r.Values == nil {
		return nil // filtered out
	}
	if !w.upsert {
		id := rowText(r.Values, nil)
		c := w.counts[id]
		if c == nil {
			c = &rowCount{vals: slices.Clone(r.Values)}
			w.counts[id] = c
		}
		c.want++
		return nil
	}
	keys := r.Values[:w.nk]
	id, err := redissink.RowField(keys)
	if err != nil {
		return err
	}
	k := w.keys[id]
	if k == nil {
		k = &keyRows{keys: slices.Clone(keys), latest: map[int32]sqljob.Row{}}
		w.keys[id] = k
	}
	k.latest[p] = sqljob.Row{Values: slices.Clone(r.Values), Delete: r.Delete}
	return nil
}

// rowsCheck compares the sink's rows with the recomputed ones.
type rowsCheck struct {
	w                                   *rowsWant
	dl                                  *deadLetterMerge
	cols                                []string // Upsert order
	recomputed, sinkRows                int64
	matching, missing, extra, different int64
	listing
}

// sinkRow takes one row of the table (values in Upsert order; fmts says
// how to print a column's DATETIME values).
func (c *rowsCheck) sinkRow(vals []any, fmts []string) error {
	c.sinkRows++
	if !c.w.upsert {
		id := rowText(vals, fmts)
		rc := c.w.counts[id]
		if rc == nil {
			rc = &rowCount{vals: textRow(vals, fmts)}
			c.w.counts[id] = rc
		}
		rc.got++
		return nil
	}
	keys := textRow(vals[:c.w.nk], fmts)
	id, err := redissink.RowField(keys)
	if err != nil {
		return err
	}
	k := c.w.keys[id]
	if k == nil || !k.wantsRow() {
		c.extra++
		c.note(difference{key: showKey(keys), column: "-", want: "(no row)", got: "(row)"})
		return nil
	}
	k.seen = true
	var closest []any
	for _, p := range slices.Sorted(maps.Keys(k.latest)) {
		r := k.latest[p]
		if r.Delete {
			continue
		}
		if rowText(r.Values, nil) == rowText(vals, fmts) {
			c.matching++
			return nil
		}
		if closest == nil {
			closest = r.Values
		}
	}
	c.different++
	for j := c.w.nk; j < len(vals); j++ {
		want, got := cellText(closest[j], ""), cellText(vals[j], at(fmts, j))
		wt, wn := cellRaw(closest[j], "")
		gt, gn := cellRaw(vals[j], at(fmts, j))
		if wt != gt || wn != gn {
			c.note(difference{key: showKey(keys), column: c.cols[j], want: want, got: got})
		}
	}
	return nil
}

// wantsRow: some partition's latest record of the key is a row, not a
// tombstone.
func (k *keyRows) wantsRow() bool {
	for _, r := range k.latest {
		if !r.Delete {
			return true
		}
	}
	return false
}

// finish counts what the sink lacks.
func (c *rowsCheck) finish() {
	if !c.w.upsert {
		ids := slices.Sorted(maps.Keys(c.w.counts))
		for _, id := range ids {
			rc := c.w.counts[id]
			c.recomputed += rc.want
			c.matching += min(rc.want, rc.got)
			switch {
			case rc.got > rc.want:
				c.extra += rc.got - rc.want
				c.note(difference{key: showRow(rc.vals), column: "×", want: strconv.FormatInt(rc.want, 10), got: strconv.FormatInt(rc.got, 10)})
			case rc.got < rc.want:
				c.missing += rc.want - rc.got
				c.note(difference{key: showRow(rc.vals), column: "×", want: strconv.FormatInt(rc.want, 10), got: strconv.FormatInt(rc.got, 10)})
			}
		}
		return
	}
	for _, id := range slices.Sorted(maps.Keys(c.w.keys)) {
		k := c.w.keys[id]
		if !k.wantsRow() {
			continue
		}
		c.recomputed++
		if k.seen {
			continue
		}
		deleted := false
		for _, r := range k.latest {
			deleted = deleted || r.Delete
		}
		if deleted {
			// Another partition's latest record deleted it: no row is right too.
			c.matching++
			continue
		}
		c.missing++
		c.note(difference{key: showKey(k.keys), column: "-", want: "(row)", got: "(no row)"})
	}
}

// print writes the counts and the listing; true when every row matches.
func (c *rowsCheck) print(out io.Writer) bool {
	what := "one per record accepted"
	if c.w.upsert {
		what = "one per key"
	}
	fmt.Fprintf(out, "  %-18s %10d  (%s)\n", "rows recomputed", c.recomputed, what)
	fmt.Fprintf(out, "  %-18s %10d\n", "rows in the sink", c.sinkRows)
	fmt.Fprintf(out, "  %-18s %10d\n", "matching", c.matching)
	fmt.Fprintf(out, "  %-18s %10d  (recomputed, not in the sink)\n", "missing", c.missing)
	fmt.Fprintf(out, "  %-18s %10d  (in the sink only: with an append, a duplicate)\n", "extra", c.extra)
	fmt.Fprintf(out, "  %-18s %10d\n", "different", c.different)
	bad := c.missing + c.extra + c.different
	if bad == 0 {
		return true
	}
	fmt.Fprintf(out, "FAIL: %d rows differ (%d missing, %d extra, %d different)\n", bad, c.missing, c.extra, c.different)
	header := "  row\t\ttimes recomputed\ttimes in the sink"
	if c.w.upsert {
		header = "  key\tcolumn\twant\tgot"
	}
	c.listing.print(out, header)
	return false
}

// recomputeRows reads each partition from its log start up to next and
// makes the job's rows of the records.
func (v sqlVerify) recomputeRows(ctx context.Context, k *topicConn, next map[int32]int64) (expectation, *rowsWant, error) {
	var exp expectation
	want := newRowsWant(v.q)
	err := v.readJob(ctx, k, next, &exp, func(rec *batch.Record) error {
		row, err := v.q.Row(rec.Value, sqljob.Meta{Key: rec.Key, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp})
		if err != nil {
			return err
		}
		return want.add(rec.Partition, row)
	})
	return exp, want, err
}

// openRowsSink opens the SQL sink and binds the query to its table, so
// that rows are recomputed converted to the table's real column types,
// as the job converted them. A missing table is no error: it holds no
// row.
func (v sqlVerify) openRowsSink(ctx context.Context) (*sqlsink.Writer, bool, error) {
	var w *sqlsink.Writer
	if err := strategies.Connect(ctx, v.oj.connectTimeout, func(actx context.Context) (err error) {
		w, err = sqlsink.Open(actx, v.oj.sink)
		return err
	}); err != nil {
		return nil, false, err
	}
	if _, err := w.DB().ExecContext(ctx, "SELECT 1 FROM "+quoteIn(w, v.q.Table())+" WHERE 1 = 0"); err != nil {
		if msg := err.Error(); strings.Contains(msg, "doesn't exist") || strings.Contains(msg, "no such table") || strings.Contains(msg, "does not exist") {
			return w, false, nil
		}
		w.Close()
		return nil, false, fmt.Errorf("reading table %s: %w", v.q.Table(), err)
	}
	if err := v.q.CheckTable(ctx, w.DB()); err != nil {
		w.Close()
		return nil, false, err
	}
	return w, true, nil
}

// compareRowsSQL streams the table's rows into c.
func (v sqlVerify) compareRowsSQL(ctx context.Context, w *sqlsink.Writer, c *rowsCheck) error {
	names := make([]string, len(c.cols))
	for i, n := range c.cols {
		names[i] = quoteIn(w, n)
	}
	if w.Dialect() == offsets.SQLite {
		if err := sqliteTimesAsText(ctx, w, quoteIn(w, v.q.Table()), names); err != nil {
			return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
		}
	}
	rows, err := w.DB().QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s", strings.Join(names, ", "), quoteIn(w, v.q.Table())))
	if err != nil {
		return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
	}
	defer rows.Close()
	fmts, err := timeFormats(rows)
	if err != nil {
		return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
	}
	vals := make([]any, len(names))
	ptrs := make([]any, len(names))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
		}
		if err := c.sinkRow(vals, fmts); err != nil {
			return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading table %s: %w", v.q.Table(), err)
	}
	return nil
}

// compareRowsRedis reads an upsert's hashes, one per value column, as
// compareRedis does for groups: a key's value of a column is its field in
// that column's hash.
func (v sqlVerify) compareRowsRedis(j *redissink.Job, ctx context.Context, c *rowsCheck) error {
	u := v.q.Upsert()
	got := map[string][]any{}
	for ci, col := range u.Values {
		hash, err := j.Rows(ctx, u.Table, col)
		if err != nil {
			return err
		}
		for f, val := range hash {
			vals := got[f]
			if vals == nil {
				vals = make([]any, len(u.Values))
				got[f] = vals
			}
			vals[ci] = val
		}
	}
	for f, vals := range got {
		k := c.w.keys[f]
		if k == nil {
			c.sinkRows++
			c.extra++
			c.note(difference{key: strconv.Quote(f), column: "-", want: "(no row)", got: "(row)"})
			continue
		}
		if err := c.sinkRow(append(slices.Clone(k.keys), vals...), nil); err != nil {
			return err
		}
	}
	// Redis keeps no field for a NULL, so a row whose values are all NULL
	// is no field in any hash: it is there as that row, not missing.
	for _, id := range slices.Sorted(maps.Keys(c.w.keys)) {
		if k := c.w.keys[id]; got[id] == nil && k.wantsNullRow(c.w.nk) {
			if err := c.sinkRow(append(slices.Clone(k.keys), make([]any, len(u.Values))...), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// wantsNullRow: some partition's latest record of the key is a row whose
// values (past the nk key columns) are all NULL.
func (k *keyRows) wantsNullRow(nk int) bool {
	for _, r := range k.latest {
		if !r.Delete && !slices.ContainsFunc(r.Values[nk:], func(v any) bool { return v != nil }) {
			return true
		}
	}
	return false
}

// quoteIn quotes a name in w's database: "name" in PostgreSQL, `name`
// elsewhere.
func quoteIn(w *sqlsink.Writer, name string) string {
	if w.Dialect() == offsets.Postgres {
		return `"` + name + `"`
	}
	return "`" + name + "`"
}

// sqliteTimesAsText selects SQLite's DATE, DATETIME and TIMESTAMP columns
// of names as the text the job stored: the driver parses them into a
// time.Time, and SQLite says nothing of a column's precision, so the
// fraction's digits could not be told back.
func sqliteTimesAsText(ctx context.Context, w *sqlsink.Writer, table string, names []string) error {
	rows, err := w.DB().QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s LIMIT 0", strings.Join(names, ", "), table))
	if err != nil {
		return err
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return err
	}
	for i, t := range types {
		switch t.DatabaseTypeName() {
		case "DATE", "DATETIME", "TIMESTAMP":
			names[i] = fmt.Sprintf("CAST(%s AS TEXT) AS %s", names[i], names[i])
		}
	}
	return rows.Err()
}

// timeFormats is, per column, the Go layout of its date/time values as
// the job writes them ("" for other columns): DATE, DATETIME(p).
func timeFormats(rows *sql.Rows) ([]string, error) {
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	fmts := make([]string, len(types))
	for i, t := range types {
		switch t.DatabaseTypeName() {
		case "DATE":
			fmts[i] = "2006-01-02"
		case "DATETIME", "TIMESTAMP":
			fmts[i] = "2006-01-02 15:04:05"
			p, s, ok := t.DecimalSize()
			if ok && p == 0 {
				p = s // pgx gives a TIMESTAMP(p)'s digits as its scale
			}
			if ok && p > 0 && p <= 6 {
				fmts[i] += "." + strings.Repeat("0", int(p))
			}
		}
	}
	return fmts, nil
}

func at(fmts []string, i int) string {
	if i < len(fmts) {
		return fmts[i]
	}
	return ""
}

// cellRaw is a value's exact text as the job wrote it, and whether it
// is NULL. A number and its text are one value: the table's column type
// decides which the driver gives back.
func cellRaw(v any, layout string) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, false
	case []byte:
		return string(x), false
	case int64:
		return strconv.FormatInt(x, 10), false
	case time.Time:
		// The job wrote UTC text; the driver reads it as that wall clock
		// in the DSN's loc: its fields are the text, whatever loc.
		if layout == "" {
			layout = "2006-01-02 15:04:05.999999"
		}
		return x.Format(layout), false
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), false
	}
	return fmt.Sprint(v), false
}

// cellText is a value for people: quoted text, or NULL.
func cellText(v any, layout string) string {
	t, null := cellRaw(v, layout)
	if null {
		return "NULL"
	}
	if _, isNum := v.(int64); isNum {
		return t
	}
	return strconv.Quote(t)
}

// rowText is a row's identity: each column's exact text, NULL apart.
func rowText(vals []any, fmts []string) string {
	var b strings.Builder
	for i, v := range vals {
		t, null := cellRaw(v, at(fmts, i))
		if null {
			b.WriteString("N;")
			continue
		}
		b.WriteString(strconv.Itoa(len(t)))
		b.WriteByte(':')
		b.WriteString(t)
	}
	return b.String()
}

// textRow is a row of the sink as the recomputation holds rows: text as
// strings, times as the job's text.
func textRow(vals []any, fmts []string) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case []byte:
			out[i] = string(x)
		case time.Time:
			l := at(fmts, i)
			if l == "" {
				l = "2006-01-02 15:04:05.999999"
			}
			out[i] = x.Format(l)
		default:
			out[i] = v
		}
	}
	return out
}

// showRow is a row for people: its values, in parentheses.
func showRow(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = cellText(v, "")
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// verifyRows recomputes a row job and compares its table (or, for an
// upsert into Redis, its hashes) and dead letters with it.
func (v sqlVerify) verifyRows(ctx context.Context, k *topicConn, next map[int32]int64) (expectation, *rowsCheck, string, error) {
	u := v.q.Upsert()
	c := &rowsCheck{cols: append(slices.Clone(u.Keys), u.Values...), listing: listing{show: v.show}}
	if isRedisDSN(v.oj.sink) {
		var r *redissink.Sink
		if err := strategies.Connect(ctx, v.oj.connectTimeout, func(actx context.Context) (err error) {
			r, err = redissink.Open(actx, v.oj.sink)
			return err
		}); err != nil {
			return expectation{}, nil, "", err
		}
		defer r.Close()
		exp, want, err := v.recomputeRows(ctx, k, next)
		if err != nil {
			return exp, nil, r.String(), err
		}
		c.w = want
		c.dl = newDeadLetterMerge(&exp.rejects, v.q.Topic(), exp.start)
		j, err := r.Job(v.oj.job)
		if err != nil {
			return exp, nil, r.String(), err
		}
		if err := v.compareRowsRedis(j, ctx, c); err != nil {
			return exp, nil, r.String(), err
		}
		c.finish()
		return exp, c, r.String(), v.redisDeadLetters(ctx, j, c.dl, k.src.Partitions())
	}
	w, exists, err := v.openRowsSink(ctx)
	if err != nil {
		return expectation{}, nil, "", err
	}
	defer w.Close()
	exp, want, err := v.recomputeRows(ctx, k, next)
	if err != nil {
		return exp, nil, w.String(), err
	}
	c.w = want
	c.dl = newDeadLetterMerge(&exp.rejects, v.q.Topic(), exp.start)
	if exists {
		if err := v.compareRowsSQL(ctx, w, c); err != nil {
			return exp, nil, w.String(), err
		}
	}
	c.finish()
	return exp, c, w.String(), v.sqlDeadLetters(ctx, w, c.dl)
}
