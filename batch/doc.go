// Package batch is the micro-batch driver: a trigger that fires every
// interval, planning of each batch's offset ranges from the stored
// positions, parallel partition tasks, and progress reports.
//
// It owns the order of events, not their effects: what a task writes and
// how it commits is the strategy's business (package strategies). The
// driver guarantees that
//
//   - batch N+1 is planned only after every task of batch N has returned, so
//     a partition never has two batches in flight;
//   - a partition's next offset moves only when its task reported success,
//     and only to the end of the range it was given;
//   - a stop request (context cancelled) lets the running batch finish,
//     commit or roll back, and then returns without error. Tasks run on a
//     context the stop does not cancel, so a commit is never cut short;
//     it carries the stop instead (WithStop), so that a Read that is
//     waiting for records gives up (ErrStopped, as KafkaSource does)
//     rather than holding the stop up for as long as they don't come.
//     Such a task rolls back, its partition's offset stays, its siblings
//     are not cancelled, a batch-level Commit is skipped, and Run returns
//     nil: the next run reads the range again.
//
// How a `--strategy txn` batch goes from plan to commit, as a user sees
// it, is in docs/commit.md.
package batch
