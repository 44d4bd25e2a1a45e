package redissink

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// Fold adds the contributions of batch batchID's ranges into the totals,
// moves their dead letters into mb:{job}:dead:…, advances their offsets to
// To and deletes the contributions — all in one atomic script, for the
// ranges whose stored offset is still their From. Ranges already at To are
// skipped (folded before: a repeated or replayed fold adds nothing). It
// returns how many ranges it folded.
//
// Each range must be its partition's last logged range (plan:parts), logged
// by batch batchID; passing all of a batch's ranges in one call makes the
// whole batch visible at once. Nothing changes if any range fails:
// offsets.ErrFenced (its partition was claimed with a newer epoch: stop
// writing it), offsets.ErrConflict (an offset is neither From nor To, or a
// range is not what batchID logged for its partition: stop),
// offsets.ErrNoRow (InitOffsets first) or ErrMissing (a partition has
// no logged range, or a contribution is gone).
//
// The script holds Redis for the time it takes, which grows with the keys in
// the batch (about a millisecond per thousand).
func (j *Job) Fold(ctx context.Context, epoch, batchID int64, ranges []record.Range) (folded int, err error) {
	return j.fold(ctx, epoch, batchID, ranges, nil)
}

// FoldRows is Fold for a user-defined job whose contributions were written
// by WriteRowsContribution with u: it also applies their rows to u's hashes
// (RowsKey), in the same atomic step as the offsets. A contribution with
// rows of another table or column than u's is refused (offsets.ErrConflict)
// and nothing changes.
func (j *Job) FoldRows(ctx context.Context, epoch, batchID int64, ranges []record.Range, u writers.Upsert) (folded int, err error) {
	if err := checkUpsert(u); err != nil {
		return 0, err
	}
	rows := make([]string, len(u.Values))
	for i, v := range u.Values {
		rows[i] = RowsKey(j.name, u.Table, v)
	}
	return j.fold(ctx, epoch, batchID, ranges, rows)
}

// fold runs fold.lua; rows are the rows hashes it may write.
func (j *Job) fold(ctx context.Context, epoch, batchID int64, ranges []record.Range, rows []string) (folded int, err error) {
	if err := validateRanges(ranges); err != nil {
		return 0, err
	}
	k := j.keys
	keys := make([]string, 0, 6+3*len(ranges)+len(rows))
	keys = append(keys, k.epoch(), k.epochs(), k.offsets(), k.events(), k.amount(), k.planParts())
	args := make([]any, 0, 2+3*len(ranges))
	args = append(args, epoch, batchID)
	for _, r := range ranges {
		keys = append(keys, k.contrib(r), k.contribDead(r), k.deadOf(r))
		args = append(args, rangeField(r), r.From, r.To)
	}
	keys = append(keys, rows...)
	n, err := foldScript.Run(ctx, j.s.c, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("folding batch %d of job %s: %w", batchID, j.name, scriptError(err))
	}
	return n, nil
}

// Totals sums the users' totals hashes: all events, all amounts (exact:
// a key's amount may pass int64), and how many keys. It reads in steps,
// not as one snapshot: call it when the job is idle.
func (j *Job) Totals(ctx context.Context) (events int64, amount *big.Int, keys int64, err error) {
	ev, keys, err := j.sumHash(ctx, j.keys.events())
	if err != nil {
		return 0, nil, 0, err
	}
	events, ok := ev.Int64()
	if !ok {
		return 0, nil, 0, fmt.Errorf("reading %s: the events of job %s add up to %v, more than an int64 holds", j.keys.events(), j.name, ev)
	}
	am, _, err := j.sumHash(ctx, j.keys.amount())
	if err != nil {
		return 0, nil, 0, err
	}
	return events, am.Big(), keys, nil
}

// sumHash adds up a hash's values, integers of any size.
func (j *Job) sumHash(ctx context.Context, key string) (sum exact.Int, n int64, err error) {
	it := j.s.c.HScan(ctx, key, 0, "", 1000).Iterator()
	for i := 0; it.Next(ctx); i++ {
		if i%2 == 0 {
			continue // a field
		}
		v, err := exact.Parse(it.Val())
		if err != nil {
			return sum, 0, fmt.Errorf("reading %s: value %q is not an integer", key, it.Val())
		}
		sum.AddInt(v)
		n++
	}
	if err := it.Err(); err != nil {
		return sum, 0, fmt.Errorf("reading %s: %w", key, err)
	}
	return sum, n, nil
}

// DeadLetterCount counts the job's folded dead letters (those of every
// partition the job has an offset for).
func (j *Job) DeadLetterCount(ctx context.Context) (int64, error) {
	parts, err := j.s.c.HKeys(ctx, j.keys.offsets()).Result()
	if err != nil {
		return 0, fmt.Errorf("counting dead letters of job %s: %w", j.name, err)
	}
	cmds := make([]*redis.IntCmd, 0, len(parts))
	_, err = j.s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, f := range parts {
			topic, part, _ := strings.Cut(f, "/")
			cmds = append(cmds, p.HLen(ctx, j.keys.dead(topic, part)))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("counting dead letters of job %s: %w", j.name, err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// DeadLetterOffsets returns the offsets of the job's folded dead letters
// of one partition of topic, ascending (the fields of
// mb:{job}:dead:{topic}:{partition}). verify compares them with the
// records a recomputation rejects.
func (j *Job) DeadLetterOffsets(ctx context.Context, topic string, partition int32) ([]int64, error) {
	key := j.keys.dead(topic, strconv.FormatInt(int64(partition), 10))
	fields, err := j.s.c.HKeys(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("reading dead letters of job %s: %w", j.name, err)
	}
	offs := make([]int64, len(fields))
	for i, f := range fields {
		if offs[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			return nil, fmt.Errorf("reading %s: field %q is not an offset", key, f)
		}
	}
	slices.Sort(offs)
	return offs, nil
}
