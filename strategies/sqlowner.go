package strategies

import (
	"context"
	"errors"
	"fmt"

	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// A SQL job's table belongs to one job and one query (sqljob.Query.Claim):
// each strategy claims it where it opens the sink, before the first batch,
// so that a second job on the table, or a changed query, stops at start
// (ErrConfig) instead of adding every record again or merging two
// queries' rows.

// tableClaimer is a batch strategy whose sink holds a SQL job's table
// (or, on Redis, its rows). Run claims it once Kafka answers and the
// topic exists, so that a run that can't start claims nothing.
type tableClaimer interface {
	claimTable(ctx context.Context) error
}

// queryOf is the SQL job cfg runs, nil for the built-in job or a
// NewTransform.
func queryOf(cfg Config) *sqljob.Query {
	if cfg.Transform == nil {
		return nil
	}
	if w, ok := cfg.Transform.work.(*queryWork); ok {
		return w.q
	}
	return nil
}

// claimSQLTable claims the SQL job's table in w's database for the job.
func claimSQLTable(ctx context.Context, cfg Config, w *sqlsink.Writer) error {
	q := queryOf(cfg)
	if q == nil {
		return nil
	}
	return ownerErr(q.Claim(ctx, w.DB(), cfg.Job))
}

// claimRedisQuery records the SQL job's query for the job in Redis (its
// rows are the job's hashes), or checks that it is the one recorded.
func claimRedisQuery(ctx context.Context, cfg Config, j *redissink.Job) error {
	q := queryOf(cfg)
	if q == nil {
		return nil
	}
	stored, err := j.ClaimQuery(ctx, redissink.SQLQuery{Table: q.Table(), Fingerprint: q.Fingerprint(), Query: q.SQL()})
	if err != nil {
		return err
	}
	return ownerErr(q.CheckOwner(sqljob.Owner{Table: stored.Table, Job: cfg.Job, Fingerprint: stored.Fingerprint, Query: stored.Query}, cfg.Job))
}

// ownerErr makes a refused claim a configuration error.
func ownerErr(err error) error {
	if errors.Is(err, sqljob.ErrTableOwned) {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return err
}
