// Package event owns the built-in job's input format: the JSON event
// {"id": int64, "key": string, "amount": int64, "ts": unix ms}, its strict
// decoder, the per-key aggregation of a partition's events, and the
// deterministic generator used by `microbatch produce`, the demo and tests,
// with the formats it writes events in (compact, spaced, wide: format.go).
//
// It does not know about Kafka, SQL or batches: callers hand it bytes and
// get events, reasons for rejecting bytes, and aggregates.
package event
