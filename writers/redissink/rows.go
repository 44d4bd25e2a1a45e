package redissink

import (
	"context"
	"fmt"
	"maps"
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
// (FoldRows) adds the rows' values into it with HINCRBY for u.Merge ==
// MergeAdd — values must then be integers, and rows with the same key are
// summed here; sums are exact, past int64 too (see Fold) — or sets them
// with HSET for MergeReplace (the text of the value, see RowField; of rows
// with the same key, the last one's). A row that can't be stored fails the
// whole call with ErrValue, naming the column, and writes nothing. The
// contribution replaces the range's as WriteContribution's does, with the
// same fencing and replay rules.
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
	if err := u.Validate(); err != nil {
		return err
	}
	sums, sets, err := rowFields(u, rows)
	if err != nil {
		return err
	}
	args := c.args(6 + 2*len(sums) + 2*len(sets) + 2*len(dls))
	args = append(args, "m", rangeMark(c.r))
	// In field order, so that the contribution hash, and the fold's
	// verdict on the first field it can't place, are the same every time.
	for _, f := range slices.Sorted(maps.Keys(sums)) {
		args = append(args, f, sums[f].String())
	}
	for _, f := range slices.Sorted(maps.Keys(sets)) {
		args = append(args, f, sets[f])
	}
	return c.finish(ctx, args, dls)
}

// rowFields are rows of u as contribution fields: sums for MergeAdd
// ("a:" fields), texts for MergeReplace ("s:" fields).
func rowFields(u writers.Upsert, rows [][]any) (sums map[string]exact.Int, sets map[string]string, err error) {
	nk, width := len(u.Keys), len(u.Keys)+len(u.Values)
	prefix := "s:"
	if u.Merge == writers.MergeAdd {
		prefix = "a:"
	}
	cols := make([]string, len(u.Values))
	for i, v := range u.Values {
		cols[i] = prefix + rowsSuffix(u.Table, v) + "\x00"
	}
	sums, sets = map[string]exact.Int{}, map[string]string{}
	for _, row := range rows {
		if len(row) != width {
			return nil, nil, fmt.Errorf("%w: a row of %d values for %s, want %d (keys %v then values %v)",
				ErrValue, len(row), u.Table, width, u.Keys, u.Values)
		}
		key, err := RowField(row[:nk])
		if err != nil {
			return nil, nil, fmt.Errorf("%s %v: %w", u.Table, u.Keys, err)
		}
		for i, v := range row[nk:] {
			if err := addRowValue(u, i, key, cols[i]+key, v, sums, sets); err != nil {
				return nil, nil, err
			}
		}
	}
	return sums, sets, nil
}

// addRowValue adds value v of column u.Values[i] of the row with key key
// to sums or sets under contribution field f.
func addRowValue(u writers.Upsert, i int, key, f string, v any, sums map[string]exact.Int, sets map[string]string) error {
	if u.Merge == writers.MergeAdd {
		n, ok := values.Int64(v)
		if !ok {
			return fmt.Errorf("%w: %s.%s is added (MergeAdd) in Redis, which takes integers only; key %q has %v (%T)",
				ErrValue, u.Table, u.Values[i], key, v, v)
		}
		s := sums[f]
		s.Add(n)
		sums[f] = s
		return nil
	}
	s, ok := text(v)
	if !ok {
		return fmt.Errorf("%w: %s.%s of key %q is %v (%T), which has no text form for Redis",
			ErrValue, u.Table, u.Values[i], key, v, v)
	}
	sets[f] = s
	return nil
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
