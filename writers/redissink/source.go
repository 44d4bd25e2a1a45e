package redissink

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/offsets"
)

// Positions of sources that are not Kafka (offsets/source.go), the twins
// of sqlsink.Writer's ClaimSource, SourcePosition, SourceLanded and
// CommitSource: one hash per source, mb:{job}:source:{source} (SourceKey)
// with fields position, epoch and chunks. They are Sink methods, not Job
// ones, as on the SQL side: a source advance (offsets.SourceAdvance) names
// its job.

// ClaimSource is sqlsink.Writer.ClaimSource for Redis.
func (s *Sink) ClaimSource(ctx context.Context, job, source string) (offsets.SourcePosition, error) {
	if err := checkJob(job); err != nil {
		return offsets.SourcePosition{}, err
	}
	if source == "" || len(source) > offsets.MaxSourceNameBytes {
		return offsets.SourcePosition{}, fmt.Errorf("claiming a source: source name of %d bytes, want 1 to %d", len(source), offsets.MaxSourceNameBytes)
	}
	key := SourceKey(job, source)
	epoch, err := s.c.HIncrBy(ctx, key, "epoch", 1).Result()
	if err != nil {
		return offsets.SourcePosition{}, fmt.Errorf("claiming source %q on %s: %w", source, s.display, err)
	}
	p, _, err := s.SourcePosition(ctx, job, source)
	if err != nil {
		return offsets.SourcePosition{}, err
	}
	p.Epoch = epoch
	return p, nil
}

// SourcePosition is sqlsink.Writer.SourcePosition for Redis.
func (s *Sink) SourcePosition(ctx context.Context, job, source string) (offsets.SourcePosition, bool, error) {
	return readSourcePosition(ctx, s.c, SourceKey(job, source))
}

func readSourcePosition(ctx context.Context, c redis.Cmdable, key string) (offsets.SourcePosition, bool, error) {
	m, err := c.HGetAll(ctx, key).Result()
	if err != nil {
		return offsets.SourcePosition{}, false, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(m) == 0 {
		return offsets.SourcePosition{}, false, nil
	}
	var p offsets.SourcePosition
	p.Position = m["position"]
	if p.Epoch, err = strconv.ParseInt(m["epoch"], 10, 64); err != nil {
		return p, false, fmt.Errorf("reading %s: bad epoch %q", key, m["epoch"])
	}
	if c := m["chunks"]; c != "" {
		if p.Chunks, err = strconv.ParseInt(c, 10, 64); err != nil {
			return p, false, fmt.Errorf("reading %s: bad chunk %q", key, c)
		}
	}
	return p, true, nil
}

// SourceLanded is sqlsink.Writer.SourceLanded for Redis: after CommitSource
// failed with an error that IsRetryable (the reply to EXEC was lost), true
// means the chunk committed.
func (s *Sink) SourceLanded(ctx context.Context, a offsets.SourceAdvance) (bool, error) {
	p, ok, err := s.SourcePosition(ctx, a.Job, a.Source)
	if err != nil || !ok {
		return false, err
	}
	return p.Position == a.To && p.Epoch <= a.Epoch, nil
}

// CommitSource runs write's commands and the advance a in one MULTI/EXEC,
// but only if the source is at a.From with an epoch not newer than a.Epoch
// (WATCH makes the check and the transaction one step): the chunk's
// results and the source's position become visible together, or neither
// does. It fails with offsets.ErrConflict or offsets.ErrFenced like
// sqlsink.Tx.AdvanceSource. With Redis Cluster every key write touches
// must be in the job's slot: put "{job}" in the keys.
//
// write must only queue commands on p. Redis does not roll back a queued
// command that fails when EXEC runs it (a command on a key of the wrong
// type): the position moves anyway and CommitSource returns
// ErrPartialCommit naming the failed commands. Queue only commands that
// can't fail on your keys. After an error that IsRetryable, settle with
// SourceLanded before retrying.
func (s *Sink) CommitSource(ctx context.Context, a offsets.SourceAdvance, write func(p redis.Pipeliner) error) error {
	if err := offsets.CheckSourceAdvance(a); err != nil {
		return err
	}
	key := SourceKey(a.Job, a.Source)
	var cmds []redis.Cmder
	err := s.c.Watch(ctx, func(tx *redis.Tx) error {
		if err := checkSourceAt(ctx, tx, key, a); err != nil {
			return err
		}
		var err error
		cmds, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			if err := write(pipe); err != nil {
				return err
			}
			pipe.HSet(ctx, key, "position", a.To)
			pipe.HIncrBy(ctx, key, "chunks", 1)
			return nil
		})
		return err
	}, key)
	if err := partialCommit(err, cmds, a); err != nil {
		return err
	}
	if errors.Is(err, redis.TxFailedErr) {
		// The source key changed between the check and EXEC: a claim or
		// another advance. Say which on the next look.
		p, _, rerr := s.SourcePosition(ctx, a.Job, a.Source)
		if rerr == nil && p.Epoch > a.Epoch {
			return fmt.Errorf("%w: source %q has epoch %d, this instance %d", offsets.ErrFenced, a.Source, p.Epoch, a.Epoch)
		}
		return fmt.Errorf("%w: source %q moved while the chunk was committing", offsets.ErrConflict, a.Source)
	}
	if err != nil {
		return fmt.Errorf("committing chunk of source %q on %s: %w", a.Source, s.display, err)
	}
	return nil
}

// checkSourceAt checks, inside the WATCH, that the source is where a
// starts and not claimed by a newer instance.
func checkSourceAt(ctx context.Context, tx *redis.Tx, key string, a offsets.SourceAdvance) error {
	p, ok, err := readSourcePosition(ctx, tx, key)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: job %q has no position for source %q (claim it first)", offsets.ErrNoRow, a.Job, a.Source)
	case p.Epoch > a.Epoch:
		return fmt.Errorf("%w: source %q has epoch %d, this instance %d", offsets.ErrFenced, a.Source, p.Epoch, a.Epoch)
	case p.Position != a.From:
		return fmt.Errorf("%w: source %q is at %q, the chunk started from %q", offsets.ErrConflict, a.Source, p.Position, a.From)
	}
	return nil
}

// partialCommit is ErrPartialCommit if EXEC ran (the position moved, err is
// from a queued command) yet some of the chunk's commands failed, else
// nil.
func partialCommit(err error, cmds []redis.Cmder, a offsets.SourceAdvance) error {
	if err == nil || len(cmds) < 2 || cmds[len(cmds)-2].Err() != nil || errors.Is(err, redis.TxFailedErr) {
		return nil
	}
	var failed []string
	for _, c := range cmds[:len(cmds)-2] {
		if c.Err() != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", c.Name(), c.Err()))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: source %q moved to %q, but %d of the chunk's commands failed (first: %s)",
		ErrPartialCommit, a.Source, a.To, len(failed), failed[0])
}
