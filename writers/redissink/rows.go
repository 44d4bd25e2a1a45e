package redissink

import (
	"context"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/values"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// RowField is the field of a row with key values keys in the rows hashes
// (RowsKey). With one key column it is the value's text; with several,
// each value's text prefixed by its length in bytes and a colon,
// concatenated: ("eu", "2026-11-30") -> "2:eu10:2026-11-30", which no other
// key tuple gives, whatever bytes the values hold. The text of a value: a
// string or []byte as it is, integers and floats in decimal (strconv,
// shortest form for floats), a bool as true/false, a time.Time in UTC as
// RFC 3339 with nanoseconds, a fmt.Stringer by its String. Other types and
// nil are refused (ErrValue).
func RowField(keys []any) (string, error) {
	if len(keys) == 0 {
		return "", fmt.Errorf("%w: a row needs key values", ErrValue)
	}
	if len(keys) == 1 {
		s, ok := text(keys[0])
		if !ok {
			return "", fmt.Errorf("%w: key value %v (%T) has no text form", ErrValue, keys[0], keys[0])
		}
		return s, nil
	}
	var b strings.Builder
	for _, k := range keys {
		s, ok := text(k)
		if !ok {
			return "", fmt.Errorf("%w: key value %v (%T) has no text form", ErrValue, k, k)
		}
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String(), nil
}

// text is a key's or a MergeReplace value's text (see RowField).
func text(v any) (string, bool) {
	if i, ok := values.Int64(v); ok {
		return strconv.FormatInt(i, 10), true
	}
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case uint:
		return strconv.FormatUint(uint64(x), 10), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case bool:
		return strconv.FormatBool(x), true
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), true
	case fmt.Stringer:
		return x.String(), true
	}
	return "", false
}

// rowsSuffix is the part of a rows hash's key after mb:{job}:rows:, and the
// part of a contribution field between its prefix and the NUL: the table
// and column are SQL identifiers (Upsert.Validate), so neither holds ":" or
// NUL.
func rowsSuffix(table, column string) string { return table + ":" + column }

// WriteRowsContribution is WriteContribution for a user-defined job: range
// r's results are rows of u (key values then value values, in u's order)
// instead of per-key totals. Each value column v of u is a hash
// RowsKey(job, u.Table, v) with a field per row key (RowField); the fold
// (FoldRows) merges the rows' values into it by the column's rule
// (u.MergeOf):
//
//   - MergeAdd adds with HINCRBY; values must be integers (Go integers or
//     decimal strings without a fraction, of any size); sums are exact,
//     past int64 too (see Fold).
//   - MergeReplace sets the text of the value (see RowField).
//   - MergeMin and MergeMax keep the least or the greatest, compared
//     exactly as decimals; values are Go integers or decimal strings
//     ("-12.50"), stored as the text given.
//   - MergeMinBytes and MergeMaxBytes keep the least or the greatest
//     string, compared byte by byte.
//
// Rows with the same key combine here first: sums add, the least of the
// mins and the greatest of the maxes are kept (the first of equal ones),
// the last row's value replaces. A delete row (writers.Delete, in a
// MergeReplace upsert without Merges: a row job's tombstone) removes its
// key's field from every value hash (HDEL), in the same fold, exactly once
// as the rest; of a key's rows in one contribution the last one, delete
// or not, wins. With u.Merges set (a per-column upsert),
// a nil value is SQL NULL, "no value": it adds nothing and keeps the
// least and greatest as they are (a key without a stored value takes the
// first non-nil one), while a replacing nil removes the field — with or
// without u.Merges: Redis keeps no field for a NULL (a row job's record
// without the column). A nil that u.Merge adds or compares is refused. A
// row that can't be stored fails
// the whole call with ErrValue, naming the column, and writes nothing.
// The contribution replaces the range's as WriteContribution's does, with
// the same fencing and replay rules.
//
// An append (writers.MergeAppend) is refused with writers.ErrBadMerge:
// Redis keeps one field per row key, so two equal rows could never be two.
func (j *Job) WriteRowsContribution(ctx context.Context, epoch int64, r record.Range, u writers.Upsert, rows [][]any, dls []record.DeadLetter) error {
	c, err := j.NewContribution(epoch, r)
	if err != nil {
		return err
	}
	return c.Rows(ctx, u, rows, dls)
}

