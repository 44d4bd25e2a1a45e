package sqlsink

import (
	"context"
	"fmt"
	"time"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// ClaimSource makes this writer the one that advances source for job, and
// returns where the source stands: the position to resume from ("" if it
// never committed) and the epoch to advance it with. A later claim (a
// restarted or second instance) fences this one: its advances fail with
// offsets.ErrFenced.
//
// A claim that fails with a retryable error (writers.IsRetryable: a lost
// connection, a deadlock with another instance claiming at the same time)
// is tried again a few times before the error is returned; repeating a
// claim only raises the epoch once more.
func (w *Writer) ClaimSource(ctx context.Context, job, source string) (p offsets.SourcePosition, err error) {
	for attempt := 1; ; attempt++ {
		p, err = w.claimSource(ctx, job, source)
		if err == nil || !writers.IsRetryable(err) || attempt == 5 {
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, err
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

func (w *Writer) claimSource(ctx context.Context, job, source string) (offsets.SourcePosition, error) {
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
func (w *Writer) SourcePosition(ctx context.Context, job, source string) (p offsets.SourcePosition, ok bool, err error) {
	return offsets.LoadSource(ctx, w.db, job, source)
}

// AdvanceSource moves a source's position in this transaction
// (offsets.ApplySource): it fails with offsets.ErrConflict if the source is
// not at a.From (the chunk was committed already) and offsets.ErrFenced if
// a newer instance claimed it. Either way, roll back.
func (t *Tx) AdvanceSource(ctx context.Context, a offsets.SourceAdvance) error {
	return offsets.ApplySource(ctx, t.tx, a)
}

// CommitSource is a chunk's whole commit: it begins a transaction, runs
// write in it (the chunk's upserts, dead letters), advances the source
// (AdvanceSource) and commits. An error that writers.IsRetryable (a lost
// connection, a deadlock) is settled with SourceLanded — a commit whose
// reply was lost counts as done — and otherwise tried again, up to 8
// times with a growing pause, calling write again each time: it must write
// the same thing every time. offsets.ErrConflict (the chunk was committed
// already) and offsets.ErrFenced (a newer instance claimed the source)
// are returned at once: stop.
//
// It is Redis.CommitSource's SQL twin; for anything else (several
// sources in one transaction), use Begin and AdvanceSource directly.
func (w *Writer) CommitSource(ctx context.Context, a offsets.SourceAdvance, write func(tx *Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := w.commitSourceOnce(ctx, a, write)
		if err == nil || !writers.IsRetryable(err) || attempt == 8 {
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

func (w *Writer) commitSourceOnce(ctx context.Context, a offsets.SourceAdvance, write func(tx *Tx) error) error {
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

// SourceLanded settles a commit whose outcome is unknown (writers.IsRetryable
// error from Commit): true means it committed (see offsets.SourceLanded).
func (w *Writer) SourceLanded(ctx context.Context, a offsets.SourceAdvance) (bool, error) {
	return offsets.SourceLanded(ctx, w.db, a)
}
