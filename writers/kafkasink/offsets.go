package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// WriteOffsets adds a consumer group's offsets to the open transaction:
// offsets[topic][partition] is the next offset to consume. They become the
// group's committed offsets when the transaction commits, together with
// its records, and are discarded if it aborts — the consume-transform-produce
// loop of KIP-98: a job that reads its input by these offsets and writes
// its output through this writer neither loses nor duplicates an input
// record across crashes. Readers of the offsets (OffsetFetch, a consumer
// group joining) see them only after the commit; pending ones are not
// visible.
//
// Unlike sarama's AddOffsetsToTxn, which keeps the offsets in memory until
// its producer commits, WriteOffsets sends them to the brokers at once
// (AddOffsetsToTxn, then TxnOffsetCommit with this transaction's producer
// id and epoch). So they are part of the transaction PreCommit hands out:
// a Commit of its Pending by another process commits them too.
//
// The offsets are committed as a standalone consumer's (generation -1, no
// member id): the group must not have live members that commit offsets of
// their own. Calling it again in the same transaction replaces the
// offsets of the partitions it names. An error leaves the transaction
// unable to pre-commit: abort it.
func (w *Txn) WriteOffsets(ctx context.Context, group string, offsets map[string]map[int32]int64) error {
	if err := w.usable(); err != nil {
		return err
	}
	s := w.open
	if s == nil {
		return errors.New("kafka sink: writing offsets outside a transaction (Begin first)")
	}
	fail := func(err error) error {
		err = fmt.Errorf("kafka sink: txn %d on %s: writing offsets of group %s: %w", s.txn, s.id, group, err)
		s.fail(err) // PreCommit refuses the transaction
		return err
	}
	// Bad arguments fail the transaction too: a caller that went on and
	// committed its records without their offsets would duplicate them
	// after a restart.
	if group == "" {
		return fail(errors.New("empty consumer group"))
	}
	topics := map[string][]*sarama.PartitionOffsetMetadata{}
	for topic, parts := range offsets {
		for part, off := range parts {
			if off < 0 {
				return fail(fmt.Errorf("negative offset %d for %s/%d", off, topic, part))
			}
			topics[topic] = append(topics[topic], &sarama.PartitionOffsetMetadata{Partition: part, Offset: off, LeaderEpoch: -1})
		}
	}
	if len(topics) == 0 {
		return nil
	}
	s.offsets = true // from here on the broker may hold them
	err := w.coordinated(ctx, s.id, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{
			Version: 3, TransactionalID: s.id, ProducerID: s.pid, ProducerEpoch: s.epoch, GroupID: group,
		})
		if err != nil {
			return 0, err
		}
		return res.Err, nil
	})
	if err != nil {
		return fail(fmt.Errorf("AddOffsetsToTxn: %w", err))
	}
	backoff := coordinatorBackoffMin
	for attempt := 1; ; attempt++ {
		err = w.txnOffsetCommit(s, group, topics)
		if err == nil {
			return nil
		}
		if !retriableCoordinatorErr(err) || attempt >= maxCoordinatorAttempts {
			return fail(fmt.Errorf("TxnOffsetCommit: %w", kafkaError(err)))
		}
		_ = w.client.RefreshCoordinator(group)
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("TxnOffsetCommit: %w (after %v)", ctx.Err(), kafkaError(err)))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, coordinatorBackoffMax)
	}
}

// txnOffsetCommit sends one TxnOffsetCommit to group's coordinator and
// returns its first error, top-level or per partition.
func (w *Txn) txnOffsetCommit(s *kafkaSlot, group string, topics map[string][]*sarama.PartitionOffsetMetadata) error {
	b, err := w.client.Coordinator(group)
	if err != nil {
		return err
	}
	res, err := b.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{
		Version: 3, TransactionalID: s.id, GroupID: group, ProducerID: s.pid, ProducerEpoch: s.epoch,
		GenerationID: -1, Topics: topics,
	})
	if err != nil {
		return err
	}
	for topic, parts := range res.Topics {
		for _, p := range parts {
			if p.Err != sarama.ErrNoError {
				return fmt.Errorf("%s/%d: %w", topic, p.Partition, kafkaErr{p.Err})
			}
		}
	}
	return nil
}
