package writertest_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
	"github.com/microbatch/microbatch/writers/writertest"
)

// The SQL writer (sqlsink.Tx: rows and the position advance in one database
// transaction), with the position either a Kafka offset in mb_offsets
// (sqlsink.Tx.Advance) or a source position in mb_source_positions
// (sqlsink.Tx.AdvanceSource), on MariaDB, PostgreSQL and SQLite.

func TestConformanceSQLMariaDB(t *testing.T) {
	t.Parallel()
	for _, source := range []bool{false, true} {
		t.Run(positionKind(source), func(t *testing.T) {
			writertest.Run(t, func(t *testing.T) writertest.Subject {
				return newSQLSubject(t, needServer(t, testutil.EnvMySQL), source)
			})
		})
	}
}

// On PostgreSQL each test gets a database of its own
// (FreshPostgresDatabase): nothing of another test's jobs is in it.
func TestConformanceSQLPostgres(t *testing.T) {
	t.Parallel()
	for _, source := range []bool{false, true} {
		t.Run(positionKind(source), func(t *testing.T) {
			writertest.Run(t, func(t *testing.T) writertest.Subject {
				return newSQLSubject(t, testutil.FreshPostgresDatabase(t, needServer(t, testutil.EnvPostgres)), source)
			})
		})
	}
}

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	for _, source := range []bool{false, true} {
		t.Run(positionKind(source), func(t *testing.T) {
			writertest.Run(t, func(t *testing.T) writertest.Subject {
				return newSQLSubject(t, "sqlite://"+filepath.Join(t.TempDir(), "sink.db"), source)
			})
		})
	}
}

func positionKind(source bool) string {
	if source {
		return "SourcePosition"
	}
	return "KafkaOffset"
}

const (
	sqlTopic  = "in"
	sqlSource = "input.csv"
)

// sqlSubject writes into mb_totals (writers.Totals: the row's key is k, its
// value goes into events and amount) under a job of its own.
type sqlSubject struct {
	dsn    string
	reader *sqlsink.Writer // the Subject's own connection, for Read
	job    string
	source bool
	batch  atomic.Int64 // batch ids for mb_offsets.batch_id
}

func newSQLSubject(t *testing.T, dsn string, source bool) *sqlSubject {
	return &sqlSubject{dsn: dsn, reader: sinktest.OpenSQL(t, dsn), job: uniqueName(t), source: source}
}

func (s *sqlSubject) Capabilities() writertest.Capabilities {
	return writertest.Capabilities{
		// The advance is a compare-and-set of the position (and epoch)
		// in the same transaction as the rows: a replay finds the
		// position moved on and is refused, rows and all.
		Replay:            writertest.ReplayRefused,
		ReplayInNewWriter: true,
		ReplayErr:         offsets.ErrConflict,
		// A claim (offsets.Init, ClaimSource) stamps a newer epoch on
		// the position row, and an advance with an older one fails.
		Fencing:   writertest.FencedByOpen,
		FencedErr: offsets.ErrFenced,
	}
}

// Open opens a pool of its own (so that Close is the writer's real Close)
// and claims the job's position: offsets.Init for a Kafka offset (creating
// the row at 0), ClaimSource for a source position (creating it at "").
func (s *sqlSubject) Open(ctx context.Context) (writertest.Writer, error) {
	w, err := sqlsink.Open(ctx, s.dsn)
	if err != nil {
		return nil, err
	}
	epoch, err := s.claim(ctx, w)
	if err != nil {
		w.Close()
		return nil, err
	}
	return &sqlWriter{s: s, w: w, epoch: epoch}, nil
}

func (s *sqlSubject) claim(ctx context.Context, w *sqlsink.Writer) (int64, error) {
	if s.source {
		p, err := w.ClaimSource(ctx, s.job, sqlSource)
		return p.Epoch, err
	}
	tx, err := w.DB().BeginTxx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	c, err := offsets.Init(ctx, tx, w.Dialect(), s.job, sqlTopic, []int32{0},
		func(int32, bool) (int64, error) { return 0, nil })
	if err != nil {
		return 0, err
	}
	return c.Epoch, tx.Commit()
}

