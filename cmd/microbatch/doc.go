// Command microbatch moves events from Kafka into a SQL sink exactly once,
// in micro-batches, and comes with the tools to see it do so: a dev broker,
// a deterministic producer and a verifier.
//
// # Subcommands
//
//   - run (run.go, dryrun.go, logging.go, status.go): a job, with any
//     --strategy, until it is stopped or, with --until-idle, caught up;
//     --dry-run checks settings and servers and prints the plan;
//     --metrics-addr serves metrics and the status page; --sql (sqljob.go)
//     runs a SQL job in place of the built-in one.
//   - broker (broker.go): the embedded development Kafka broker as its own
//     process.
//   - produce (produce.go): deterministic events into a topic, and the
//     totals a sink must end with.
//   - verify (verify.go): what the sink holds for a job against those
//     totals, judged by the strategy's promise; with --sql (verifysql.go),
//     a SQL job's table against the query recomputed from Kafka up to the
//     job's positions, group by group.
//   - offsets show|reset (offsets.go): where a job stands, and moving a
//     stopped one.
//   - bench (bench.go): the guarantee matrix of package benchmarks.
//
// The command owns what a user types and sees: flags, the MICROBATCH_*
// environment and the config file (read with viper here and nowhere
// else: the library packages take plain structs), Kafka TLS and SASL
// settings and password files (security.go), and the exit codes
// (config.go, main.go's exitCode, the only mapping from errors to codes).
// The work itself is the library's: package strategies runs jobs,
// internal/status shows them. Users' documentation is in the repository's
// README.md and docs/ (settings: docs/configuration.md; exit codes:
// docs/operations.md).
package main
