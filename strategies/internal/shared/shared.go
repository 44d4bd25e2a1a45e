// Package shared holds what the micro-batch strategies (package
// strategies) and checkpoint mode (package strategies/checkpoint) do the
// same way, so that neither copies the other and checkpoint mode never
// imports the strategies: the configuration error, a record's dead letter,
// the built-in job's rows, the check of a Transform's table, the retry
// backoff, and the kinds of sink DSN.
package shared

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// ErrConfig means the configuration is invalid (or a Transform made rows
// that can't be written); the message names the setting. Fix it and start
// again: no retry or restart cures it. strategies.ErrConfig and
// checkpoint.ErrConfig are this error; its text is the one users have
// always seen.
var ErrConfig = errors.New("strategies: invalid configuration")

// DeadLetter makes rec's dead letter. Its reason (the decoder's, or a
// Transform's own error text, which may quote the input) is made storable
// here, valid UTF-8 and within mb_dead_letters.reason (reason.Safe), so
// that every sink and the checkpoint's JSON keep the same text; the
// payload is the record's bytes.
func DeadLetter(job, topic string, rec *batch.Record, err error) record.DeadLetter {
	why := err.Error()
	var de *event.DecodeError
	if errors.As(err, &de) {
		why = de.Reason
	}
	return record.DeadLetter{
		Job: job, Topic: topic, Partition: rec.Partition, Offset: rec.Offset,
		Reason: writers.StoredReason(why), Payload: bytes.Clone(rec.Value),
	}
}

// DeadLetterSize is what a dead letter weighs in memory and in a chunk:
// its payload and reason.
func DeadLetterSize(d *record.DeadLetter) int { return len(d.Payload) + len(d.Reason) }

// TotalsRows are the built-in job's mb_totals rows (writers.Totals), sorted
// by key so that concurrent transactions lock the rows in the same order
// and don't deadlock each other.
func TotalsRows(job string, totals []event.Total) [][]any {
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

// CheckTable makes sure a Transform's table exists with its columns and
// key before the first write, so that a missing one is one clear message
// (ErrConfig) at start instead of a failed batch or checkpoint (or, on
// MySQL without the key, duplicate rows).
func CheckTable(ctx context.Context, w *sqlsink.Writer, u writers.Upsert) error {
	err := w.CheckUpsert(ctx, u)
	if errors.Is(err, sqlsink.ErrBadTable) || errors.Is(err, writers.ErrBadIdentifier) || errors.Is(err, writers.ErrBadMerge) {
		return fmt.Errorf("%w: transform: %v", ErrConfig, err)
	}
	return err
}

// Backoff between retries and restarts: doubling from BackoffInitial up to
// BackoffMax.
const (
	BackoffInitial = 100 * time.Millisecond
	BackoffMax     = 5 * time.Second
)

// IsKafkaDSN reports a checkpoint-mode Kafka sink: kafka://brokers/topic.
func IsKafkaDSN(dsn string) bool { return strings.HasPrefix(dsn, "kafka://") }

// IsFileDSN reports a checkpoint-mode file sink: file:///dir.
func IsFileDSN(dsn string) bool { return strings.HasPrefix(dsn, "file://") }

// IsRedisDSN reports a Redis sink: redis:// or rediss://.
func IsRedisDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "redis://") || strings.HasPrefix(dsn, "rediss://")
}

// DefaultConnectTimeout is how long a run waits for Kafka and its sink to
// answer at start (--connect-timeout).
const DefaultConnectTimeout = 30 * time.Second

// StartRule reads the topic's bounds once and returns where a partition
// without a stored position starts: at its end when latest is set and the
// job is new, else at its start.
func StartRule(ctx context.Context, src *batch.KafkaSource, topic string, latest bool) (offsets.StartFunc, error) {
	bounds, err := src.Bounds(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading offsets of topic %q: %w", topic, err)
	}
	return func(p int32, newJob bool) (int64, error) {
		b, ok := bounds[p]
		if !ok {
			return 0, fmt.Errorf("no offsets for %s/%d", topic, p)
		}
		if latest && newJob {
			return b.End, nil
		}
		return b.Start, nil
	}, nil
}
