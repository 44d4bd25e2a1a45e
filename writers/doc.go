// Package writers holds the sink contracts that a Go program can embed
// without the batch driver, and that every sink package implements:
//
//   - Upsert and Merge: rows of any table keyed by some columns, whose
//     values are added to (MergeAdd) or replace (MergeReplace) what the
//     sink holds, or, with a rule per column (Upsert.Merges), also keep
//     the least (MergeMin) or the greatest (MergeMax); Totals is the
//     built-in job's (mb_totals).
//   - TwoPhase and Pending: the Begin / PreCommit / Commit / Abort /
//     Recover life of a checkpoint-mode writer (# Two-phase writers), and
//     ErrTxnLost, the one error after which a job must stop.
//   - Dead letters as every sink stores them: StoredReason,
//     MaxReasonBytes, MaxPayloadBytes.
//   - Errors and retry: ErrBadDSN, ErrBadIdentifier, ErrBadMerge,
//     ErrBadValue, and IsRetryable,
//     which says which SQL errors allow running a transaction again.
//   - DSN forms for all sinks: HasScheme, ParseMySQLURL, WithPassword (a
//     password kept out of the DSN), WithRootCAs, RedisRootCAs and MySQLTLSName
//     (a CA file for the sink's TLS).
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
//
// # Two-phase writers
//
// TwoPhase writers are the sinks of checkpoint mode (Kafka transactions,
// MySQL/MariaDB XA, files, the write-ahead WAL). Each writer instance is
// one sink subtask's and is used by one goroutine; its life is
//
//	Recover(keep)                     once, before anything new is written
//	Begin(txn) Write… PreCommit → p   per checkpoint interval
//	Commit(p) or Abort(p)             when the checkpoint completes or fails
//	Close
//
// Begin(txn) opens the transaction that checkpoint txn will pre-commit;
// while a pre-committed transaction waits for its checkpoint to complete,
// the next one is already open (a writer holds a few of them at once,
// e.g. one Kafka producer or one XA connection per slot).
//
// Which calls may be retried:
//   - Commit is idempotent: committing an already committed transaction is
//     success, so a caller retries it as long as IsRetryable says so, and
//     an outcome-unknown Commit is retried — never followed by Abort.
//   - Abort is idempotent too; aborting something unknown is success.
//   - Write and PreCommit are not retried: a failure leaves the open
//     transaction unusable. The caller fails the checkpoint and recovers.
//
// ErrTxnLost from Commit means the transaction can no longer commit
// (aborted by a timeout, or fenced by another writer with the same id): the
// records in it are gone from the sink and only replaying the input from
// an older position can bring them back. Callers must stop, loudly.
package writers
