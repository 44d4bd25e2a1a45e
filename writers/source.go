package writers

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/microbatch/microbatch/offsets"
	"github.com/redis/go-redis/v9"
)

// Positions of sources that are not Kafka (offsets/source.go): a plain batch
// job commits each chunk's rows together with the position the chunk ended
// at, and resumes from the stored position after a crash.
//
//	w.CreateTables(ctx)
//	claim, _ := w.ClaimSource(ctx, "nightly-import", "customers.csv")
//	from := claim.Position // "" the first time
//	for each chunk read from `from` to `to`:
//	    tx, _ := w.Begin(ctx)
//	    tx.Upsert(ctx, myUpsert, rows)
//	    tx.AdvanceSource(ctx, offsets.SourceAdvance{Job: …, Source: …, From: from, To: to, Epoch: claim.Epoch})
//	    tx.Commit()
//	    from = to

// ClaimSource makes this writer the one that advances source for job, and
// returns where the source stands: the position to resume from ("" if it
// never committed) and the epoch to advance it with. A later claim (a
// restarted or second instance) fences this one: its advances fail with
// offsets.ErrFenced.
func (w *SQL) ClaimSource(ctx context.Context, job, source string) (offsets.SourcePosition, error) {
	tx, err := w.db.BeginTxx(ctx, nil)
	if err != nil {
		return offsets.SourcePosition{}, fmt.Errorf("claiming source %q on %s: %w", source, w.display, err)
	}
	defer tx.Rollback()
	p, err := offsets.ClaimSource(ctx, tx, w.dialect, job, source)
	if err != nil {
		return offsets.SourcePosition{}, err
	}
	if err := tx.Commit(); err != nil {
		return offsets.SourcePosition{}, fmt.Errorf("claiming source %q on %s: %w", source, w.display, err)
	}
	return p, nil
}

// SourcePosition returns the source's committed position; ok is false if
// the job never claimed it.
func (w *SQL) SourcePosition(ctx context.Context, job, source string) (p offsets.SourcePosition, ok bool, err error) {
	return offsets.LoadSource(ctx, w.db, job, source)
}

// AdvanceSource moves a source's position in this transaction
// (offsets.ApplySource): it fails with offsets.ErrConflict if the source is
// not at a.From (the chunk was committed already) and offsets.ErrFenced if
// a newer instance claimed it. Either way, roll back.
func (t *SQLTx) AdvanceSource(ctx context.Context, a offsets.SourceAdvance) error {
	return offsets.ApplySource(ctx, t.tx, a)
}

// SourceLanded settles a commit whose outcome is unknown (IsRetryable
// error from Commit): true means it committed.
func (w *SQL) SourceLanded(ctx context.Context, a offsets.SourceAdvance) (bool, error) {
	return offsets.SourceLanded(ctx, w.db, a)
}

// Redis: one hash per source, mb:{job}:source:{source} with fields
// position, epoch and chunk.

// RedisSourceKey is the hash holding a source's position.
func RedisSourceKey(job, source string) string { return "mb:{" + job + "}:source:" + source }

// ClaimSource is SQL.ClaimSource for Redis.
func (w *Redis) ClaimSource(ctx context.Context, job, source string) (offsets.SourcePosition, error) {
	if err := checkJob(job); err != nil {
		return offsets.SourcePosition{}, err
	}
	if source == "" {
		return offsets.SourcePosition{}, errors.New("claiming a source: source must not be empty")
	}
	key := RedisSourceKey(job, source)
	epoch, err := w.c.HIncrBy(ctx, key, "epoch", 1).Result()
	if err != nil {
		return offsets.SourcePosition{}, fmt.Errorf("claiming source %q on %s: %w", source, w.display, err)
	}
	p, _, err := w.SourcePosition(ctx, job, source)
	if err != nil {
		return offsets.SourcePosition{}, err
	}
	p.Epoch = epoch
	return p, nil
}

// SourcePosition is SQL.SourcePosition for Redis.
func (w *Redis) SourcePosition(ctx context.Context, job, source string) (offsets.SourcePosition, bool, error) {
	return readSourcePosition(ctx, w.c, RedisSourceKey(job, source))
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
	if c := m["chunk"]; c != "" {
		if p.ChunkID, err = strconv.ParseInt(c, 10, 64); err != nil {
			return p, false, fmt.Errorf("reading %s: bad chunk %q", key, c)
		}
	}
	return p, true, nil
}

// CommitSource runs write's commands and the advance a in one MULTI/EXEC,
// but only if the source is at a.From with an epoch not newer than a.Epoch
// (WATCH makes the check and the transaction one step): the chunk's
// results and the source's position become visible together, or neither
// does. It fails with offsets.ErrConflict or offsets.ErrFenced like
// SQLTx.AdvanceSource. With Redis Cluster every key write touches must be
// in the job's slot: put "{job}" in the keys.
//
// write must only queue commands on p. Redis does not roll back a queued
// command that fails when EXEC runs it (a command on a key of the wrong
// type): queue only commands that can't fail on your keys.
func (w *Redis) CommitSource(ctx context.Context, a offsets.SourceAdvance, write func(p redis.Pipeliner) error) error {
	if len(a.To) > offsets.MaxSourcePositionBytes {
		return fmt.Errorf("advancing source %q: position of %d bytes, at most %d", a.Source, len(a.To), offsets.MaxSourcePositionBytes)
	}
	key := RedisSourceKey(a.Job, a.Source)
	err := w.c.Watch(ctx, func(tx *redis.Tx) error {
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
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			if err := write(pipe); err != nil {
				return err
			}
			pipe.HSet(ctx, key, "position", a.To)
			pipe.HIncrBy(ctx, key, "chunk", 1)
			return nil
		})
		return err
	}, key)
	if errors.Is(err, redis.TxFailedErr) {
		// The source key changed between the check and EXEC: a claim or
		// another advance. Say which on the next look.
		p, _, rerr := w.SourcePosition(ctx, a.Job, a.Source)
		if rerr == nil && p.Epoch > a.Epoch {
			return fmt.Errorf("%w: source %q has epoch %d, this instance %d", offsets.ErrFenced, a.Source, p.Epoch, a.Epoch)
		}
		return fmt.Errorf("%w: source %q moved while the chunk was committing", offsets.ErrConflict, a.Source)
	}
	if err != nil {
		return fmt.Errorf("committing chunk of source %q on %s: %w", a.Source, w.display, err)
	}
	return nil
}
