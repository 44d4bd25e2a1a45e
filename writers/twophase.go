package writers

import (
	"context"
	"encoding/json"
	"errors"
)

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
