package writers

import (
	"fmt"
	"regexp"
)

// Tables written by the built-in job besides mb_offsets.
const (
	TotalsTable      = "mb_totals"
	DeadLettersTable = "mb_dead_letters"
)

// Merge says how an upsert combines a new row with an existing one.
type Merge int

const (
	// MergeAdd adds the new values to the stored ones (counters, sums).
	MergeAdd Merge = iota
	// MergeReplace overwrites the stored values.
	MergeReplace
	// MergeMin keeps the least of the stored and the new value.
	MergeMin
	// MergeMax keeps the greatest of the stored and the new value.
	MergeMax
)

// Upsert describes rows keyed by Keys whose Values are merged into what the
// table holds. Names must be plain identifiers.
type Upsert struct {
	Table  string
	Keys   []string
	Values []string
	Merge  Merge
	// Merges, when set, is the rule of each value column (len(Values)),
	// and a nil value is SQL NULL: no value to merge.
	Merges []Merge
}

// MergeOf is the rule of value column i.
func (u Upsert) MergeOf(i int) Merge {
	if u.Merges != nil {
		return u.Merges[i]
	}
	return u.Merge
}

// Totals is the built-in job's upsert: rows (job, k, events, amount).
var Totals = Upsert{Table: TotalsTable, Keys: []string{"job", "k"}, Values: []string{"events", "amount"}, Merge: MergeAdd}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Validate checks the names and that there are key and value columns.
func (u Upsert) Validate() error {
	if len(u.Keys) == 0 || len(u.Values) == 0 {
		return fmt.Errorf("%w: upsert into %q needs key and value columns", ErrBadIdentifier, u.Table)
	}
	for _, n := range append(append([]string{u.Table}, u.Keys...), u.Values...) {
		if !identRE.MatchString(n) {
			return fmt.Errorf("%w: %q", ErrBadIdentifier, n)
		}
	}
	return nil
}
