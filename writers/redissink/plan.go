package redissink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/record"
)

// LogPlan records batch batchID's ranges before the batch is processed: as
// each partition's last logged range (plan:parts), which Fold checks and
// PendingRanges returns, and as plan:{batchID}. It is fenced per partition
// (offsets.ErrFenced if any range's partition was claimed with a newer epoch
// than epoch) and accepts the same plan again (a replay). It refuses
// (offsets.ErrConflict) a different plan for a logged batch id, and, for a
// partition whose logged range is not folded yet, any other range than
// that one: either would mean a replay that reads other records than the
// first attempt. Ids may arrive out of order (processes of a group take
// them from NextBatchID); plan:last keeps the highest. An empty plan is
// refused: there is nothing to replay, and nothing to fence it by.
func (j *Job) LogPlan(ctx context.Context, epoch, batchID int64, ranges []record.Range) error {
	if err := validateRanges(ranges); err != nil {
		return err
	}
	if batchID < 0 {
		return fmt.Errorf("writers: bad batch id %d", batchID)
	}
	if len(ranges) == 0 {
		return fmt.Errorf("writers: batch %d has no ranges to log", batchID)
	}
	plan, err := json.Marshal(ranges)
	if err != nil {
		return fmt.Errorf("logging plan of batch %d: %w", batchID, err)
	}
	k := j.keys
	keys := []string{k.epoch(), k.epochs(), k.offsets(), k.planParts(),
		k.plan(batchID), k.lastPlan(), k.plan(batchID - plansKept)}
	args := make([]any, 0, 3+3*len(ranges))
	args = append(args, epoch, batchID, plan)
	for _, r := range ranges {
		args = append(args, rangeField(r), r.From, r.To)
	}
	if err := logPlanScript.Run(ctx, j.s.c, keys, args...).Err(); err != nil {
		return fmt.Errorf("logging plan of batch %d of job %s: %w", batchID, j.name, scriptError(err))
	}
	return nil
}

// LastPlan returns the logged plan with the highest batch id; ok is false if
// the job has none. It is the recovery of a single instance, which logs
// every partition in every batch: after a restart, re-run it — ranges whose
// offset already equals To were folded and are to be skipped
// (WriteContribution and Fold skip them anyway), the others are re-read and
// re-written. In a consumer group the last plan is just some member's; a
// member finishes what its partitions' previous owners left with
// PendingRanges instead.
func (j *Job) LastPlan(ctx context.Context) (batchID int64, ranges []record.Range, ok bool, err error) {
	id, err := j.s.c.Get(ctx, j.keys.lastPlan()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("reading last plan of job %s: %w", j.name, err)
	}
	plan, err := j.s.c.Get(ctx, j.keys.plan(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return 0, nil, false, fmt.Errorf("reading plan %d of job %s: %w: the plan key is gone", id, j.name, ErrMissing)
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("reading plan %d of job %s: %w", id, j.name, err)
	}
	if err := json.Unmarshal(plan, &ranges); err != nil {
		return 0, nil, false, fmt.Errorf("reading plan %d of job %s: %w", id, j.name, err)
	}
	return id, ranges, true, nil
}

// PlannedRange is a logged range with the batch that logged it.
type PlannedRange struct {
	BatchID int64
	record.Range
}

// parsePlanEntry reads a plan:parts entry, "{batchID} {from} {to}", into
// pr.
func parsePlanEntry(entry string, pr *PlannedRange) error {
	_, err := fmt.Sscanf(entry, "%d %d %d", &pr.BatchID, &pr.From, &pr.To)
	return err
}

// PendingRanges returns, sorted by partition, the logged ranges of the given
// partitions of topic that are not folded yet: those whose stored offset
// still equals the logged From. A process that was just given partitions
// (at a start or a rebalance) finishes these first, before it plans
// anything new for them: it writes each contribution again (the same
// records: the range is fixed) and folds them with their logged BatchID.
// LogPlan refuses other ranges for those partitions until then.
//
// It reads without fencing. The answer is one consistent snapshot, but a
// partition's previous owner may still fold its range afterwards until it
// is fenced by a claim: claim the partitions (ClaimPartitions) before
// calling it.
func (j *Job) PendingRanges(ctx context.Context, topic string, parts []int32) ([]PlannedRange, error) {
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	parts = slices.Clone(parts)
	slices.Sort(parts)
	parts = slices.Compact(parts)
	if len(parts) == 0 {
		return nil, nil
	}
	fields := make([]string, len(parts))
	for i, p := range parts {
		if p < 0 {
			return nil, fmt.Errorf("writers: bad partition %d", p)
		}
		fields[i] = partField(topic, p)
	}
	var logged, stored *redis.SliceCmd
	if _, err := j.s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		logged = p.HMGet(ctx, j.keys.planParts(), fields...)
		stored = p.HMGet(ctx, j.keys.offsets(), fields...)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading pending ranges of job %s: %w", j.name, err)
	}
	var out []PlannedRange
	for i, p := range parts {
		entry, ok := logged.Val()[i].(string)
		if !ok {
			continue // never planned
		}
		var pr PlannedRange
		if err := parsePlanEntry(entry, &pr); err != nil {
			return nil, fmt.Errorf("reading pending ranges of job %s: bad plan entry %s = %q", j.name, fields[i], entry)
		}
		off, ok := stored.Val()[i].(string)
		if !ok || off != strconv.FormatInt(pr.From, 10) {
			continue // folded (or the offset is elsewhere, which Fold reports)
		}
		pr.Topic, pr.Partition = topic, p
		out = append(out, pr)
	}
	return out, nil
}

// validateRange refuses a range the scripts can't take.
func validateRange(r record.Range) error {
	if !record.ValidTopic(r.Topic) || r.Partition < 0 || r.From < 0 || r.From >= r.To {
		// From == To is refused too: an empty range would look "not yet
		// folded" after its fold as well, and fold twice.
		return fmt.Errorf("writers: bad range %v (want a Kafka topic name, partition >= 0, 0 <= from < to)", r)
	}
	return nil
}

// validateRanges checks each range and that no partition appears twice: two
// ranges of one partition in one fold would both be checked against the
// same stored offset.
func validateRanges(rs []record.Range) error {
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		if err := validateRange(r); err != nil {
			return err
		}
		if seen[rangeField(r)] {
			return fmt.Errorf("writers: partition %s appears twice in one batch", rangeField(r))
		}
		seen[rangeField(r)] = true
	}
	return nil
}
