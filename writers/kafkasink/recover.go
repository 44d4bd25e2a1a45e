package kafkasink

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/microbatch/microbatch/writers"
)

// kafkaTxnData is Pending.Data of a Kafka transaction.
type kafkaTxnData struct {
	ProducerID int64 `json:"producer_id"`
	Epoch      int16 `json:"epoch"`
	// Empty: no record was written, so the broker has no transaction to
	// end (an EndTxn would get INVALID_TXN_STATE).
	Empty bool `json:"empty,omitempty"`
}

// Recover commits keep (this subtask's pending transactions of the latest
// complete checkpoint), then aborts whatever else the subtask's ids have
// open by starting their producers (InitProducerId).
//
// The ids of kept transactions are not re-initialised: an InitProducerId
// bumps the epoch, after which a repeated commit of the kept transaction
// — by a Recover that crashed and runs again, before a newer checkpoint
// completes — would be rejected as fenced although it committed. Their
// ids can't hold anything else (see the package doc, # Slots); Begin initialises them
// when they are next used.
func (w *Txn) Recover(ctx context.Context, keep []writers.Pending) error {
	if err := w.usable(); err != nil {
		return err
	}
	keep = slices.Clone(keep)
	slices.SortStableFunc(keep, func(a, b writers.Pending) int { return cmp.Compare(a.Txn, b.Txn) })
	kept := map[string]bool{}
	for _, p := range keep {
		if err := w.Commit(ctx, p); err != nil {
			return err
		}
		kept[p.ID] = true
	}
	for k := range w.slots {
		s := w.slots[k]
		if kept[w.slotID(k)] {
			if s != nil && (s.state == slotOpen || s.state == slotPreCommitted) {
				if err := w.abortLive(ctx, s); err != nil {
					return err
				}
			}
			continue
		}
		if s != nil {
			w.closeSlot(s)
		}
		s, err := w.newSlot(ctx, k)
		if err != nil {
			return err
		}
		w.slots[k] = s
	}
	w.open = nil
	return nil
}

// Commit commits p: its records (and offsets, WriteOffsets) are decided.
// Read-committed consumers see the records once the partition leaders
// have written the commit markers, a moment after Commit returns (the
// coordinator writes them asynchronously); a reader that must see them
// waits for the partitions' last stable offset. It uses the slot's live producer when
// p is the transaction it holds, and otherwise (recovery, another process,
// a failed live commit) sends EndTxn(commit) with p's producer id and
// epoch to the coordinator. Committing a committed transaction is success.
// An error wrapping writers.ErrTxnLost means p can't commit any more.
func (w *Txn) Commit(ctx context.Context, p writers.Pending) error {
	if err := w.usable(); err != nil {
		return err
	}
	d, err := parsePending(p)
	if err != nil {
		return err
	}
	lost := func(err error) error {
		return fmt.Errorf("kafka sink: committing txn %d on %s (producer id %d, epoch %d): %w: %w", p.Txn, p.ID, d.ProducerID, d.Epoch, writers.ErrTxnLost, err)
	}
	if s := w.liveSlot(p.ID, d); s != nil {
		switch {
		case s.txn == p.Txn && s.state == slotPreCommitted:
			if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err == nil {
				if s.sent > 0 || !s.offsets {
					s.state = slotCommitted
					return nil
				}
				// Offsets only: the producer had nothing to end, the
				// broker has. The EndTxn below ends it.
			}
			// Finish it by identity: the outcome above may be unknown.
			w.closeSlot(s)
		case s.txn == p.Txn && s.state == slotCommitted, s.prevTxn == p.Txn && s.prevState == slotCommitted:
			return nil
		case s.txn == p.Txn && s.state == slotAborted, s.prevTxn == p.Txn && s.prevState == slotAborted:
			return lost(errors.New("it was aborted"))
		case s.txn == p.Txn && s.state == slotOpen:
			return fmt.Errorf("kafka sink: committing txn %d on %s: it is not pre-committed", p.Txn, p.ID)
		default:
			// The broker would answer for the id's newer transaction.
			return fmt.Errorf("kafka sink: committing txn %d on %s: the id has moved on to txn %d, its outcome is unknown here (slot reused too early)", p.Txn, p.ID, s.txn)
		}
	}
	if d.Empty {
		return nil
	}
	err = w.endTxn(ctx, p.ID, d.ProducerID, d.Epoch, true)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sarama.ErrProducerFenced), errors.Is(err, sarama.ErrInvalidProducerEpoch),
		errors.Is(err, sarama.ErrInvalidTxnState), errors.Is(err, sarama.ErrInvalidProducerIDMapping):
		return lost(err)
	}
	return fmt.Errorf("kafka sink: committing txn %d on %s: %w", p.Txn, p.ID, err)
}