// Rows completes the contribution with rows of u, as WriteRowsContribution
// writes them, and the dead letters not staged yet. A row that can't be
// stored fails the call with ErrValue before it writes anything (dead
// letters staged before stay staged, invisible, until the range is
// written again).
func (c *Contribution) Rows(ctx context.Context, u writers.Upsert, rows [][]any, dls []record.DeadLetter) error {
	if err := checkUpsert(u); err != nil {
		return err
	}
	f, err := rowFields(u, rows)
	if err != nil {
		return err
	}
	args := c.args(6 + 2*len(f.sums) + 2*len(f.texts) + 2*len(dls))
	args = append(args, "m", rangeMark(c.r))
	// In field order, so that the contribution hash, and the fold's
	// verdict on the first field it can't place, are the same every time.
	for _, k := range slices.Sorted(maps.Keys(f.sums)) {
		args = append(args, k, f.sums[k].String())
	}
	for _, k := range slices.Sorted(maps.Keys(f.texts)) {
		args = append(args, k, f.texts[k])
	}
	return c.finish(ctx, args, dls)
}

// checkUpsert validates u and refuses what Redis can't keep: an append.
func checkUpsert(u writers.Upsert) error {
	if err := u.Validate(); err != nil {
		return err
	}
	if u.Merge == writers.MergeAppend {
		return fmt.Errorf("%w: Redis keeps rows by key (a hash field per key), so it can't append rows to %s, where two equal rows are two rows; "+
			"a row job into Redis must be an upsert: REPLACE INTO %s (PRIMARY KEY (…)) SELECT …, or write the append to a SQL sink",
			writers.ErrBadMerge, u.Table, u.Table)
	}
	return nil
}

// Contribution field prefixes of a user-defined job's rows; each is
// followed by table:column NUL row key (see fold.lua).
const (
	fieldAdd   = "a:" // MergeAdd: the rows' exact sum, added with HINCRBY
	fieldSet   = "s:" // MergeReplace: the text, set with HSET
	fieldUnset = "u:" // MergeReplace of nil (per-column), or a delete row: HDEL; value ""
	fieldMin   = "n:" // MergeMin: a decimal, kept if less than the stored one
	fieldMax   = "x:" // MergeMax: a decimal, kept if greater than the stored one
	fieldMinB  = "l:" // MergeMinBytes: a text, kept if less (byte order) than the stored one
	fieldMaxB  = "g:" // MergeMaxBytes: a text, kept if greater (byte order) than the stored one
)

// contribFields are rows as contribution fields: sums by "a:" field, and
// the text of every other field.
type contribFields struct {
	sums  map[string]exact.Int
	texts map[string]string
}

// rowFields turns rows of u into contribution fields.
func rowFields(u writers.Upsert, rows [][]any) (contribFields, error) {
	nk, width := len(u.Keys), len(u.Keys)+len(u.Values)
	cols := make([]string, len(u.Values))
	for i, v := range u.Values {
		cols[i] = rowsSuffix(u.Table, v) + "\x00"
	}
	f := contribFields{sums: map[string]exact.Int{}, texts: map[string]string{}}
	for _, row := range rows {
		if len(row) != width {
			return f, fmt.Errorf("%w: a row of %d values for %s, want %d (keys %v then values %v)",
				ErrValue, len(row), u.Table, width, u.Keys, u.Values)
		}
		key, err := RowField(row[:nk])
		if err != nil {
			return f, fmt.Errorf("%s %v: %w", u.Table, u.Keys, err)
		}
		if row[nk] == writers.Delete {
			if !u.IsDelete(row) {
				return f, fmt.Errorf("%w: the row of key %q of %s is a delete (writers.Delete), which only a MergeReplace upsert without per-column rules takes",
					ErrValue, key, u.Table)
			}
			for i := range u.Values {
				delete(f.texts, fieldSet+cols[i]+key)
				f.texts[fieldUnset+cols[i]+key] = ""
			}
			continue
		}
		for i, v := range row[nk:] {
			if err := f.add(u, i, key, cols[i]+key, v); err != nil {
				return f, err
			}
		}
	}
	return f, nil
}

