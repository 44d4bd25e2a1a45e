// Package benchmarks measures what each delivery strategy costs, as ratios
// against baselines measured in the same run on the same data (raw sarama
// consume). Results and how to reproduce them are in benchmarks/README.md.
//
// # The guarantee matrix
//
// The guarantee matrix (`microbatch bench`): every strategy on the same
// data, a clean run (throughput, latency, CPU, memory) and a faulty run
// (random SIGKILLs and targeted crash points; duplicates, losses and
// recovery time), next to two references measured in the same run: the
// raw consume rate (the ceiling) and a hand-written per-record consumer
// (the baseline). Strategies run as `microbatch run` subprocesses of
// Options.Binary, so kills are real SIGKILLs and CPU time and peak RSS are
// the child's own.
//
// # Go benchmarks
//
// The _test.go files hold the benchmarks that measure one question each,
// run with -benchtime=1x against the test servers:
//
//   - BenchmarkTxnVsRawConsume: one `txn` process against the raw sarama
//     consume rate of the same events (the throughput figure of the docs,
//     which docs/figures_test.go keeps in step with benchmarks/README.md);
//   - BenchmarkLatency: checkpoint mode against txn at the same intervals,
//     latency from event time to visible (p50/p99) at a steady input rate
//     and catch-up throughput;
//   - BenchmarkScaleOut: 1, 2 and 3 processes of one job;
//   - BenchmarkTransform: a user-defined job (strategies.NewTransform)
//     against the built-in one.
package benchmarks
