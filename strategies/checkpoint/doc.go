// Package checkpoint is checkpoint mode (`--strategy checkpoint`): a
// continuous, record-at-a-time pipeline made exactly-once by Flink-style
// barrier checkpoints and two-phase-commit sinks, for contrast with the
// micro-batch strategies of package strategies.
//
// It owns the pipeline (sources, keyed operators, sink subtasks), its
// coordinator, the restart loop, the keyed state and the job's part of a
// checkpoint. It does not own where checkpoints are stored
// (offsets.CheckpointStore), the two-phase writers (package writers), the
// Kafka source (batch.KafkaSource) nor the user's Transform: strategies
// passes that in as a Work, so this package never imports strategies.
//
// # Pipeline
//
//	sources (one per partition) ──hash(key)──▶ keyed operators ──▶ sink subtasks
//
// Every Config.Interval the coordinator injects barrier n into every
// source. A source records its next offset and forwards the barrier to
// every operator; an operator aligns (holds an input whose barrier n came
// until all inputs' did), snapshots its per-key totals and forwards the
// barrier; a sink pre-commits its transaction, opens the next and acks
// with the pending transactions. When all acked, the coordinator saves the
// checkpoint (offsets, state, pending transactions) to the state backend
// and only then tells the sinks to commit.
//
// The queues between stages are bounded (chunks of records, a few chunks
// per channel): a slow sink fills them and then blocks the operators,
// which block the sources (backpressure, bounded memory).
//
// # Invariants
//
//   - A pre-committed transaction is committed only after the checkpoint
//     listing it is saved, and a saved checkpoint's transactions are always
//     committed eventually — by the sink, or by recovery after a crash
//     (Commit is idempotent; an outcome-unknown Commit is retried, never
//     aborted).
//   - A sink acks barrier n+1 only after committing every transaction of
//     checkpoint n (the coordinator sends that commit before injecting
//     n+1), so a checkpoint lists all transactions not known committed,
//     and a committed transaction's slot (a Kafka transactional.id, an XA
//     connection) is reused only after a checkpoint that no longer lists
//     it completed: a recovery commit can never hit a newer transaction.
//   - A failed checkpoint (an error anywhere, or Config.Timeout) fails the
//     whole attempt: open and pre-committed transactions of no complete
//     checkpoint are aborted and the pipeline restarts in-process from the
//     latest complete checkpoint — the same recovery as after a crash.
//     ("Aborting and going on" without rewinding would lose the aborted
//     records: the next checkpoint's offsets lie past them.)
//
// # Sinks
//
// The sink DSN picks the two-phase writer (SinkKind): kafka:// a Kafka
// transactional producer per subtask, file:// a temp file renamed on
// commit, an SQL DSN an XA branch (MySQL/MariaDB), or with SinkModeWAL a
// write-ahead sink that keeps the interval's rows in the checkpoint and
// applies them after it completes (MySQL or SQLite). Kafka and files get
// one output record per input event, with its key's running count and
// total; SQL sinks get per-key sums added to mb_totals, like the
// micro-batch strategies, or a Transform's rows.
//
// # State
//
// The job's part of a checkpoint (offsets.Checkpoint.Data) is JSON:
//
//	{"subtasks":2,"state":{"k":[events,amount],…},"pending":[…]}
//
// The keyed state is per key [events, amount], two JSON integers, the
// amount of any size: totals never wrap (exact.Int). That format is what
// every checkpoint on disk holds; a change to it must keep reading them.
package checkpoint
