// Package event owns the built-in job's input format: the JSON event
// {"id": int64, "key": string, "amount": int64, "ts": unix ms}, its strict
// decoder, the per-key aggregation of a partition's events, and the
// deterministic generator used by `microbatch produce`, the demo and tests.
//
// It does not know about Kafka, SQL or batches: callers hand it bytes and
// get events, reasons for rejecting bytes, and aggregates.
package event
