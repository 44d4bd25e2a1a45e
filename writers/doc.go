// Package writers holds the sink contracts that a Go program can embed
// without the batch driver, and that every sink package implements:
//
//   - Upsert and Merge: rows of any table keyed by some columns, whose
//     values are added to (MergeAdd) or replace (MergeReplace) what the
//     sink holds; Totals is the built-in job's (mb_totals).
//   - TwoPhase and Pending: the Begin / PreCommit / Commit / Abort /
//     Recover life of a checkpoint-mode writer (twophase.go), and
//     ErrTxnLost, the one error after which a job must stop.
//   - Dead letters as every sink stores them: StoredReason,
//     MaxReasonBytes, MaxPayloadBytes.
//   - Errors and retry: ErrBadDSN, ErrBadIdentifier, and IsRetryable,
//     which says which SQL errors allow running a transaction again.
//   - DSN forms for all sinks: HasScheme, ParseMySQLURL, WithPassword (a
//     password kept out of the DSN), WithRootCAs and MySQLTLSName (a CA
//     file for the sink's TLS).
//
// The sinks are one package each:
//
//   - writers/sqlsink: MySQL/MariaDB and SQLite transactions (rows, dead
//     letters, Kafka offsets or any source's position together), and the
//     checkpoint-mode XA and WAL writers.
//   - writers/redissink: the idempotent strategy's Redis protocol.
//   - writers/kafkasink: Kafka transactions that another process can
//     finish (checkpoint mode, consume-transform-produce).
//   - writers/filesink: files committed by an atomic rename.
//   - writers/writertest: the conformance suite every sink passes.
//
// Writers never import the driver (batch) or the strategies; they take
// plain values and a context, and leave retry policy to the caller
// (IsRetryable says which errors allow it) except where a method says it
// retries.
package writers
