package redissink

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
)

// ResetOffsets moves partitions of a stopped job's topic to the offsets in
// to, in one atomic script, and returns the new epoch and the changes,
// sorted by partition. It is `microbatch offsets reset`:
//
//   - the offsets are set (created if missing);
//   - the job's epoch is raised by one and stamped on the partitions, so
//     that a process of the old run still alive somewhere is fenced on
//     them (offsets.ErrFenced), and the next run claims above it;
//   - the partitions' logged ranges (plan:parts) are dropped, with the
//     contribution of one not folded yet. Otherwise the next run would
//     finish a range planned before the reset (PendingRanges returns it if
//     the new offset happens to be its From), and LogPlan would refuse
//     new ranges while it is pending.
//
// The totals, dead letters and the batch counter stay: a rewind counts the
// records again (dead letters are keyed by offset and are overwritten).
// If a partition's logged range changed between the read and the script
// (the job is running after all), nothing changes and the error is
// offsets.ErrConflict.
func (j *Job) ResetOffsets(ctx context.Context, topic string, to map[int32]int64) (int64, []offsets.Change, error) {
	if err := checkTopic(topic); err != nil {
		return 0, nil, err
	}
	parts := make([]int32, 0, len(to))
	for p, off := range to {
		if p < 0 || off < 0 {
			return 0, nil, fmt.Errorf("writers: bad target %d for partition %d", off, p)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return 0, nil, fmt.Errorf("writers: no partitions to reset")
	}
	slices.Sort(parts)
	keys, args, err := j.resetArgs(ctx, topic, parts, to)
	if err != nil {
		return 0, nil, err
	}
	res, err := resetScript.Run(ctx, j.s.c, keys, args...).StringSlice()
	if err != nil {
		return 0, nil, fmt.Errorf("resetting offsets of job %s: %w", j.name, scriptError(err))
	}
	if len(res) != 1+len(parts) {
		return 0, nil, fmt.Errorf("resetting offsets of job %s: the script answered %d values, want %d", j.name, len(res), 1+len(parts))
	}
	epoch, err := strconv.ParseInt(res[0], 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("resetting offsets of job %s: bad epoch %q", j.name, res[0])
	}
	changes := make([]offsets.Change, len(parts))
	for i, p := range parts {
		changes[i] = offsets.Change{Partition: p, New: to[p]}
		if old := res[1+i]; old != "" {
			changes[i].HadRow = true
			if changes[i].Old, err = strconv.ParseInt(old, 10, 64); err != nil {
				return 0, nil, fmt.Errorf("resetting offsets of job %s: bad old offset %s = %q", j.name, partField(topic, p), old)
			}
		}
	}
	return epoch, changes, nil
}

// resetArgs reads the partitions' logged ranges and returns reset.lua's
// KEYS and ARGV: the logged ranges' contributions are to go, and the
// script checks that the logged ranges did not change since this read.
func (j *Job) resetArgs(ctx context.Context, topic string, parts []int32, to map[int32]int64) (keys []string, args []any, err error) {
	fields := make([]string, len(parts))
	for i, p := range parts {
		fields[i] = partField(topic, p)
	}
	logged, err := j.s.c.HMGet(ctx, j.keys.planParts(), fields...).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("resetting offsets of job %s: %w", j.name, err)
	}
	keys = []string{j.keys.epoch(), j.keys.epochs(), j.keys.offsets(), j.keys.planParts()}
	args = make([]any, 0, 3*len(parts))
	for i, p := range parts {
		entry, _ := logged[i].(string)
		if entry != "" {
			pr := PlannedRange{Range: record.Range{Topic: topic, Partition: p}}
			if err := parsePlanEntry(entry, &pr); err != nil {
				return nil, nil, fmt.Errorf("resetting offsets of job %s: bad plan entry %s = %q", j.name, fields[i], entry)
			}
			keys = append(keys, j.keys.contrib(pr.Range), j.keys.contribDead(pr.Range))
		}
		args = append(args, fields[i], to[p], entry)
	}
	return keys, args, nil
}
