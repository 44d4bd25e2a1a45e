// Package systemtest holds the system tests of microbatch: tests that run
// the microbatch binary as processes against real servers (Apache Kafka or
// the dev broker, MariaDB, Redis, SQLite, files), SIGKILL, stop and restart
// them, and then compare what the sink holds with what was produced. The
// command line itself (flags, config, exit codes, messages) is tested in
// cmd/microbatch.
//
// # Scenarios
//
// One file per scenario:
//
//   - crash_recovery_test.go: every strategy SIGKILLed at random moments and
//     inside batches, restarted until it drains; exactly once, or the
//     controls' promise.
//   - crashpoints_test.go: a kill at each named crash point (MICROBATCH_CRASH_AT).
//   - sqljob_test.go: SQL jobs (run --sql) of every strategy on another
//     program's JSON, killed at each crash point and at random, judged by
//     verify --sql; the controls must fail it.
//   - graceful_stop_test.go: SIGTERM inside a batch.
//   - checkpoint_*_test.go: checkpoint mode killed at random, aligned on
//     checkpoints and at each crash point, for the Kafka, file, XA and
//     write-ahead sinks; recovery commits pre-committed transactions; the
//     memory backend's duplicates.
//   - group_*_test.go: processes of one job in a consumer group: scale-out,
//     a fenced zombie, jobs kept apart, a newcomer refused, kills during
//     the join.
//   - server_kill_test.go: the sink's server (a private MariaDB or Redis,
//     private_server_test.go) SIGKILLed mid-run and back after 20 s on the
//     same data: txn, checkpoint (XA, write-ahead) and idempotent runs wait
//     it out and end exact, a rebalance during the outage too; with
//     --outage-timeout they exit 3.
//   - broker_kill_test.go: the input's broker — a private Apache Kafka
//     (private_kafka_test.go) and the dev broker (--data-dir), each its own
//     process — SIGKILLed mid-run and back after 20 s on its port: txn waits
//     it out and ends exact, checkpoint mode too; with --outage-timeout txn
//     exits 3.
//   - restart_test.go: restarts with default flags, --until-idle with dead
//     members, processes on one host.
//   - aborted_tail_test.go, overflow_test.go, deadletters_memory_test.go,
//     offsets_reset_test.go, compacted_input_test.go: a log ending in an
//     aborted transaction, totals past int64, dead letters larger than the memory bound, offsets reset
//     while a run holds the group, a compacted input whose cleaner kept an
//     emptied batch in front of a batch larger than one fetch.
//
// # Harness
//
// harness.go builds the binary once per test process and runs commands and
// dev brokers (exported: cmd/microbatch's CLI tests use it too). The rest of
// the harness is in the non-scenario test files: stoprun_test.go stops a run
// where a kill must land (on a log line, a crash point or a random delay),
// groupproc_test.go and logpipe_test.go run long-lived processes and read
// their logs, sqljob_harness_test.go writes a SQL job's input and runs,
// kills and verifies it, and sinks_test.go, kafka_readers_test.go,
// file_readers_test.go, group_harness_test.go and checkpoint_harness_test.go
// read and judge what the sinks and topics hold.
//
// The tests need the servers that scripts/test.sh starts (see
// internal/testutil.NeedServer) and are skipped with -short.
package systemtest
