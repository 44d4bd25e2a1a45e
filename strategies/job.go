package strategies

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/reason"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// The built-in job, shared by every strategy: read a range, sum valid
// events per key, hand undecodable records to a dead-letter callback.

type counts struct{ records, deadLetters int64 }

// process reads r from src, adding each valid record to p and passing each
// bad record to dead (which may write it somewhere). It writes nothing
// itself.
func process(ctx context.Context, src batch.Source, job string, r record.Range, p part,
	dead func(record.DeadLetter) error) (counts, error) {
	var c counts
	err := src.Read(ctx, r, func(rec *batch.Record) error {
		if derr := p.add(rec); derr != nil {
			c.deadLetters++
			return dead(deadLetter(job, r.Topic, rec, derr))
		}
		c.records++
		return nil
	})
	return c, err
}

// totalsRows sorts by key so that concurrent partition transactions lock
// mb_totals rows in the same order and don't deadlock each other.
func totalsRows(job string, totals []event.Total) [][]any {
	slices.SortFunc(totals, func(a, b event.Total) int { return strings.Compare(a.Key, b.Key) })
	rows := make([][]any, len(totals))
	flat := make([]any, 4*len(totals))
	for i, tt := range totals {
		row := flat[4*i : 4*i+4 : 4*i+4]
		row[0], row[1], row[2], row[3] = job, tt.Key, tt.Events, tt.Amount
		rows[i] = row
	}
	return rows
}

// deadLetter makes rec's dead letter. Its reason (the decoder's, or a
// Transform's own error text, which may quote the input) is made storable
// here, valid UTF-8 and within mb_dead_letters.reason (reason.Safe), so
// that every sink and the checkpoint's JSON keep the same text; the
// payload is the record's bytes.
func deadLetter(job, topic string, rec *batch.Record, err error) record.DeadLetter {
	why := err.Error()
	var de *event.DecodeError
	if errors.As(err, &de) {
		why = de.Reason
	}
	return record.DeadLetter{
		Job: job, Topic: topic, Partition: rec.Partition, Offset: rec.Offset,
		Reason: reason.Safe(why, writers.MaxReasonBytes), Payload: bytes.Clone(rec.Value),
	}
}
