// Package offsets owns where a job's progress lives: the mb_offsets table in
// the SQL sink (Kafka offsets per partition), mb_source_positions (an
// opaque position per source of a plain batch job: source.go), consumer
// group offsets (kafka.go), checkpoints (checkpoint.go), and the epochs
// that fence commits from older instances.
//
// It writes offsets inside a transaction the caller owns (the sink writer's),
// which is what makes "results and offsets in one commit" possible. It does
// not write results and never imports writers.
//
// Invariant: a partition's (or source's) row moves only from the offset a
// batch was planned from to that batch's end, by an instance whose epoch is
// not older than the row's. Any other move is refused (ErrConflict,
// ErrFenced).
//
// The tables' columns are a contract users read in docs/tables.md;
// `microbatch offsets` (docs/operations.md) shows and resets positions.
//
// # Source positions
//
// Progress that is not a Kafka offset: a plain batch job (a CSV loaded in
// chunks, an API paged through, a table copied by timestamp watermark)
// stores one opaque position per source in mb_source_positions, in the same
// transaction as the chunk's results. The position is the caller's own
// encoding (a line number, a byte offset, an RFC 3339 watermark, a page
// token); this package only compares it for equality. What makes it ordered
// is the rule every move follows, the same as mb_offsets': a source moves
// only from the position a chunk started at to the position it ended at,
// by an instance whose epoch is not older than the row's. So a chunk
// commits once — a replay after a crash finds the row already past it and
// is refused (ErrConflict) — and a zombie instance is fenced (ErrFenced).
package offsets
