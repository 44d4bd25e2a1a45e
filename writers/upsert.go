package writers

import (
	"fmt"
	"regexp"

	"github.com/microbatch/microbatch/internal/values"
)

// Tables written by the built-in job besides mb_offsets.
const (
	TotalsTable      = "mb_totals"
	DeadLettersTable = "mb_dead_letters"
)

// Merge says how an upsert combines a new value with the stored one.
type Merge int

const (
	// MergeAdd adds the new values to the stored ones (counters, sums).
	MergeAdd Merge = iota
	// MergeReplace overwrites the stored values.
	MergeReplace
	// MergeMin keeps the least of the stored and the new value. Only in
	// Upsert.Merges (per-column upserts).
	MergeMin
	// MergeMax keeps the greatest of the stored and the new value. Only in
	// Upsert.Merges (per-column upserts).
	MergeMax
	// MergeMinBytes keeps the least of the stored and the new text,
	// compared byte by byte (as a VARBINARY, or memcmp: 'B' < 'a' < 'ab');
	// the values are Go strings or nil. Only in Upsert.Merges.
	MergeMinBytes
	// MergeMaxBytes keeps the greatest text, as MergeMinBytes.
	MergeMaxBytes
	// MergeAppend inserts every row as a row of its own: an Upsert
	// without Keys (a row job's append, as INSERT INTO … SELECT), where
	// two equal rows are two rows. Only as Upsert.Merge, never in Merges.
	MergeAppend
)

// RowsPerStatement is the most rows a SQL sink puts in one multi-row
// statement of a row job (INSERT … VALUES (…), (…), …, its upsert, a
// DELETE's keys); wide rows take fewer, a statement holding at most
// 30,000 values and about 4 MiB of them (writers/sqlsink).
const RowsPerStatement = 1000

// Delete, as the first value column's value of a row of a MergeReplace
// upsert, makes that row a delete of its key: the row with the key, if
// any, is removed (a Kafka tombstone in a row job). The row's other value
// columns are ignored. Within one write, the last row of a key wins,
// whether it replaces or deletes.
var Delete any = deleteRow{}

type deleteRow struct{}

func (deleteRow) String() string { return "DELETE" }

// IsDelete reports whether row, a row of u, deletes its key (Delete).
func (u Upsert) IsDelete(row []any) bool {
	return u.Merge == MergeReplace && u.Merges == nil && len(row) > len(u.Keys) && row[len(u.Keys)] == Delete
}

// Bytes reports whether m keeps the least or the greatest text
// (MergeMinBytes, MergeMaxBytes): its values are strings, not numbers.
func (m Merge) Bytes() bool { return m == MergeMinBytes || m == MergeMaxBytes }

// Takes reports whether a per-column upsert's column merged by m can take
// v: nil, or for MergeMinBytes and MergeMaxBytes a string, for MergeAdd,
// MergeMin and MergeMax a Go integer or a decimal string; MergeReplace
// takes anything.
func (m Merge) Takes(v any) bool {
	switch {
	case m == MergeReplace || v == nil:
		return true
	case m.Bytes():
		_, ok := v.(string)
		return ok
	}
	return values.Mergeable(v)
}

func (m Merge) String() string {
	switch m {
	case MergeAdd:
		return "add"
	case MergeReplace:
		return "replace"
	case MergeMin:
		return "min"
	case MergeMax:
		return "max"
	case MergeMinBytes:
		return "min bytes"
	case MergeMaxBytes:
		return "max bytes"
	case MergeAppend:
		return "append"
	}
	return fmt.Sprintf("Merge(%d)", int(m))
}

// Upsert describes rows keyed by Keys whose Values are merged into what the
// table holds. Names must be plain identifiers.
//
// Merges, if not nil, gives each value column its own rule (a "per-column
// upsert", as a SQL job's COUNT/SUM add, MIN and MAX keep the least and
// the greatest): Merges[i] is the rule of Values[i], and Merge is not
// used. A per-column upsert treats a nil value as SQL NULL, "no value":
// MergeAdd, MergeMin and MergeMax keep the stored value, a stored NULL
// takes the new one, and MergeReplace stores NULL. Its values of the
// columns that are not replaced are Go integers, decimal strings (an
// optional sign, digits and an optional fraction: "-12.50", "123",
// "0.000000001"; no exponent), merged exactly, or nil.
//
// With Merges nil every value column uses Merge, as before per-column
// rules existed (MergeAdd or MergeReplace).
type Upsert struct {
	Table  string
	Keys   []string
	Values []string
	Merge  Merge
	// Merges is kept out of JSON when nil, so an Upsert without it
	// encodes as it always did (the write-ahead sink keeps Upserts in
	// checkpoints).
	Merges []Merge `json:",omitempty"`
}

// MergeOf is the rule of value column i (Values[i]).
func (u Upsert) MergeOf(i int) Merge {
	if u.Merges != nil {
		return u.Merges[i]
	}
	return u.Merge
}

// Totals is the built-in job's upsert: rows (job, k, events, amount).
var Totals = Upsert{Table: TotalsTable, Keys: []string{"job", "k"}, Values: []string{"events", "amount"}, Merge: MergeAdd}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Validate checks the names, that there are key and value columns (value
// columns only for MergeAppend), and the merge rules: Merge is MergeAdd,
// MergeReplace or MergeAppend; Merges, if not nil, has a known rule for
// each value column.
func (u Upsert) Validate() error {
	if u.Merge == MergeAppend {
		if len(u.Keys) != 0 || len(u.Values) == 0 || u.Merges != nil {
			return fmt.Errorf("%w: an append into %q has value columns only: no Keys, no Merges", ErrBadMerge, u.Table)
		}
	} else if len(u.Keys) == 0 || len(u.Values) == 0 {
		return fmt.Errorf("%w: upsert into %q needs key and value columns", ErrBadIdentifier, u.Table)
	}
	for _, n := range append(append([]string{u.Table}, u.Keys...), u.Values...) {
		if !identRE.MatchString(n) {
			return fmt.Errorf("%w: %q", ErrBadIdentifier, n)
		}
	}
	if u.Merges == nil {
		if u.Merge != MergeAdd && u.Merge != MergeReplace && u.Merge != MergeAppend {
			return fmt.Errorf("%w: upsert into %s has Merge %v; MergeMin and MergeMax are per-column rules (Merges)", ErrBadMerge, u.Table, u.Merge)
		}
		return nil
	}
	if len(u.Merges) != len(u.Values) {
		return fmt.Errorf("%w: upsert into %s has %d merge rules for %d value columns %v", ErrBadMerge, u.Table, len(u.Merges), len(u.Values), u.Values)
	}
	for i, m := range u.Merges {
		if m < MergeAdd || m > MergeMaxBytes { // MergeAppend is a whole upsert's, not a column's
			return fmt.Errorf("%w: upsert into %s: column %s has unknown rule %v", ErrBadMerge, u.Table, u.Values[i], m)
		}
	}
	return nil
}
