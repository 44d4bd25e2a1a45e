package redissink

import (
	"context"
	"fmt"
)

// Claim takes the whole job for this instance: it increments the job's
// epoch, drops every partition's own epoch (ClaimPartitions) so that all
// fall back to the new job epoch, and returns it. Writes carrying an older
// epoch are refused from then on for every partition (offsets.ErrFenced), so
// no earlier instance or group member can write. It is the claim of a
// single instance; the members of a consumer group use ClaimPartitions.
func (j *Job) Claim(ctx context.Context) (int64, error) {
	epoch, err := claimScript.Run(ctx, j.s.c, []string{j.keys.epoch(), j.keys.epochs()}).Int64()
	if err != nil {
		return 0, fmt.Errorf("claiming job %s on %s: %w", j.name, j.s.display, err)
	}
	return epoch, nil
}

// ClaimPartitions takes partitions parts of topic for one member of a
// consumer group, in one atomic step: it takes
// epoch = max(minEpoch, 1 + the job's epoch) — minEpoch is the group
// generation, and the +1 keeps every claim newer than all before it even
// after a deleted group restarted its generations at 1 — raises the job's
// epoch to it and stamps it on parts only. The member that held one of parts
// before is fenced (offsets.ErrFenced) from then on for that partition,
// while the other members keep theirs; so is a whole-job Claim holder, for
// every partition, because partitions without an epoch of their own take the
// job's.
func (j *Job) ClaimPartitions(ctx context.Context, topic string, parts []int32, minEpoch int64) (int64, error) {
	if err := checkTopic(topic); err != nil {
		return 0, err
	}
	args := make([]any, 0, 1+len(parts))
	args = append(args, minEpoch)
	for _, p := range parts {
		if p < 0 {
			return 0, fmt.Errorf("writers: bad partition %d", p)
		}
		args = append(args, partField(topic, p))
	}
	epoch, err := claimPartitionsScript.Run(ctx, j.s.c, []string{j.keys.epoch(), j.keys.epochs()}, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("claiming partitions %v of %s for job %s on %s: %w", parts, topic, j.name, j.s.display, err)
	}
	return epoch, nil
}

// NextBatchID hands out the job's next batch id from a counter all the
// processes of the job share (mb:{job}:batch), so no two of them log the
// same id. Ids increase strictly and are always above every id logged so
// far (plan:last), also when a job logged ids of its own before it used
// the counter.
func (j *Job) NextBatchID(ctx context.Context) (int64, error) {
	id, err := nextBatchScript.Run(ctx, j.s.c, []string{j.keys.batch(), j.keys.lastPlan()}).Int64()
	if err != nil {
		return 0, fmt.Errorf("taking a batch id for job %s: %w", j.name, err)
	}
	return id, nil
}
