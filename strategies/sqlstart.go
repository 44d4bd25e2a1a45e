package strategies

import (
	"context"
	"fmt"
	"strings"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// sqlStrategy is the SQL sink and start-up that txn and single share (and
// the controls, for the sink): results, dead letters and mb_offsets rows
// in one database.
type sqlStrategy struct {
	*runEnv
	w *sqlsink.Writer
}

// connect opens the SQL sink, waiting up to the connect timeout for it to
// answer.
func (s *sqlStrategy) connect(ctx context.Context) error {
	return connect(ctx, s.cfg.ConnectTimeout, func(actx context.Context) (err error) {
		s.w, err = sqlsink.Open(actx, s.cfg.Sink)
		return err
	})
}

// open connects, creates the tables and checks a Transform's table.
func (s *sqlStrategy) open(ctx context.Context) error {
	if err := s.connect(ctx); err != nil {
		return err
	}
	if err := s.w.CreateTables(ctx); err != nil {
		s.w.Close()
		return classify(err)
	}
	if s.cfg.Transform != nil {
		if err := shared.CheckTable(ctx, s.w, s.cfg.Transform.Upsert()); err != nil {
			s.w.Close()
			return err
		}
	}
	return nil
}

// claimTable claims a SQL job's table for the job (claimSQLTable).
func (s *sqlStrategy) claimTable(ctx context.Context) error { return claimSQLTable(ctx, s.cfg, s.w) }

func (s *sqlStrategy) close() error     { return s.w.Close() }
func (s *sqlStrategy) sinkName() string { return s.w.String() }

// stored reads the job's mb_offsets rows. The run created the table, so
// an error reading it is one (unlike the dry run's storedIfAny).
func (s *sqlStrategy) stored(ctx context.Context) (map[int32]int64, error) {
	pos, err := offsets.Load(ctx, s.w.DB(), s.cfg.Job, s.cfg.Topic)
	next := make(map[int32]int64, len(pos))
	for p, x := range pos {
		next[p] = x.NextOffset
	}
	return next, err
}

// start claims the session's partitions in mb_offsets (claimPartitions)
// and plans from their rows.
func (s *sqlStrategy) start(ctx context.Context, sess session, d *batch.Driver) (int64, error) {
	claim, err := claimPartitions(ctx, s.w, s.src, s.cfg, sess)
	if err != nil {
		return 0, err
	}
	d.Next = make(map[int32]int64, len(claim.Positions))
	for p, pos := range claim.Positions {
		d.Next[p] = pos.NextOffset
	}
	d.LastBatch, d.Epoch = claim.LastBatch, claim.Epoch
	return claim.Epoch, nil
}

// claimPartitions takes a new epoch for the session's partitions and makes
// sure every partition of the topic has an offset row, resolving
// start-from for the new ones.
func claimPartitions(ctx context.Context, w *sqlsink.Writer, src *batch.KafkaSource, cfg Config, s session) (offsets.Claim, error) {
	start, err := shared.StartRule(ctx, src, cfg.Topic, cfg.StartFrom == StartLatest)
	if err != nil {
		return offsets.Claim{}, err
	}
	var claim offsets.Claim
	_, err = withRetry(ctx, cfg.retry, fmt.Sprintf("claiming partitions of job %q", cfg.Job), func() error {
		tx, err := w.DB().BeginTxx(ctx, nil)
		if err != nil {
			return fmt.Errorf("claiming partitions of job %q: %w", cfg.Job, err)
		}
		defer tx.Rollback() // no-op after Commit
		if claim, err = offsets.ClaimPartitions(ctx, tx, w.Dialect(), cfg.Job, cfg.Topic, s.All, s.Partitions, int64(s.Generation), start); err != nil {
			return err
		}
		return tx.Commit()
	})
	return claim, err
}

// storedIfAny reads the job's mb_offsets rows, if the table exists yet:
// the dry run looks at a sink the job may never have run against.
func (s *sqlStrategy) storedIfAny(ctx context.Context) (map[int32]int64, error) {
	pos, err := offsets.Load(ctx, s.w.DB(), s.cfg.Job, s.cfg.Topic)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "doesn't exist") || strings.Contains(msg, "no such table") {
			return map[int32]int64{}, nil // a sink the job never ran against
		}
		return nil, err
	}
	out := make(map[int32]int64, len(pos))
	for p, v := range pos {
		out[p] = v.NextOffset
	}
	return out, nil
}
