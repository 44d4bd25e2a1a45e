package offsets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Dialect names the SQL flavour of a sink.
type Dialect string

// Supported dialects.
const (
	MySQL    Dialect = "mysql"
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Queryer is what this package needs from *sql.DB, *sql.Tx, *sqlx.DB or
// *sqlx.Tx.
type Queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Table is the offsets table's name; the columns are part of the public
// contract (DESIGN.md).
const Table = "mb_offsets"

// Schema returns the CREATE TABLE statement of mb_offsets.
func Schema(d Dialect) string {
	if d == Postgres {
		return `CREATE TABLE IF NOT EXISTS mb_offsets (
  job VARCHAR(128) COLLATE "C" NOT NULL,
  topic VARCHAR(249) COLLATE "C" NOT NULL,
  part INTEGER NOT NULL,
  next_offset BIGINT NOT NULL,
  epoch BIGINT NOT NULL,
  batch_id BIGINT NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL,
  PRIMARY KEY (job, topic, part)
)`
	}
	if d == MySQL {
		return `CREATE TABLE IF NOT EXISTS mb_offsets (
  job VARCHAR(128) NOT NULL,
  topic VARCHAR(249) NOT NULL,
  part INT NOT NULL,
  next_offset BIGINT NOT NULL,
  epoch BIGINT NOT NULL,
  batch_id BIGINT NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (job, topic, part)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	}
	return `CREATE TABLE IF NOT EXISTS mb_offsets (
  job TEXT NOT NULL,
  topic TEXT NOT NULL,
  part INTEGER NOT NULL,
  next_offset INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  batch_id INTEGER NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (job, topic, part)
)`
}

// Position is a partition's stored progress.
type Position struct {
	Partition  int32
	NextOffset int64
	Epoch      int64
	BatchID    int64
}

// Load returns the job's stored positions for topic, by partition.
func Load(ctx context.Context, q Queryer, job, topic string) (map[int32]Position, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT part, next_offset, epoch, batch_id FROM mb_offsets WHERE job = ? AND topic = ?`, job, topic)
	if err != nil {
		return nil, fmt.Errorf("reading offsets: %w", err)
	}
	defer rows.Close()
	out := make(map[int32]Position)
	for rows.Next() {
		var p Position
		if err := rows.Scan(&p.Partition, &p.NextOffset, &p.Epoch, &p.BatchID); err != nil {
			return nil, fmt.Errorf("reading offsets: %w", err)
		}
		out[p.Partition] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading offsets: %w", err)
	}
	return out, nil
}

// Claim is the result of Init: the epoch this instance commits with and the
// positions it starts from.
type Claim struct {
	Epoch     int64
	LastBatch int64 // highest batch id committed so far (0 if none)
	Positions map[int32]Position
}

// StartFunc gives the offset a partition without a row starts at. newJob
// says whether the job had no rows at all for the topic: a start-from
// policy such as "latest" should apply only then, so that partitions
// added to a running job's topic are read from their beginning.
type StartFunc func(partition int32, newJob bool) (int64, error)

// Init claims the job for a new instance, in one transaction of tx: it takes
// epoch = 1 + the highest epoch stored for the job, stamps it on every
// existing row of the job, whatever the topic (so that an older instance
// still running is fenced at its next commit), and creates the rows of
// partitions that have none, at the offset start returns. Recording the
// start offset before the first batch makes "latest" deterministic across
// restarts.
func Init(ctx context.Context, tx Queryer, d Dialect, job, topic string, partitions []int32, start StartFunc) (Claim, error) {
	c, err := ClaimPartitions(ctx, tx, d, job, topic, partitions, partitions, 0, start)
	if err != nil {
		return Claim{}, err
	}
	// The whole job, whatever the topic: an older instance is fenced on
	// every row it could still write.
	if _, err := tx.ExecContext(ctx,
		`UPDATE mb_offsets SET epoch = ?, updated_at = ? WHERE job = ?`, c.Epoch, time.Now().UTC(), job); err != nil {
		return Claim{}, fmt.Errorf("claiming job %q: %w", job, err)
	}
	return c, nil
}

// ClaimPartitions claims some partitions of a job for one member of a
// consumer group, in one transaction of tx: it takes
// epoch = max(minEpoch, 1 + the highest epoch stored for the job) — minEpoch
// is the group generation, and the +1 keeps every claim newer than all
// before it even after a deleted group restarted its generations at 1 —
// and stamps it on the rows of mine only, so that the member that held them
// before is fenced at its next commit while the other members' partitions
// stay theirs.
//
// Rows missing for any partition of all are created at the offset start
// returns (with epoch 0 when they are not mine), so that a new job's
// start-from is resolved once for the whole topic, not by each member at
// the time it happens to claim. Claim.Positions holds mine only.
func ClaimPartitions(ctx context.Context, tx Queryer, d Dialect, job, topic string, all, mine []int32, minEpoch int64, start StartFunc) (Claim, error) {
	var maxEpoch, maxBatch sql.NullInt64
	if err := lockJob(ctx, tx, d, job, "MAX(epoch), MAX(batch_id)", &maxEpoch, &maxBatch); err != nil {
		return Claim{}, fmt.Errorf("claiming partitions of job %q: %w", job, err)
	}
	c := Claim{Epoch: max(minEpoch, maxEpoch.Int64+1), LastBatch: maxBatch.Int64}
	now := time.Now().UTC()
	existing, err := Load(ctx, tx, job, topic)
	if err != nil {
		return Claim{}, err
	}
	newJob := len(existing) == 0
	for _, p := range all {
		if _, ok := existing[p]; ok {
			continue
		}
		off, err := start(p, newJob)
		if err != nil {
			return Claim{}, err
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO mb_offsets (job, topic, part, next_offset, epoch, batch_id, updated_at) VALUES (?, ?, ?, ?, 0, 0, ?)`,
			job, topic, p, off, now); err != nil {
			return Claim{}, fmt.Errorf("creating offset row %s/%d: %w", topic, p, err)
		}
		existing[p] = Position{Partition: p, NextOffset: off}
	}
	c.Positions = make(map[int32]Position, len(mine))
	for _, p := range mine {
		pos, ok := existing[p]
		if !ok {
			return Claim{}, fmt.Errorf("claiming %s/%d: not one of the topic's partitions this process knows (partitions added since it started? restart it)", topic, p)
		}
		if _, err := tx.ExecContext(ctx,
			`UPDATE mb_offsets SET epoch = ?, updated_at = ? WHERE job = ? AND topic = ? AND part = ?`,
			c.Epoch, now, job, topic, p); err != nil {
			return Claim{}, fmt.Errorf("claiming %s/%d: %w", topic, p, err)
		}
		pos.Epoch = c.Epoch
		c.Positions[p] = pos
	}
	return c, nil
}

// lockJob locks the job's rows (reading the aggregates cols over them,
// into dest) until the transaction ends, so that a claim or a reset waits
// for a commit in flight on any of them and then reads what it left.
// MySQL locks with FOR UPDATE (gaps too, so that two first claims of a new
// job queue). PostgreSQL refuses FOR UPDATE beside an aggregate, so it
// locks the rows in a subquery, after the job's transaction-scoped
// advisory lock, which covers what row locks can't: a job with no rows
// yet. SQLite's write transaction holds the whole database.
func lockJob(ctx context.Context, tx Queryer, d Dialect, job, cols string, dest ...any) error {
	q := `SELECT ` + cols + ` FROM mb_offsets WHERE job = ?`
	switch d {
	case MySQL:
		q += ` FOR UPDATE`
	case Postgres:
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('mb_offsets'), hashtext(?))`, job); err != nil {
			return err
		}
		q = `SELECT ` + cols + ` FROM (SELECT epoch, batch_id FROM mb_offsets WHERE job = ? FOR UPDATE) AS t`
	}
	return tx.QueryRowContext(ctx, q, job).Scan(dest...)
}

// Advance moves one partition's offset from From to To for batch BatchID.
type Advance struct {
	Job       string
	Topic     string
	Partition int32
	From, To  int64
	Epoch     int64
	BatchID   int64
}

// Apply performs a inside the caller's transaction. It succeeds only if the
// row is at a.From with an epoch not newer than a.Epoch; otherwise it returns
// ErrFenced, ErrConflict or ErrNoRow and the caller must roll back.
func Apply(ctx context.Context, tx Queryer, a Advance) error {
	res, err := tx.ExecContext(ctx,
		`UPDATE mb_offsets SET next_offset = ?, epoch = ?, batch_id = ?, updated_at = ?
 WHERE job = ? AND topic = ? AND part = ? AND next_offset = ? AND epoch <= ?`,
		a.To, a.Epoch, a.BatchID, time.Now().UTC(), a.Job, a.Topic, a.Partition, a.From, a.Epoch)
	if err != nil {
		return fmt.Errorf("advancing offset %s/%d: %w", a.Topic, a.Partition, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("advancing offset %s/%d: %w", a.Topic, a.Partition, err)
	}
	if n == 1 {
		return nil
	}
	// Say why: the row is missing, newer, or elsewhere.
	var next, epoch int64
	err = tx.QueryRowContext(ctx, `SELECT next_offset, epoch FROM mb_offsets WHERE job = ? AND topic = ? AND part = ?`,
		a.Job, a.Topic, a.Partition).Scan(&next, &epoch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: job %q %s/%d", ErrNoRow, a.Job, a.Topic, a.Partition)
	case err != nil:
		return fmt.Errorf("advancing offset %s/%d: %w", a.Topic, a.Partition, err)
	case epoch > a.Epoch:
		return fmt.Errorf("%w: %s/%d has epoch %d, this instance %d", ErrFenced, a.Topic, a.Partition, epoch, a.Epoch)
	default:
		return fmt.Errorf("%w: %s/%d is at %d, batch %d planned from %d", ErrConflict, a.Topic, a.Partition, next, a.BatchID, a.From)
	}
}

// Landed reports whether the advance a is what the row holds: the way to
// settle a commit whose outcome is unknown (connection lost during COMMIT).
// Because Apply refuses to move a row that is not at a.From, a row showing
// a.To with a's epoch and batch can only be a's own commit.
func Landed(ctx context.Context, q Queryer, a Advance) (bool, error) {
	var next, epoch, batch int64
	err := q.QueryRowContext(ctx, `SELECT next_offset, epoch, batch_id FROM mb_offsets WHERE job = ? AND topic = ? AND part = ?`,
		a.Job, a.Topic, a.Partition).Scan(&next, &epoch, &batch)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading offset %s/%d: %w", a.Topic, a.Partition, err)
	}
	return next == a.To && epoch == a.Epoch && batch == a.BatchID, nil
}