func (s *sqlSubject) Read(ctx context.Context) (writertest.State, error) {
	rows, err := readTotals(ctx, s.reader, s.job)
	if err != nil {
		return writertest.State{}, err
	}
	st := writertest.State{Rows: rows}
	if s.source {
		p, _, err := s.reader.SourcePosition(ctx, s.job, sqlSource)
		st.Position = p.Position
		return st, err
	}
	pos, err := offsets.Load(ctx, s.reader.DB(), s.job, sqlTopic)
	if p, ok := pos[0]; ok {
		st.Position = strconv.FormatInt(p.NextOffset, 10)
	}
	return st, err
}

// readTotals reads the job's rows of mb_totals. Its values are the events
// column; amount must agree (both get the row's value).
func readTotals(ctx context.Context, w *sqlsink.Writer, job string) (map[string]int64, error) {
	rows, err := w.DB().QueryContext(ctx, `SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var events, amount int64
		if err := rows.Scan(&k, &events, &amount); err != nil {
			return nil, err
		}
		if events != amount {
			return nil, fmt.Errorf("mb_totals row %q: events %d but amount %d (written together, they must agree)", k, events, amount)
		}
		out[k] = events
	}
	return out, rows.Err()
}

func totalsRows(job string, rows []writertest.Row) [][]any {
	out := make([][]any, len(rows))
	for i, r := range rows {
		out[i] = []any{job, r.Key, r.Value, r.Value}
	}
	return out
}

type sqlWriter struct {
	s     *sqlSubject
	w     *sqlsink.Writer
	epoch int64
}

// Begin only keeps the batch: the transaction is run by Commit or Abort.
// A database transaction holds its row locks from its first write, so one
// left open across the suite's steps (a newer writer claiming the row)
// would block the other writer instead of showing what the writer does.
func (w *sqlWriter) Begin(_ context.Context, b writertest.Batch) (writertest.Txn, error) {
	return &sqlTxn{w: w, b: b}, nil
}

func (w *sqlWriter) Close() error { return w.w.Close() }

type sqlTxn struct {
	w *sqlWriter
	b writertest.Batch
}

func (t *sqlTxn) PreCommit(context.Context) (writertest.Pending, error) {
	return nil, errors.New("the SQL writer is not two-phase")
}

// Commit writes the rows and the advance in one transaction and commits.
func (t *sqlTxn) Commit(ctx context.Context) error { return t.run(ctx, true) }

// Abort writes the same and rolls back.
func (t *sqlTxn) Abort(ctx context.Context) error { return t.run(ctx, false) }

func (t *sqlTxn) run(ctx context.Context, commit bool) error {
	s := t.w.s
	tx, err := t.w.w.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback() // nothing after Commit
	if err := tx.Upsert(ctx, writers.Totals, totalsRows(s.job, t.b.Rows)); err != nil {
		return err
	}
	if s.source {
		err = tx.AdvanceSource(ctx, offsets.SourceAdvance{Job: s.job, Source: sqlSource, From: t.b.From, To: t.b.To, Epoch: t.w.epoch})
	} else {
		var from, to int64
		if from, to, err = offsetRange(t.b); err == nil {
			err = tx.Advance(ctx, offsets.Advance{Job: s.job, Topic: sqlTopic, Partition: 0,
				From: from, To: to, Epoch: t.w.epoch, BatchID: s.batch.Add(1)})
		}
	}
	if err != nil {
		return err
	}
	if !commit {
		tx.Rollback()
		return nil
	}
	return tx.Commit()
}

// offsetRange parses a batch's positions as Kafka offsets.
func offsetRange(b writertest.Batch) (from, to int64, err error) {
	from, err = strconv.ParseInt(b.From, 10, 64)
	if err == nil {
		to, err = strconv.ParseInt(b.To, 10, 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("batch %q → %q: positions are not Kafka offsets: %w", b.From, b.To, err)
	}
	return from, to, nil
}
