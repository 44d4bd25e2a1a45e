package writertest_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/writertest"
)

// The Redis writer, in its two protocols:
//   - KafkaOffset: the idempotent strategy's (Claim, LogPlan,
//     WriteContribution, then Fold, which adds the contribution into the
//     totals and moves the offset in one script). Replays are ignored.
//   - SourcePosition: CommitSource (the rows' commands and the source's
//     position in one WATCH/MULTI/EXEC, checked against From and the
//     epoch). Replays are refused.
//
// Rows are the totals' events hash (redissink.EventsKey).

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	for _, source := range []bool{false, true} {
		t.Run(positionKind(source), func(t *testing.T) {
			writertest.Run(t, func(t *testing.T) writertest.Subject {
				return newRedisSubject(t, needServer(t, testutil.EnvRedis), source)
			})
		})
	}
}

const (
	redisTopic  = "in"
	redisSource = "input.csv"
)

type redisSubject struct {
	dsn    string
	reader *redissink.Sink
	job    string
	source bool
}

func newRedisSubject(t *testing.T, dsn string, source bool) *redisSubject {
	reader, err := redissink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	s := &redisSubject{dsn: dsn, reader: reader, job: uniqueName(t), source: source}
	t.Cleanup(func() {
		// The job's keys all carry its hash tag.
		ctx := context.Background()
		keys, err := reader.Client().Keys(ctx, "mb:{"+s.job+"}:*").Result()
		if err == nil && len(keys) > 0 {
			err = reader.Client().Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("deleting the job's keys: %v", err)
		}
		reader.Close()
	})
	return s
}

func (s *redisSubject) Capabilities() writertest.Capabilities {
	c := writertest.Capabilities{
		// Both protocols check the epoch of the partition or source
		// in the same atomic step that makes the rows visible.
		Fencing:   writertest.FencedByOpen,
		FencedErr: offsets.ErrFenced,
	}
	if s.source {
		c.Replay, c.ReplayErr, c.ReplayInNewWriter = writertest.ReplayRefused, offsets.ErrConflict, true
	} else {
		// Fold skips a range whose offset is already at its end, and
		// WriteContribution writes nothing for it: a replay, by the same
		// writer or by a restarted one, adds nothing and is no error.
		c.Replay, c.ReplayInNewWriter = writertest.ReplayIgnored, true
	}
	return c
}

// Open claims the job (Claim and InitOffsets at 0, or ClaimSource) with a
// client of its own.
func (s *redisSubject) Open(ctx context.Context) (writertest.Writer, error) {
	w, err := redissink.Open(ctx, s.dsn)
	if err != nil {
		return nil, err
	}
	rw := &redisWriter{s: s, w: w}
	if rw.j, err = w.Job(s.job); err != nil {
		w.Close()
		return nil, err
	}
	if s.source {
		var p offsets.SourcePosition
		p, err = w.ClaimSource(ctx, s.job, redisSource)
		rw.epoch = p.Epoch
	} else if rw.epoch, err = rw.j.Claim(ctx); err == nil {
		err = rw.j.InitOffsets(ctx, redisTopic, map[int32]int64{0: 0})
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	return rw, nil
}

func (s *redisSubject) Read(ctx context.Context) (writertest.State, error) {
	m, err := s.reader.Client().HGetAll(ctx, redissink.EventsKey(s.job)).Result()
	if err != nil {
		return writertest.State{}, err
	}
	st := writertest.State{Rows: map[string]int64{}}
	for k, v := range m {
		if st.Rows[k], err = strconv.ParseInt(v, 10, 64); err != nil {
			return writertest.State{}, err
		}
	}
	if s.source {
		p, _, err := s.reader.SourcePosition(ctx, s.job, redisSource)
		st.Position = p.Position
		return st, err
	}
	j, err := s.reader.Job(s.job)
	if err != nil {
		return st, err
	}
	offs, err := j.Offsets(ctx, redisTopic)
	if off, ok := offs[0]; ok {
		st.Position = strconv.FormatInt(off, 10)
	}
	return st, err
}

type redisWriter struct {
	s     *redisSubject
	w     *redissink.Sink
	j     *redissink.Job
	epoch int64
}

func (w *redisWriter) Close() error { return w.w.Close() }

// Begin: for offsets, logs the plan and writes the contribution (invisible
// until Fold); for a source, only keeps the batch (CommitSource writes in
// one step).
func (w *redisWriter) Begin(ctx context.Context, b writertest.Batch) (writertest.Txn, error) {
	t := &redisTxn{w: w, b: b}
	if w.s.source {
		return t, nil
	}
	from, to, err := offsetRange(b)
	if err != nil {
		return nil, err
	}
	t.r = record.Range{Topic: redisTopic, Partition: 0, From: from, To: to}
	if t.id, err = w.j.NextBatchID(ctx); err != nil {
		return nil, err
	}
	if err := w.j.LogPlan(ctx, w.epoch, t.id, []record.Range{t.r}); err != nil {
		return nil, err
	}
	totals := make([]redissink.Total, len(b.Rows))
	for i, r := range b.Rows {
		totals[i] = redissink.Total{Key: r.Key, Events: r.Value, Amount: r.Value}
	}
	if err := w.j.WriteContribution(ctx, w.epoch, t.r, totals, nil); err != nil {
		return nil, err
	}
	return t, nil
}

type redisTxn struct {
	w  *redisWriter
	b  writertest.Batch
	id int64        // offsets: the logged batch id
	r  record.Range // offsets: the logged range
}

func (t *redisTxn) PreCommit(context.Context) (writertest.Pending, error) {
	return nil, errors.New("the Redis writer is not two-phase")
}

func (t *redisTxn) Commit(ctx context.Context) error {
	if t.w.s.source {
		return t.w.w.CommitSource(ctx, t.advance(), t.write(ctx))
	}
	_, err := t.w.j.Fold(ctx, t.w.epoch, t.id, []record.Range{t.r})
	return err
}

var errAbort = errors.New("writertest: abort")

// Abort: for a source, runs CommitSource with the rows' commands queued
// and then an error, which must discard them. For offsets there is
// nothing to undo: the contribution is not folded, so not visible, and
// the next write of its range replaces it.
func (t *redisTxn) Abort(ctx context.Context) error {
	if !t.w.s.source {
		return nil
	}
	write := t.write(ctx)
	err := t.w.w.CommitSource(ctx, t.advance(), func(p redis.Pipeliner) error {
		if err := write(p); err != nil {
			return err
		}
		return errAbort
	})
	if errors.Is(err, errAbort) {
		return nil
	}
	if err == nil {
		return errors.New("CommitSource succeeded although its write function failed")
	}
	return err
}

func (t *redisTxn) advance() offsets.SourceAdvance {
	return offsets.SourceAdvance{Job: t.w.s.job, Source: redisSource, From: t.b.From, To: t.b.To, Epoch: t.w.epoch}
}

func (t *redisTxn) write(ctx context.Context) func(p redis.Pipeliner) error {
	return func(p redis.Pipeliner) error {
		for _, r := range t.b.Rows {
			p.HIncrBy(ctx, redissink.EventsKey(t.w.s.job), r.Key, r.Value)
		}
		return nil
	}
}
