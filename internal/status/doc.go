// Package status shows a running job to people and to monitoring:
// Prometheus metrics (/metrics), the recent progress as JSON
// (/api/progress) and a small self-refreshing HTML page (/) drawn from it,
// all served on one address (`microbatch run --metrics-addr`).
//
// It owns the metrics, the last batches' history and the HTTP server. It
// does not run the job or read settings: the CLI feeds a Recorder from the
// strategies' hooks (Progress, CheckpointFailed, Recovered). What it shows
// is what it is given, so the sink must reach it in its display form — a
// password given to a Recorder would be served to anyone who can reach the
// address.
package status