// add merges value v of column u.Values[i] of the row with key key into
// the fields; sfx is the field name after its prefix.
func (f contribFields) add(u writers.Upsert, i int, key, sfx string, v any) error {
	m := u.MergeOf(i)
	if v == nil && (u.Merges != nil || m == writers.MergeReplace) {
		if m == writers.MergeReplace {
			delete(f.texts, fieldSet+sfx)
			f.texts[fieldUnset+sfx] = ""
		}
		return nil // no value: nothing to add, nothing to compare
	}
	switch m {
	case writers.MergeAdd:
		n, ok := integer(v)
		if !ok {
			return fmt.Errorf("%w: %s.%s is added (MergeAdd) in Redis, which takes integers only; key %q has %v (%T)",
				ErrValue, u.Table, u.Values[i], key, v, v)
		}
		s := f.sums[fieldAdd+sfx]
		s.AddInt(n)
		f.sums[fieldAdd+sfx] = s
	case writers.MergeMin, writers.MergeMax:
		d, ok := decimal(v)
		if !ok {
			return fmt.Errorf("%w: %s.%s keeps the %s in Redis, which takes integers and decimal strings only; key %q has %v (%T)",
				ErrValue, u.Table, u.Values[i], m, key, v, v)
		}
		name, keep := fieldMin+sfx, -1
		if m == writers.MergeMax {
			name, keep = fieldMax+sfx, 1
		}
		if old, ok := f.texts[name]; !ok || values.CompareDecimal(d, old) == keep {
			f.texts[name] = d
		}
	case writers.MergeMinBytes, writers.MergeMaxBytes:
		t, ok := v.(string)
		if !ok {
			return fmt.Errorf("%w: %s.%s keeps the %s, which takes strings; key %q has %v (%T)",
				ErrValue, u.Table, u.Values[i], m, key, v, v)
		}
		name, keep := fieldMinB+sfx, -1
		if m == writers.MergeMaxBytes {
			name, keep = fieldMaxB+sfx, 1
		}
		if old, ok := f.texts[name]; !ok || strings.Compare(t, old) == keep {
			f.texts[name] = t
		}
	default:
		s, ok := text(v)
		if !ok {
			return fmt.Errorf("%w: %s.%s of key %q is %v (%T), which has no text form for Redis",
				ErrValue, u.Table, u.Values[i], key, v, v)
		}
		delete(f.texts, fieldUnset+sfx)
		f.texts[fieldSet+sfx] = s
	}
	return nil
}

// integer is v as an exact integer: a Go integer or a decimal string
// without a fraction ("12", "-3.00").
func integer(v any) (exact.Int, bool) {
	if n, ok := values.Int64(v); ok {
		return exact.New(n), true
	}
	switch x := v.(type) {
	case uint64:
		return exact.FromBig(new(big.Int).SetUint64(x)), true
	case uint:
		return exact.FromBig(new(big.Int).SetUint64(uint64(x))), true
	case string:
		if !values.IsDecimal(x) || values.HasFraction(x) {
			return exact.Int{}, false
		}
		whole, _, _ := strings.Cut(x, ".")
		n, err := exact.Parse(whole)
		return n, err == nil
	}
	return exact.Int{}, false
}

// decimal is v's decimal text: a Go integer's, or a decimal string as it
// is.
func decimal(v any) (string, bool) {
	if s, ok := v.(string); ok {
		return s, values.IsDecimal(s)
	}
	if n, ok := integer(v); ok {
		return n.String(), true
	}
	return "", false
}

// Rows reads a user-defined job's hash of value column column of table
// (RowsKey): row key (RowField) -> value. It reads in steps, not as one
// snapshot: call it when the job is idle, or read the hash in a MULTI
// yourself.
func (j *Job) Rows(ctx context.Context, table, column string) (map[string]string, error) {
	if err := (writers.Upsert{Table: table, Keys: []string{column}, Values: []string{column}}).Validate(); err != nil {
		return nil, err
	}
	key := RowsKey(j.name, table, column)
	out := map[string]string{}
	it := j.s.c.HScan(ctx, key, 0, "", 1000).Iterator()
	var field string
	for i := 0; it.Next(ctx); i++ {
		if i%2 == 0 {
			field = it.Val()
			continue
		}
		out[field] = it.Val()
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	return out, nil
}
