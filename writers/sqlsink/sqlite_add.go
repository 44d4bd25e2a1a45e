package sqlsink

import (
	"database/sql/driver"

	"modernc.org/sqlite"

	"github.com/microbatch/microbatch/internal/exact"
)

// sqliteAddFunc names the SQLite function that a MergeAdd upsert on SQLite
// adds with (upsertParts): mb_add(a, b) is a + b, exact, when both are
// integers — INTEGER values, or TEXT holding a decimal integer of any size
// (what it returns beyond int64) — as an INTEGER while the sum fits in
// int64 and as decimal TEXT beyond. For anything else (a NULL, a REAL,
// other text or a BLOB) it returns NULL, and the upsert falls back to
// SQLite's own +, so those keep SQLite's semantics.
//
// The TEXT is kept only by a column that converts nothing (no declared
// type, as mb_totals.amount): a column of INTEGER or NUMERIC affinity
// turns it into a REAL, as SQLite's + would have.
const sqliteAddFunc = "mb_add"

// The driver gives a function only to connections opened after it is
// registered; registering at init, once per process, reaches them all.
func init() {
	sqlite.MustRegisterDeterministicScalarFunction(sqliteAddFunc, 2, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		return sqliteAdd(args[0], args[1]), nil
	})
}

func sqliteAdd(a, b driver.Value) driver.Value {
	if x, ok := a.(int64); ok {
		if y, ok := b.(int64); ok { // the common case: no allocation unless it overflows
			s := exact.New(x)
			s.Add(y)
			return s.Value()
		}
	}
	x, ok := sqliteInt(a)
	if !ok {
		return nil
	}
	y, ok := sqliteInt(b)
	if !ok {
		return nil
	}
	x.AddInt(y)
	return x.Value()
}

// sqliteInt is v as an exact integer, if it is one: an INTEGER or a TEXT
// holding a decimal integer.
func sqliteInt(v driver.Value) (exact.Int, bool) {
	switch x := v.(type) {
	case int64:
		return exact.New(x), true
	case string:
		n, err := exact.Parse(x)
		return n, err == nil
	}
	return exact.Int{}, false
}
