// Package exact holds Int, the one exact integer type of the totals: a
// key's amount total, a checkpoint's running total, a sink's sum. Totals
// never wrap and never stop the pipeline: they stay int64 while the value
// fits (the hot path costs an overflow check, no allocation) and move to
// math/big beyond, in memory, in JSON and in text.
//
// It owns no storage format of its own: sinks keep such values as DECIMAL
// (MySQL/MariaDB) or decimal text (SQLite, Redis).
package exact