// Abort discards p, or the open transaction when p is the zero Pending.
// Aborting what is already aborted, fenced or unknown is success;
// aborting a committed transaction is an error.
func (w *Txn) Abort(ctx context.Context, p writers.Pending) error {
	if err := w.usable(); err != nil {
		return err
	}
	if p.Sink == "" && p.ID == "" && p.Txn == 0 && len(p.Data) == 0 {
		if w.open == nil {
			return nil
		}
		return w.abortLive(ctx, w.open)
	}
	d, err := parsePending(p)
	if err != nil {
		return err
	}
	committed := fmt.Errorf("kafka sink: aborting txn %d on %s: it is already committed", p.Txn, p.ID)
	if s := w.liveSlot(p.ID, d); s != nil {
		switch {
		case s.txn == p.Txn && (s.state == slotOpen || s.state == slotPreCommitted):
			return w.abortLive(ctx, s)
		case s.txn == p.Txn && s.state == slotCommitted, s.prevTxn == p.Txn && s.prevState == slotCommitted:
			return committed
		default:
			// Aborted, or finished before the id's current transaction:
			// an EndTxn now would hit that one.
			return nil
		}
	}
	if d.Empty {
		return nil
	}
	err = w.endTxn(ctx, p.ID, d.ProducerID, d.Epoch, false)
	switch {
	case err == nil, isGoneErr(err):
		return nil
	case errors.Is(err, sarama.ErrInvalidTxnState):
		return fmt.Errorf("%w: %w", committed, err)
	}
	return fmt.Errorf("kafka sink: aborting txn %d on %s: %w", p.Txn, p.ID, err)
}

// isGoneErr: the transaction of that producer id and epoch can't be open
// any more (fenced by a newer epoch, or the id was reassigned).
func isGoneErr(err error) bool {
	return errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch) ||
		errors.Is(err, sarama.ErrInvalidProducerIDMapping) || errors.Is(err, sarama.ErrUnknownProducerID)
}

// abortLive aborts the open or pre-committed transaction of a live slot,
// through its producer, or else by identity after closing the producer.
func (w *Txn) abortLive(ctx context.Context, s *kafkaSlot) error {
	if w.open == s {
		w.open = nil
	}
	txn := s.txn
	// With offsets added (WriteOffsets) the abort below by identity runs
	// too: the producer ends only the transactions it added partitions
	// to, and sends nothing if every record failed before that.
	if err := s.abort(ctx); err == nil && !s.offsets {
		s.state = slotAborted
		// After a failed record — before the abort or in its flush — the
		// producer may have bumped its epoch when it aborted, so the
		// identity PreCommit checks may be stale: start the next
		// transaction on a new producer.
		if s.failed() != nil {
			w.closeSlot(s)
		}
		return nil
	}
	w.closeSlot(s)
	if s.empty() {
		return nil
	}
	err := w.endTxn(ctx, s.id, s.pid, s.epoch, false)
	if err == nil || isGoneErr(err) {
		return nil
	}
	return fmt.Errorf("kafka sink: aborting txn %d on %s (it stays open until the id's next use or its timeout): %w", txn, s.id, err)
}

// liveSlot returns the live producer of id if it has p's identity.
func (w *Txn) liveSlot(id string, d kafkaTxnData) *kafkaSlot {
	for _, s := range w.slots {
		if s != nil && s.id == id && s.pid == d.ProducerID && s.epoch == d.Epoch {
			return s
		}
	}
	return nil
}

func parsePending(p writers.Pending) (kafkaTxnData, error) {
	var d kafkaTxnData
	if p.Sink != "kafka" {
		return d, fmt.Errorf("kafka sink: pending txn %d of sink %q is not a Kafka transaction", p.Txn, p.Sink)
	}
	if p.ID == "" {
		return d, fmt.Errorf("kafka sink: pending txn %d has no transactional id", p.Txn)
	}
	if err := json.Unmarshal(p.Data, &d); err != nil {
		return d, fmt.Errorf("kafka sink: pending txn %d on %s: bad data %q: %v", p.Txn, p.ID, p.Data, err)
	}
	return d, nil
}
