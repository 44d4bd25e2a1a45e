package writers

import (
	"context"
	"encoding/json"
	"errors"
)

// Two-phase-commit writers: the sinks of checkpoint mode (Kafka
// transactions, MySQL/MariaDB XA, files). Each writer instance is one sink
// subtask's and is used by one goroutine; its life is
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

// Pending identifies a pre-committed transaction: everything Commit or
// Abort need, including after a restart in another process. It is stored
// in the checkpoint, so it is plain JSON.
type Pending struct {
	Sink    string          `json:"sink"`    // writer kind: kafka, xa or file
	Subtask int             `json:"subtask"` // the sink subtask that wrote it
	Txn     int64           `json:"txn"`     // the checkpoint it belongs to
	ID      string          `json:"id"`      // transactional.id, xid or file name
	Data    json.RawMessage `json:"data,omitempty"`
}

// TwoPhase is the part of the life above that is the same for every
// two-phase writer; writing records is each writer's own (messages, rows,
// lines).
type TwoPhase interface {
	// Recover commits the listed transactions (this subtask's pending ones
	// of the latest complete checkpoint) and aborts every other
	// transaction this subtask may have left open or prepared.
	Recover(ctx context.Context, keep []Pending) error
	// Begin opens transaction txn.
	Begin(ctx context.Context, txn int64) error
	// PreCommit makes the open transaction durable but invisible, and says
	// how to finish it. No transaction is open afterwards.
	PreCommit(ctx context.Context) (Pending, error)
	// Commit makes a pre-committed transaction visible. Idempotent.
	Commit(ctx context.Context, p Pending) error
	// Abort discards a pre-committed transaction, or the open one when p
	// is the zero Pending. Idempotent.
	Abort(ctx context.Context, p Pending) error
	// Close releases the writer. An open transaction is left to Recover
	// (or to the server's timeout), never committed. Safe to call twice.
	Close() error
}

// ErrTxnLost: a pre-committed transaction can no longer be committed (the
// broker aborted it after its timeout, or a newer writer fenced it). Stop
// the job: the records in it are not in the sink.
var ErrTxnLost = errors.New("writers: pre-committed transaction lost")
