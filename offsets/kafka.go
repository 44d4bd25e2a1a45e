package offsets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// KafkaGroup keeps a job's progress where a plain Kafka consumer keeps it:
// as the committed offsets of a consumer group. It is what the
// at-least-once and at-most-once controls use, by design: a commit here is
// never atomic with the results in the sink, which is exactly the gap those
// strategies demonstrate.
type KafkaGroup struct {
	client sarama.Client
	group  string
	topic  string
	// member and generation identify a member of the group's current
	// generation; commits carry them, so Kafka refuses those of a member
	// the group has moved on from.
	member     string
	generation int32
}

// NewKafkaGroup stores offsets of topic under group. The client stays the
// caller's.
func NewKafkaGroup(client sarama.Client, group, topic string) *KafkaGroup {
	return &KafkaGroup{client: client, group: group, topic: topic, generation: sarama.GroupGenerationUndefined}
}

// AsMember returns a copy of g that commits as member memberID of the
// group's generation: Kafka then refuses the commits once the group has
// rebalanced without it (reported as ErrFenced), which a commit without
// membership would not be.
func (g *KafkaGroup) AsMember(memberID string, generation int32) *KafkaGroup {
	c := *g
	c.member, c.generation = memberID, generation
	return &c
}

// Bounded retries of coordinator moves and loads.
const (
	groupAttempts = 10
	groupBackoff  = 200 * time.Millisecond
)

// Load returns the group's committed next offsets; partitions without a
// commit are absent.
func (g *KafkaGroup) Load(ctx context.Context, parts []int32) (map[int32]int64, error) {
	var out map[int32]int64
	err := g.withCoordinator(ctx, func(b *sarama.Broker) error {
		req := sarama.NewOffsetFetchRequest(g.client.Config().Version, g.group, map[string][]int32{g.topic: parts})
		resp, err := b.FetchOffset(req)
		if err != nil {
			return err
		}
		out = make(map[int32]int64, len(parts))
		if errors.Is(resp.Err, sarama.ErrGroupIDNotFound) {
			return nil // a group that never committed (kfake says so; Kafka answers -1s)
		}
		if !errors.Is(resp.Err, sarama.ErrNoError) {
			return resp.Err
		}
		for _, p := range parts {
			blk := resp.GetBlock(g.topic, p)
			if blk == nil {
				return fmt.Errorf("no offset for %s/%d in the reply", g.topic, p)
			}
			if !errors.Is(blk.Err, sarama.ErrNoError) {
				return blk.Err
			}
			if blk.Offset >= 0 {
				out[p] = blk.Offset
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading offsets of group %q: %w", g.group, err)
	}
	return out, nil
}

// Commit stores next as partition's committed offset and returns once the
// coordinator acknowledged it.
func (g *KafkaGroup) Commit(ctx context.Context, partition int32, next int64) error {
	err := g.withCoordinator(ctx, func(b *sarama.Broker) error {
		req := sarama.NewOffsetCommitRequest(g.client.Config(), g.group)
		req.ConsumerID, req.ConsumerGroupGeneration = g.member, g.generation
		req.AddBlock(g.topic, partition, next, 0, "")
		resp, err := b.CommitOffset(req)
		if err != nil {
			return err
		}
		if kerr, ok := resp.Errors[g.topic][partition]; ok && !errors.Is(kerr, sarama.ErrNoError) {
			if errors.Is(kerr, sarama.ErrUnknownMemberId) || errors.Is(kerr, sarama.ErrIllegalGeneration) ||
				errors.Is(kerr, sarama.ErrRebalanceInProgress) || errors.Is(kerr, sarama.ErrFencedInstancedId) {
				return fmt.Errorf("%w: %w", ErrFenced, kerr)
			}
			return kerr
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("committing offset %d of %s/%d for group %q: %w", next, g.topic, partition, g.group, err)
	}
	return nil
}

// withCoordinator runs fn against the group coordinator, finding it again
// after the errors that mean it moved or is loading.
func (g *KafkaGroup) withCoordinator(ctx context.Context, fn func(*sarama.Broker) error) error {
	var err error
	for attempt := 1; attempt <= groupAttempts; attempt++ {
		var b *sarama.Broker
		if b, err = g.client.Coordinator(g.group); err == nil {
			if err = fn(b); err == nil {
				return nil
			}
		}
		if !errors.Is(err, sarama.ErrNotCoordinatorForConsumer) && !errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) &&
			!errors.Is(err, sarama.ErrOffsetsLoadInProgress) && !errors.Is(err, sarama.ErrRequestTimedOut) {
			var kerr sarama.KError
			if errors.As(err, &kerr) {
				return err // a real answer from Kafka: don't hammer it
			}
		}
		_ = g.client.RefreshCoordinator(g.group)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * groupBackoff):
		}
	}
	return err
}
