package offsets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// SourceTable is the positions table's name; its columns are part of the
// public contract like mb_offsets'.
const SourceTable = "mb_source_positions"

// MaxSourcePositionBytes bounds a stored position.
const MaxSourcePositionBytes = 1024

// SourceSchema returns the CREATE TABLE statement of mb_source_positions.
func SourceSchema(d Dialect) string {
	if d == Postgres {
		return `CREATE TABLE IF NOT EXISTS mb_source_positions (
  job VARCHAR(128) COLLATE "C" NOT NULL,
  source VARCHAR(255) COLLATE "C" NOT NULL,
  position BYTEA NOT NULL,
  epoch BIGINT NOT NULL,
  chunks BIGINT NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL,
  PRIMARY KEY (job, source)
)`
	}
	if d == MySQL {
		return `CREATE TABLE IF NOT EXISTS mb_source_positions (
  job VARCHAR(128) NOT NULL,
  source VARCHAR(255) NOT NULL,
  position VARBINARY(1024) NOT NULL,
  epoch BIGINT NOT NULL,
  chunks BIGINT NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (job, source)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	return `CREATE TABLE IF NOT EXISTS mb_source_positions (
  job TEXT NOT NULL,
  source TEXT NOT NULL,
  position BLOB NOT NULL,
  epoch INTEGER NOT NULL,
  chunks INTEGER NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (job, source)
)`
}

// SourcePosition is a source's stored progress. Position is "" for a
// source that has committed nothing yet.
type SourcePosition struct {
	Position string
	Epoch    int64
	Chunks   int64 // chunks committed so far
}

// SourceAdvance moves a source from From to To. Epoch is the claim's.
// To must differ from From: a chunk that doesn't move its source could be
// committed again and again (a watermark that didn't advance, a cursor
// repeated when there was no new data), so it is refused; skip the commit
// of a chunk with nothing new instead.
type SourceAdvance struct {
	Job, Source string
	From, To    string
	Epoch       int64
}

// LoadSource returns a source's stored position; ok is false when the
// source has none.
func LoadSource(ctx context.Context, q Queryer, job, source string) (p SourcePosition, ok bool, err error) {
	var pos []byte
	err = q.QueryRowContext(ctx, `SELECT position, epoch, chunks FROM mb_source_positions WHERE job = ? AND source = ?`,
		job, source).Scan(&pos, &p.Epoch, &p.Chunks)
	if errors.Is(err, sql.ErrNoRows) {
		return SourcePosition{}, false, nil
	}
	if err != nil {
		return SourcePosition{}, false, fmt.Errorf("reading position of source %q (job %q): %w", source, job, err)
	}
	p.Position = string(pos)
	return p, true, nil
}

// ClaimSource makes the caller the source's writer: it creates the row
// (at position "") if missing and raises its epoch above every earlier
// claim's, which fences an older instance still running. Run it in its own
// transaction and use the returned position as the next chunk's From.
func ClaimSource(ctx context.Context, tx Queryer, d Dialect, job, source string) (SourcePosition, error) {
	if err := checkSourceNames(job, source); err != nil {
		return SourcePosition{}, err
	}
	// One statement creates the row or raises its epoch: two first claims
	// at once then queue on the row instead of deadlocking on the gap a
	// SELECT … FOR UPDATE of a missing row locks.
	upsert := `INSERT INTO mb_source_positions (job, source, position, epoch, chunks, updated_at) VALUES (?, ?, ?, 1, 0, ?)
 ON CONFLICT (job, source) DO UPDATE SET epoch = epoch + 1, updated_at = excluded.updated_at`
	switch d {
	case Postgres: // which epoch, the stored or the excluded, must be said
		upsert = `INSERT INTO mb_source_positions (job, source, position, epoch, chunks, updated_at) VALUES (?, ?, ?, 1, 0, ?)
 ON CONFLICT (job, source) DO UPDATE SET epoch = mb_source_positions.epoch + 1, updated_at = excluded.updated_at`
	case MySQL:
		upsert = `INSERT INTO mb_source_positions (job, source, position, epoch, chunks, updated_at) VALUES (?, ?, ?, 1, 0, ?)
 ON DUPLICATE KEY UPDATE epoch = epoch + 1, updated_at = VALUES(updated_at)`
	}
	if _, err := tx.ExecContext(ctx, upsert, job, source, []byte{}, time.Now().UTC()); err != nil {
		return SourcePosition{}, fmt.Errorf("claiming source %q (job %q): %w", source, job, err)
	}
	p, ok, err := LoadSource(ctx, tx, job, source)
	if err == nil && !ok {
		err = errors.New("row missing right after the claim")
	}
	if err != nil {
		return SourcePosition{}, fmt.Errorf("claiming source %q (job %q): %w", source, job, err)
	}
	return p, nil
}

// Longest job and source names mb_source_positions holds.
const (
	MaxSourceJobBytes  = 128
	MaxSourceNameBytes = 255
)

func checkSourceNames(job, source string) error {
	switch {
	case job == "" || source == "":
		return errors.New("claiming a source: job and source must not be empty")
	case len(job) > MaxSourceJobBytes:
		return fmt.Errorf("claiming a source: job name of %d bytes, at most %d", len(job), MaxSourceJobBytes)
	case len(source) > MaxSourceNameBytes:
		return fmt.Errorf("claiming a source: source name of %d bytes, at most %d", len(source), MaxSourceNameBytes)
	}
	return nil
}

// CheckSourceAdvance refuses an advance no store should apply: one that
// doesn't move the source, or to a position too long to store.
func CheckSourceAdvance(a SourceAdvance) error {
	switch {
	case a.To == a.From:
		return fmt.Errorf("advancing source %q: the chunk ends where it starts (%q); a chunk must move its position (don't commit a chunk with nothing new)", a.Source, a.From)
	case len(a.To) > MaxSourcePositionBytes:
		return fmt.Errorf("advancing source %q: position of %d bytes, at most %d", a.Source, len(a.To), MaxSourcePositionBytes)
	}
	return nil
}

// ApplySource performs a inside the caller's transaction. It succeeds only
// if the row is at a.From with an epoch not newer than a.Epoch; otherwise it
// returns ErrFenced, ErrConflict or ErrNoRow and the caller must roll back.
func ApplySource(ctx context.Context, tx Queryer, a SourceAdvance) error {
	if err := CheckSourceAdvance(a); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx,
		`UPDATE mb_source_positions SET position = ?, epoch = ?, chunks = chunks + 1, updated_at = ?
 WHERE job = ? AND source = ? AND position = ? AND epoch <= ?`,
		[]byte(a.To), a.Epoch, time.Now().UTC(), a.Job, a.Source, []byte(a.From), a.Epoch)
	if err != nil {
		return fmt.Errorf("advancing source %q: %w", a.Source, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("advancing source %q: %w", a.Source, err)
	}
	if n == 1 {
		return nil
	}
	p, ok, err := LoadSource(ctx, tx, a.Job, a.Source)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: job %q has no position for source %q (claim it first)", ErrNoRow, a.Job, a.Source)
	case p.Epoch > a.Epoch:
		return fmt.Errorf("%w: source %q has epoch %d, this instance %d", ErrFenced, a.Source, p.Epoch, a.Epoch)
	default:
		return fmt.Errorf("%w: source %q is at %q, the chunk started from %q", ErrConflict, a.Source, p.Position, a.From)
	}
}

// SourceLanded reports whether a is what the row holds: the way to settle a
// commit whose outcome is unknown. Because ApplySource only moves a row
// that is at a.From, and never to the position it is at, a row at a.To
// with a's epoch is a's own commit (as long as positions don't come back,
// which an ordered position never does). False after a newer claim does
// not mean it didn't land — but then this instance is fenced anyway.
func SourceLanded(ctx context.Context, q Queryer, a SourceAdvance) (bool, error) {
	p, ok, err := LoadSource(ctx, q, a.Job, a.Source)
	if err != nil || !ok {
		return false, err
	}
	return p.Position == a.To && p.Epoch == a.Epoch, nil
}
