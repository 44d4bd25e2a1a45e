package redissink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// SQLQuery is the record of the SQL job whose rows a job's hashes hold
// (mb:{job}:query): the table, the compiled query's fingerprint
// (sqljob.Query.Fingerprint) and its text.
type SQLQuery struct {
	Table       string `json:"table"`
	Fingerprint string `json:"fingerprint"`
	Query       string `json:"query"`
}

// QueryKey is the job's SQL query record, a string holding SQLQuery as
// JSON.
func QueryKey(job string) string { return jobKeys{job}.query() }

func (k jobKeys) query() string { return k.key("query") }

// ClaimQuery records q as the job's SQL query if the job has none yet, and
// returns the record the job has: q when it was recorded now (or was
// already), another when the job ran another query before. Comparing is
// the caller's: the rows of two queries in one job's hashes would merge.
// The record is set with SET NX, so two processes of a job starting at
// once agree on one.
func (j *Job) ClaimQuery(ctx context.Context, q SQLQuery) (SQLQuery, error) {
	b, err := json.Marshal(q)
	if err != nil {
		return SQLQuery{}, err
	}
	if err := j.s.c.SetNX(ctx, j.keys.query(), b, 0).Err(); err != nil {
		return SQLQuery{}, fmt.Errorf("recording the query of job %s: %w", j.name, err)
	}
	return j.Query(ctx)
}

// Query reads the job's SQL query record; the zero SQLQuery if it has none.
func (j *Job) Query(ctx context.Context) (SQLQuery, error) {
	raw, err := j.s.c.Get(ctx, j.keys.query()).Bytes()
	if errors.Is(err, redis.Nil) {
		return SQLQuery{}, nil
	}
	if err != nil {
		return SQLQuery{}, fmt.Errorf("reading the query of job %s: %w", j.name, err)
	}
	var stored SQLQuery
	if err := json.Unmarshal(raw, &stored); err != nil {
		return SQLQuery{}, fmt.Errorf("reading the query of job %s: %s is not a query record: %w", j.name, j.keys.query(), err)
	}
	return stored, nil
}
