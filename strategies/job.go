package strategies

import (
	"context"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
)

// The built-in job, shared by every strategy: read a range, sum valid
// events per key, hand undecodable records to a dead-letter callback.

type counts struct {
	records, deadLetters int64
	reason               string // the first dead letter's
}

// process reads r from src, adding each valid record to p and passing each
// bad record to dead (which may write it somewhere). It writes nothing
// itself.
func process(ctx context.Context, src batch.Source, job string, r record.Range, p part,
	dead func(record.DeadLetter) error) (counts, error) {
	var c counts
	err := src.Read(ctx, r, func(rec *batch.Record) error {
		if derr := p.add(rec); derr != nil {
			c.deadLetters++
			dl := shared.DeadLetter(job, r.Topic, rec, derr)
			if c.reason == "" {
				c.reason = dl.Reason
			}
			return dead(dl)
		}
		c.records++
		return nil
	})
	return c, err
}
