package writers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
//
// A claim that fails with a retryable error (IsRetryable: a lost
// connection, a deadlock with another instance claiming at the same time)
// is tried again a few times before the error is returned; repeating a
// claim only raises the epoch once more.
func (w *SQL) ClaimSource(ctx context.Context, job, source string) (p offsets.SourcePosition, err error) {
	for attempt := 1; ; attempt++ {
		p, err = w.claimSource(ctx, job, source)
		if err == nil || !IsRetryable(err) || attempt == 5 {
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, err
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

func (w *SQL) claimSource(ctx context.Context, job, source string) (offsets.SourcePosition, error) {
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

// CommitSource is a chunk's whole commit: it begins a transaction, runs
// write in it (the chunk's upserts, dead letters), advances the source
// (AdvanceSource) and commits. An error that IsRetryable (a lost
// connection, a deadlock) is settled with SourceLanded — a commit whose
// reply was lost counts as done — and otherwise tried again, up to 8
// times with a growing pause, calling write again each time: it must write
// the same thing every time. offsets.ErrConflict (the chunk was committed
// already) and offsets.ErrFenced (a newer instance claimed the source)
// are returned at once: stop.
//
// It is Redis.CommitSource's SQL twin; for anything else (several
// sources in one transaction), use Begin and AdvanceSource directly.
func (w *SQL) CommitSource(ctx context.Context, a offsets.SourceAdvance, write func(tx *SQLTx) error) error {
	for attempt := 1; ; attempt++ {
		err := w.commitSourceOnce(ctx, a, write)
		if err == nil || !IsRetryable(err) || attempt == 8 {
			return err
		}
		if landed, lerr := w.SourceLanded(ctx, a); lerr == nil && landed {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

func (w *SQL) commitSourceOnce(ctx context.Context, a offsets.SourceAdvance, write func(tx *SQLTx) error) error {
	tx, err := w.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := write(tx); err != nil {
		return err
	}
	if err := tx.AdvanceSource(ctx, a); err != nil {
		return err
	}
	return tx.Commit()
}

// SourceLanded settles a commit whose outcome is unknown (IsRetryable
// error from Commit): true means it committed (see offsets.SourceLanded).
func (w *SQL) SourceLanded(ctx context.Context, a offsets.SourceAdvance) (bool, error) {
	return offsets.SourceLanded(ctx, w.db, a)
}

// Redis: one hash per source, mb:{job}:source:{source} with fields
// position, epoch and chunks.

// ErrPartialCommit means Redis ran a chunk's transaction, position
// included, but some of the commands the caller queued failed (Redis
// doesn't roll back a command that fails inside EXEC): the source has moved
// on and those commands' effects are missing. Don't retry the chunk; the
// error says which commands failed.
var ErrPartialCommit = errors.New("writers: chunk committed with failed commands")

// RedisSourceKey is the hash holding a source's position.
func RedisSourceKey(job, source string) string { return "mb:{" + job + "}:source:" + source }

// ClaimSource is SQL.ClaimSource for Redis.
func (w *Redis) ClaimSource(ctx context.Context, job, source string) (offsets.SourcePosition, error) {
	if err := checkJob(job); err != nil {
		return offsets.SourcePosition{}, err
	}
	if source == "" || len(source) > offsets.MaxSourceNameBytes {
		return offsets.SourcePosition{}, fmt.Errorf("claiming a source: source name of %d bytes, want 1 to %d", len(source), offsets.MaxSourceNameBytes)
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
	if c := m["chunks"]; c != "" {
		if p.Chunks, err = strconv.ParseInt(c, 10, 64); err != nil {
			return p, false, fmt.Errorf("reading %s: bad chunk %q", key, c)
		}
	}
	return p, true, nil
}

// SourceLanded is SQL.SourceLanded for Redis: after CommitSource failed
// with an error that IsRedisRetryable (the reply to EXEC was lost), true
// means the chunk committed.
func (w *Redis) SourceLanded(ctx context.Context, a offsets.SourceAdvance) (bool, error) {
	p, ok, err := w.SourcePosition(ctx, a.Job, a.Source)
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
// SQLTx.AdvanceSource. With Redis Cluster every key write touches must be
// in the job's slot: put "{job}" in the keys.
//
// write must only queue commands on p. Redis does not roll back a queued
// command that fails when EXEC runs it (a command on a key of the wrong
// type): the position moves anyway and CommitSource returns
// ErrPartialCommit naming the failed commands. Queue only commands that
// can't fail on your keys. After an error that IsRedisRetryable, settle
// with SourceLanded before retrying.
func (w *Redis) CommitSource(ctx context.Context, a offsets.SourceAdvance, write func(p redis.Pipeliner) error) error {
	if err := offsets.CheckSourceAdvance(a); err != nil {
		return err
	}
	key := RedisSourceKey(a.Job, a.Source)
	var cmds []redis.Cmder
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
	if err != nil && len(cmds) >= 2 && cmds[len(cmds)-2].Err() == nil && !errors.Is(err, redis.TxFailedErr) {
		// EXEC ran (the position moved), yet a queued command failed.
		var failed []string
		for _, c := range cmds[:len(cmds)-2] {
			if c.Err() != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", c.Name(), c.Err()))
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("%w: source %q moved to %q, but %d of the chunk's commands failed (first: %s)",
				ErrPartialCommit, a.Source, a.To, len(failed), failed[0])
		}
	}
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
