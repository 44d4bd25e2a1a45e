// Package strategies binds the driver (batch), progress storage (offsets)
// and sink writers (writers) into the delivery strategies a user picks with
// `--strategy`. Each strategy is a Task for the driver plus the set-up it
// needs; the built-in job (per-key totals) is the default workload, and
// Config.Transform (NewTransform) runs a user-defined one instead.
//
// It reads no flags or environment: cmd/microbatch fills a Config.
//
// # Strategies
//
// Each micro-batch strategy is a type that owns its sink and its start-up
// (batchStrategy, in run.go): how a group session's partitions are claimed,
// what a previous owner left half done is finished, and where they start;
// beside it in its file are its partition task and commit:
//
//	txn.go        txnStrategy: one transaction per partition
//	single.go     singleStrategy: one transaction per batch
//	sqlstart.go   the SQL sink and mb_offsets claim txn and single share
//	idempotent.go idempotentStrategy: Redis, logged plans, guarded folds
//	control.go    controlStrategy: at-least-once and at-most-once, positions in the consumer group
//
// Run picks the type from batchStrategies, opens its sink, then the source,
// and runs the consumer group (group.go), each session of which starts a
// driver (batch.Driver) through the strategy's start. Checkpoint mode
// (checkpoint*.go) is a pipeline of its own, without driver or group.
// Retries (bounds, the retryable predicate, unknown outcomes) are in
// retry.go.
//
// # Scale-out
//
// Every process of a job (micro-batch strategies) is a member of
// one Kafka consumer group (Config.Group.ID, default the job name), joined with
// sarama's ConsumerGroup and used for membership and partition assignment
// only: the members never read through the group's claims (they are paused)
// and, except for the at-least-once / at-most-once controls, never commit
// offsets to it. Offsets come from and go to the sink.
//
// One group session (a generation) is one driver run over the partitions
// the member was assigned:
//
//	Setup        claim the partitions in the sink: a new epoch, stamped on
//	             their offset rows (fencing whoever held them), and the
//	             stored offsets to plan from
//	             start the driver on them
//	ConsumeClaim wait for the session to end (a rebalance, or a stop)
//	Cleanup      wait for the driver: the batch in flight commits or rolls
//	             back before the partitions are released to the next owner
//
// A member that lost its partitions without noticing — paused past the
// session timeout, a long GC, a network split: a zombie — still runs the
// old session's batch; its commit carries the old epoch and the sink
// refuses it (offsets.ErrFenced). The driver drops that partition and counts
// the fenced commit, and the member leaves the stale session and rejoins
// the group for a fresh assignment.
//
// A group belongs to one job. A process that finds another job's member
// in the group when it first joins (Setup of its first session) is the
// newcomer: it leaves with ErrConfig before it claims anything. The job
// that held the group goes on: its leader assigns the newcomer nothing
// (exclusive), and its members log a warning naming it.
//
// # Broker limits
//
// A few settings are bounded by the brokers, which refuse a
// value outside the bounds only when it is used: a session timeout outside
// group.min/max.session.timeout.ms fails the group join, a Kafka
// transaction timeout above transaction.max.timeout.ms fails the first
// transactional producer — after the run started, in checkpoint mode
// after restarts. Start-up (and the dry run) reads the bounds with
// DescribeConfigs and refuses such a setting at once, naming both numbers.
//
// The preflight never stops a run by itself failing: a broker that does
// not answer DescribeConfigs (an ACL without DescribeConfigs on the
// cluster, a broker that does not implement it) or leaves a value out is
// logged at debug level and the run goes on; the broker's refusal, if it
// comes, is then the check (groupError, and the checkpoint runner for the
// transaction timeout: both ErrConfig).
package strategies
