package redissink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/record"
)

// Offsets returns the job's next offsets for topic, by partition.
func (j *Job) Offsets(ctx context.Context, topic string) (map[int32]int64, error) {
	all, err := j.s.c.HGetAll(ctx, j.keys.offsets()).Result()
	if err != nil {
		return nil, fmt.Errorf("reading offsets of job %s: %w", j.name, err)
	}
	out := make(map[int32]int64)
	for f, v := range all {
		t, p, ok := strings.Cut(f, "/")
		if !ok || t != topic {
			continue
		}
		part, perr := strconv.ParseInt(p, 10, 32)
		off, oerr := strconv.ParseInt(v, 10, 64)
		if perr != nil || oerr != nil {
			return nil, fmt.Errorf("reading offsets of job %s: bad entry %q = %q", j.name, f, v)
		}
		out[int32(part)] = off
	}
	return out, nil
}

// InitOffsets sets the start offset of each partition that has none yet.
// Existing offsets never move: a restart passing its configured start again
// resumes where the job was.
func (j *Job) InitOffsets(ctx context.Context, topic string, start map[int32]int64) error {
	if err := checkTopic(topic); err != nil {
		return err
	}
	key := j.keys.offsets()
	_, err := j.s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part, off := range start {
			if part < 0 || off < 0 {
				return fmt.Errorf("writers: bad start %d for partition %d", off, part)
			}
			p.HSetNX(ctx, key, partField(topic, part), off)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("initialising offsets of job %s: %w", j.name, err)
	}
	return nil
}

// Position is a partition's stored progress (Positions).
type Position struct {
	Partition  int32
	NextOffset int64
	// Epoch is the partition's own epoch (mb:{job}:epochs), else the
	// job's (mb:{job}:epoch): the epoch a write must not be older than.
	Epoch int64
	// Logged is the partition's last logged range (plan:parts), if any;
	// Pending says it is not folded yet (the offset is still at its From):
	// the job's next run finishes it first.
	Logged  *PlannedRange
	Pending bool
}

// Positions returns the stored progress of the job's partitions of topic
// that have an offset, by partition, read as one snapshot (MULTI). It is
// for inspection (`microbatch offsets show`).
func (j *Job) Positions(ctx context.Context, topic string) (map[int32]Position, error) {
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	var offs, epochs, logged *redis.MapStringStringCmd
	var jobEpoch *redis.StringCmd
	if _, err := j.s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		offs = p.HGetAll(ctx, j.keys.offsets())
		epochs = p.HGetAll(ctx, j.keys.epochs())
		jobEpoch = p.Get(ctx, j.keys.epoch())
		logged = p.HGetAll(ctx, j.keys.planParts())
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading positions of job %s: %w", j.name, err)
	}
	je, _ := strconv.ParseInt(jobEpoch.Val(), 10, 64)
	out := make(map[int32]Position)
	for f, v := range offs.Val() {
		t, ps, ok := strings.Cut(f, "/")
		if !ok || t != topic {
			continue
		}
		pos, err := j.position(topic, f, ps, v, je, epochs.Val(), logged.Val())
		if err != nil {
			return nil, err
		}
		out[pos.Partition] = pos
	}
	return out, nil
}

// position is partition ps's Position, from its offset entry f = v, the
// job's epoch je, and the job's epochs and plan:parts hashes.
func (j *Job) position(topic, f, ps, v string, je int64, epochs, logged map[string]string) (Position, error) {
	part, perr := strconv.ParseInt(ps, 10, 32)
	off, oerr := strconv.ParseInt(v, 10, 64)
	if perr != nil || oerr != nil {
		return Position{}, fmt.Errorf("reading positions of job %s: bad offset entry %q = %q", j.name, f, v)
	}
	pos := Position{Partition: int32(part), NextOffset: off, Epoch: je}
	if e, ok := epochs[f]; ok {
		if pos.Epoch, oerr = strconv.ParseInt(e, 10, 64); oerr != nil {
			return Position{}, fmt.Errorf("reading positions of job %s: bad epoch entry %q = %q", j.name, f, e)
		}
	}
	if entry, ok := logged[f]; ok {
		pr := PlannedRange{Range: record.Range{Topic: topic, Partition: int32(part)}}
		if err := parsePlanEntry(entry, &pr); err != nil {
			return Position{}, fmt.Errorf("reading positions of job %s: bad plan entry %s = %q", j.name, f, entry)
		}
		pos.Logged, pos.Pending = &pr, off == pr.From
	}
	return pos, nil
}
