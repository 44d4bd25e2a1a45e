// Package examples holds runnable programs that use microbatch as a
// library, as a user's own module would: each subdirectory is a main
// package with a README that says how to run it and which environment
// variable makes it kill itself mid-way (the tests' hook).
//
//   - quickstart: the built-in per-key totals job through strategies.Run
//     (`txn`), one line per batch, stopping when idle.
//   - csv-import: a CSV file loaded into a SQL table in chunks, the byte
//     offset as the source position (mb_source_positions), bad lines
//     dead-lettered, all in one transaction per chunk.
//   - kafka-enrich: Kafka to Kafka with kafkasink.Txn, output records
//     and input offsets in one Kafka transaction (KIP-98).
//   - custom-agg: a user-defined job (strategies.NewTransform) into the
//     program's own table with `txn`.
//   - sql-job: a SQL job (sqljob.Compile, strategies.SQLTransform) into
//     the table the query names, created if missing, on MySQL/MariaDB.
//
// This package itself has no code, only the tests.
//
// # Tests
//
// The tests build each example and run it as a user would, against the
// test suite's servers or an in-process dev broker, kill it mid-way with
// SIGKILL and restart it, and check the result is exact.
//
// TestExternalModule builds every example as a program of a separate
// module that requires this one, to prove the public API is enough, and
// TestExamplesUsePublicAPI refuses an import of an internal package.
// TestQuickstartReadme runs the commands of quickstart/README.md. The
// list of examples in docs/library.md is the users' view of the same.
package examples
