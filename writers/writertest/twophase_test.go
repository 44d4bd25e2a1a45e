package writertest_test

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/filesink"
	"github.com/microbatch/microbatch/writers/kafkasink"
	"github.com/microbatch/microbatch/writers/sqlsink"
	"github.com/microbatch/microbatch/writers/writertest"
)

// The two-phase writers of checkpoint mode (writers.TwoPhase): kafkasink.Txn,
// sqlsink.XA, filesink.Txn and sqlsink.WAL.
//
// Where the position is: in checkpoint mode a two-phase writer stores no
// source position — the checkpoint does, and decides which pre-committed
// transactions to commit. So these adapters write the batch's position
// into the transaction itself, as one more record (a Kafka record keyed
// "@position", a row of writertest_positions, a "position" line), which is
// how a program using the writer on its own would keep its position with
// its output. "Rows and position visible together" is then the writer's own
// promise that a transaction is visible whole or not at all.
//
// Txn numbers (checkpoint ids) come from one counter per Subject, so a
// writer opened later continues above the earlier ones, as a restored job
// does. OpenKeeping is the writer's constructor followed by Recover(keep)
// (which commits the kept transactions and aborts the others), Open is
// OpenKeeping(nil), and CommitKept is Commit: the writers.Pending a
// PreCommit returned is what the suite hands from one instance to the
// next, as a checkpoint does.

// TestConformanceKafkaTxn runs kafkasink.Txn twice: with the position as a
// record of the transaction (KafkaPositionRecord), and as the offset of a
// consumer group written into it with WriteOffsets (KafkaGroupOffsets),
// the way a consume-transform-produce job keeps its source position.
//
// With group offsets, rows and position are in different partitions (the
// topic's and __consumer_offsets'), whose commit markers the coordinator
// writes one after the other: for a moment after a commit a reader can see
// one and not yet the other. Commit (and OpenKeeping, whose Recover
// commits) therefore wait until both are stable before the suite reads, so
// what the suite checks is that a transaction ends up visible whole or not
// at all — not that a reader never sees it half-way.
func TestConformanceKafkaTxn(t *testing.T) {
	t.Parallel()
	t.Run("KafkaPositionRecord", func(t *testing.T) {
		t.Parallel()
		testConformanceKafkaTxn(t, false)
	})
	t.Run("KafkaGroupOffsets", func(t *testing.T) {
		t.Parallel()
		testConformanceKafkaTxn(t, true)
	})
}

func testConformanceKafkaTxn(t *testing.T, groupOffsets bool) {
	writertest.Run(t, func(t *testing.T) writertest.Subject {
		brokers := kafkautil.SplitBrokers(needServer(t, testutil.EnvKafka))
		topic := uniqueName(t)
		if err := kafkautil.EnsureTopic(brokers, topic, 1); err != nil {
			t.Fatal(err)
		}
		id := uniqueName(t)
		var pos *kafkaGroupPosition
		if groupOffsets {
			// The group's offsets are of a source topic the test never
			// reads: positions are only numbers to it.
			pos = &kafkaGroupPosition{group: uniqueName(t), topic: topic + "-src"}
			if err := kafkautil.EnsureTopic(brokers, pos.topic, 1); err != nil {
				t.Fatal(err)
			}
		}
		return &twoPhaseSubject{
			caps: writertest.Capabilities{
				TwoPhase: true,
				// Committing a committed transaction is success.
				Replay: writertest.ReplayIgnored,
				// Recover starts a producer on each of the subtask's
				// transactional ids (InitProducerId), which aborts what an
				// older producer of the id has open or pre-committed and
				// fences it — also on a slot the older writer has not used
				// yet: a transaction it begins there after the newer
				// Recover fails at PreCommit (PRODUCER_FENCED).
				Fencing:   writertest.FencedByOpen,
				FencedErr: writers.ErrTxnLost,
			},
			open: func(context.Context) (twoPhaseWriter, error) {
				w, err := kafkasink.New(kafkasink.Config{Brokers: brokers, TransactionalID: id})
				return &kafkaTxn{w, brokers, topic, pos}, err
			},
			read: func(ctx context.Context) (writertest.State, error) { return readKafka(ctx, brokers, topic, pos) },
		}
	})
}

func TestConformanceXA(t *testing.T) {
	t.Parallel()
	writertest.Run(t, func(t *testing.T) writertest.Subject {
		dsn := needServer(t, testutil.EnvMySQL)
		sink := sinktest.OpenSQL(t, dsn)
		job := uniqueName(t)
		createPositions(t, sink)
		// Rolls back what a failed test left prepared (its row locks),
		// after the test's writers are closed.
		t.Cleanup(func() {
			x, err := sqlsink.NewXA(sink, job, 0)
			if err == nil {
				err = x.Recover(context.Background(), nil)
				x.Close()
			}
			if err != nil {
				t.Errorf("rolling back what the test left prepared: %v", err)
			}
		})
		return &twoPhaseSubject{
			caps: writertest.Capabilities{
				TwoPhase: true,
				// A committed transaction's commit is recorded in
				// mb_xa_txns, so committing it again is success.
				Replay: writertest.ReplayIgnored,
				// No fencing of a live older writer: while the session that
				// prepared a transaction lives, MariaDB lets no other
				// session finish it, so a newer XA's Recover can't roll it
				// back (it waits, then fails with ErrXABusy), and the older
				// writer can still commit it. A transaction the older
				// writer had open but not prepared is invisible to Recover
				// altogether. In checkpoint mode what stops an older
				// instance is the checkpoint, which decides what is
				// committed, not the sink.
				NoFencingReason: "MariaDB keeps a prepared XA transaction its live session's: a newer XA's Recover can't roll it back (ErrXABusy) and the older writer can still commit it; the checkpoint, not the sink, decides what commits",
			},
			open: func(context.Context) (twoPhaseWriter, error) {
				x, err := sqlsink.NewXA(sink, job, 0)
				return &xaWriter{x, job}, err
			},
			read: func(ctx context.Context) (writertest.State, error) { return readSQLWithPosition(ctx, sink, job) },
		}
	})
}

func TestConformanceWAL(t *testing.T) {
	t.Parallel()
	writertest.Run(t, func(t *testing.T) writertest.Subject {
		sink := sinktest.OpenSQL(t, needServer(t, testutil.EnvMySQL))
		job := uniqueName(t)
		createPositions(t, sink)
		return &twoPhaseSubject{
			caps: writertest.Capabilities{
				TwoPhase: true,
				// Commit finds its checkpoint id recorded in
				// mb_wal_commits and applies nothing (a rewrite).
				Replay: writertest.ReplayIgnored,
				// The pending writes live in the checkpoint, not in the
				// database, so a newer writer's Recover has nothing of the
				// older one's to abort. Only once the newer writer has
				// applied a later checkpoint does mb_wal_commits refuse the
				// older one's (ErrTxnLost).
				Fencing:   writertest.FencedByNewerCommit,
				FencedErr: writers.ErrTxnLost,
			},
			open: func(context.Context) (twoPhaseWriter, error) {
				return &walWriter{sqlsink.NewWAL(sink, job, 0), job}, nil
			},
			read: func(ctx context.Context) (writertest.State, error) { return readSQLWithPosition(ctx, sink, job) },
		}
	})
}

func TestConformanceFileTxn(t *testing.T) {
	t.Parallel()
	writertest.Run(t, func(t *testing.T) writertest.Subject {
		dir := t.TempDir()
		const job = "job"
		return &twoPhaseSubject{
			caps: writertest.Capabilities{
				TwoPhase: true,
				// Commit finds the file committed already: success.
				Replay: writertest.ReplayIgnored,
				// Recover deletes every pending file of the job and
				// subtask, so the older writer's pre-committed (or still
				// open) file is gone and its Commit finds neither it nor
				// a committed one (ErrTxnLost). There is no epoch: a
				// transaction the older writer begins after that commits
				// (StaleEpochRejected shows it, were FencedByOpen
				// claimed).
				Fencing:         writertest.FencedInFlightByOpen,
				FencedErr:       writers.ErrTxnLost,
				NoFencingReason: "a file transaction the older writer begins after the newer writer's Recover commits: there is no epoch in the directory to check it against; in checkpoint mode the checkpoint decides which transactions commit, and a zombie's are never listed in a newer run's checkpoints",
			},
			open: func(context.Context) (twoPhaseWriter, error) {
				f, err := filesink.New(dir, job, 0)
				return &fileWriter{f}, err
			},
			read: func(context.Context) (writertest.State, error) { return readFiles(dir, job) },
		}
	})
}

// twoPhaseWriter is a TwoPhase writer that can write a batch into its open
// transaction.
type twoPhaseWriter interface {
	writers.TwoPhase
	write(ctx context.Context, b writertest.Batch) error
}

// settler is a twoPhaseWriter whose commits become visible to readers a
// little after they return: settle waits for that.
type settler interface {
	settle(ctx context.Context) error
}

type twoPhaseSubject struct {
	caps writertest.Capabilities
	open func(ctx context.Context) (twoPhaseWriter, error)
	read func(ctx context.Context) (writertest.State, error)
	txn  atomic.Int64 // the last txn number handed out
}

func (s *twoPhaseSubject) Capabilities() writertest.Capabilities { return s.caps }

func (s *twoPhaseSubject) Read(ctx context.Context) (writertest.State, error) { return s.read(ctx) }

func (s *twoPhaseSubject) Open(ctx context.Context) (writertest.Writer, error) {
	return s.OpenKeeping(ctx, nil)
}

func (s *twoPhaseSubject) OpenKeeping(ctx context.Context, keep []writertest.Pending) (writertest.TwoPhaseWriter, error) {
	ps := make([]writers.Pending, len(keep))
	for i, k := range keep {
		p, ok := k.(writers.Pending)
		if !ok {
			return nil, fmt.Errorf("keep[%d] is a %T, not a writers.Pending", i, k)
		}
		ps[i] = p
	}
	w, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.Recover(ctx, ps); err != nil {
		w.Close()
		return nil, err
	}
	if st, ok := w.(settler); ok && len(ps) > 0 {
		if err := st.settle(ctx); err != nil {
			w.Close()
			return nil, err
		}
	}
	return &twoPhaseAdapter{s: s, w: w}, nil
}

type twoPhaseAdapter struct {
	s *twoPhaseSubject
	w twoPhaseWriter
}

func (a *twoPhaseAdapter) Close() error { return a.w.Close() }

func (a *twoPhaseAdapter) CommitKept(ctx context.Context, k writertest.Pending) error {
	p, ok := k.(writers.Pending)
	if !ok {
		return fmt.Errorf("a %T, not a writers.Pending", k)
	}
	return a.w.Commit(ctx, p)
}

func (a *twoPhaseAdapter) Begin(ctx context.Context, b writertest.Batch) (writertest.Txn, error) {
	txn := a.s.txn.Add(1)
	if err := a.w.Begin(ctx, txn); err != nil {
		return nil, err
	}
	if err := a.w.write(ctx, b); err != nil {
		_ = a.w.Abort(ctx, writers.Pending{})
		return nil, err
	}
	return &twoPhaseTxn{w: a.w, txn: txn}, nil
}

type twoPhaseTxn struct {
	w        twoPhaseWriter
	txn      int64
	p        writers.Pending
	prepared bool
}

func (t *twoPhaseTxn) PreCommit(ctx context.Context) (writertest.Pending, error) {
	p, err := t.w.PreCommit(ctx)
	if err != nil {
		return nil, err
	}
	if p.Txn != t.txn {
		return nil, fmt.Errorf("PreCommit of txn %d returned the Pending of txn %d", t.txn, p.Txn)
	}
	t.p, t.prepared = p, true
	return p, nil
}

func (t *twoPhaseTxn) Commit(ctx context.Context) error {
	if !t.prepared {
		return errors.New("Commit before PreCommit")
	}
	return t.w.Commit(ctx, t.p)
}

// Abort aborts the pre-committed transaction, or the open one (the zero
// Pending) before PreCommit.
func (t *twoPhaseTxn) Abort(ctx context.Context) error { return t.w.Abort(ctx, t.p) }

// Kafka: rows are records keyed by the row's key with the value in decimal,
// read back by a read-committed consumer of the topic's one partition; the
// position a record keyed "@position" among them, or the committed offset
// of partition 0 of a source topic for a consumer group
// (kafkaGroupPosition).

const kafkaPositionKey = "@position"

type kafkaTxn struct {
	*kafkasink.Txn
	brokers []string
	topic   string
	group   *kafkaGroupPosition // nil: the position is a record
}

// kafkaGroupPosition: the position is group's committed offset of
// partition 0 of topic.
type kafkaGroupPosition struct {
	group, topic string
}

// Commit commits, then waits until no transaction is open on the
// partition. kafkasink.Txn.Commit returns when the transaction coordinator has
// decided the commit (EndTxn); the markers that make the records visible
// to read-committed consumers are written after that, asynchronously, so
// a read right after Commit may not see them yet. In the suite's steps no
// other transaction stays open across a successful commit (a fenced
// writer's is aborted by the newer writer's Recover), so "stable" means
// this one's markers are written. With group offsets, it also waits until
// the group has no pending offsets.
func (k *kafkaTxn) Commit(ctx context.Context, p writers.Pending) error {
	if err := k.Txn.Commit(ctx, p); err != nil {
		return err
	}
	return k.settle(ctx)
}

func (k *kafkaTxn) settle(ctx context.Context) error {
	client, err := sarama.NewClient(k.brokers, kafkautil.Config("writertest-wait"))
	if err != nil {
		return err
	}
	defer client.Close()
	const settleWait = time.Minute // a bound for a busy machine
	deadline := time.Now().Add(settleWait)
	for {
		lso, err := lastStableOffset(client, k.topic)
		if err != nil {
			return err
		}
		hwm, err := client.GetOffset(k.topic, 0, sarama.OffsetNewest)
		if err != nil {
			return err
		}
		if lso == hwm {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("committed, but %s's last stable offset %d is still below its high-water mark %d after %s", k.topic, lso, hwm, settleWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if k.group == nil {
		return nil
	}
	for {
		_, err := k.group.fetch(ctx, client, true)
		if !errors.Is(err, sarama.ErrUnstableOffsetCommit) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("committed, but group %s still has pending offsets after %s", k.group.group, settleWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (k *kafkaTxn) write(ctx context.Context, b writertest.Batch) error {
	for _, r := range b.Rows {
		if err := k.Write(ctx, k.topic, []byte(r.Key), []byte(strconv.FormatInt(r.Value, 10))); err != nil {
			return err
		}
	}
	if k.group != nil {
		to, err := strconv.ParseInt(b.To, 10, 64)
		if err != nil {
			return fmt.Errorf("position %q is not an offset: %w", b.To, err)
		}
		return k.WriteOffsets(ctx, k.group.group, map[string]map[int32]int64{k.group.topic: {0: to}})
	}
	return k.Write(ctx, k.topic, []byte(kafkaPositionKey), []byte(b.To))
}

// fetch returns the group's committed offset of partition 0 of the topic
// in decimal, "" if it has none. stable: fail with ErrUnstableOffsetCommit
// while a transaction holds pending offsets of the group for it, rather
// than answer the last committed one.
func (g *kafkaGroupPosition) fetch(ctx context.Context, client sarama.Client, stable bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := client.RefreshCoordinator(g.group); err != nil {
		return "", err
	}
	b, err := client.Coordinator(g.group)
	if err != nil {
		return "", err
	}
	req := sarama.NewOffsetFetchRequest(kafkautil.Version, g.group, map[string][]int32{g.topic: {0}})
	req.RequireStable = stable
	res, err := b.FetchOffset(req)
	if err != nil {
		return "", err
	}
	code := res.Err
	blk := res.GetBlock(g.topic, 0)
	if code == sarama.ErrNoError && blk != nil {
		code = blk.Err
	}
	switch {
	case code == sarama.ErrGroupIDNotFound: // kfake, for a group without offsets
		return "", nil
	case code != sarama.ErrNoError:
		return "", fmt.Errorf("fetching the offsets of group %s: %w", g.group, code)
	case blk == nil:
		return "", fmt.Errorf("fetching the offsets of group %s: no answer for %s/0", g.group, g.topic)
	case blk.Offset < 0:
		return "", nil
	}
	return strconv.FormatInt(blk.Offset, 10), nil
}

// readKafka returns what a read-committed consumer of partition 0 of topic
// reads from the start up to the last stable offset. It sends the fetches
// itself rather than use sarama's consumer: the consumer skips transaction
// markers without saying how far it got, so the end of what it can read
// would only show as a quiet time — and a slow fetch would then pass for
// "nothing visible". Like the consumer, it drops control batches and the
// batches of aborted transactions (the fetch response lists them).
//
// With group set, the position is the group's committed offset: the last
// committed one, as a consumer of the group starting now gets (pending
// offsets of an open or pre-committed transaction are not it).
func readKafka(ctx context.Context, brokers []string, topic string, group *kafkaGroupPosition) (writertest.State, error) {
	st := writertest.State{Rows: map[string]int64{}}
	client, err := sarama.NewClient(brokers, kafkautil.Config("writertest-reader"))
	if err != nil {
		return st, err
	}
	defer client.Close()
	if group != nil {
		if st.Position, err = group.fetch(ctx, client, false); err != nil {
			return st, err
		}
	}
	lso, err := lastStableOffset(client, topic)
	if err != nil {
		return st, err
	}
	next, err := client.GetOffset(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return st, err
	}
	leader, err := client.Leader(topic, 0)
	if err != nil {
		return st, err
	}
	aborted := map[int64]bool{} // producer ids inside an aborted transaction
	for next < lso {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 100, MinBytes: 1, MaxBytes: 1 << 20, Isolation: sarama.ReadCommitted}
		req.AddBlock(topic, 0, next, 1<<20, -1)
		res, err := leader.Fetch(req)
		if err != nil {
			return st, err
		}
		b := res.GetBlock(topic, 0)
		if b == nil {
			return st, fmt.Errorf("fetching %s: no answer for partition 0", topic)
		}
		if b.Err != sarama.ErrNoError {
			return st, fmt.Errorf("fetching %s at %d: %w", topic, next, b.Err)
		}
		txns := slices.SortedFunc(slices.Values(b.AbortedTransactions), func(x, y *sarama.AbortedTransaction) int {
			return cmp.Compare(x.FirstOffset, y.FirstOffset)
		})
		for _, rs := range b.RecordsSet {
			rb := rs.RecordBatch
			if rb == nil || rb.PartialTrailingRecord || rb.LastOffset() < next {
				continue
			}
			for len(txns) > 0 && txns[0].FirstOffset <= rb.LastOffset() {
				aborted[txns[0].ProducerID] = true
				txns = txns[1:]
			}
			switch {
			case rb.Control:
				// Its one record's key is (version int16, type int16),
				// type 0 ending an aborted transaction.
				if len(rb.Records) == 1 && len(rb.Records[0].Key) >= 4 && rb.Records[0].Key[3] == 0 && rb.Records[0].Key[2] == 0 {
					delete(aborted, rb.ProducerID)
				}
			case rb.IsTransactional && aborted[rb.ProducerID]:
			default:
				for _, r := range rb.Records {
					off := rb.FirstOffset + r.OffsetDelta
					if off < next || off >= lso {
						continue
					}
					if group == nil && string(r.Key) == kafkaPositionKey {
						st.Position = string(r.Value)
						continue
					}
					v, err := strconv.ParseInt(string(r.Value), 10, 64)
					if err != nil {
						return st, fmt.Errorf("record %d of %s: %w", off, topic, err)
					}
					st.Rows[string(r.Key)] += v
				}
			}
			next = rb.LastOffset() + 1
		}
	}
	return st, nil
}

// lastStableOffset is where a read-committed consumer of partition 0 stops.
func lastStableOffset(client sarama.Client, topic string) (int64, error) {
	leader, err := client.Leader(topic, 0)
	if err != nil {
		return 0, err
	}
	req := sarama.NewOffsetRequest(kafkautil.Version)
	req.IsolationLevel = sarama.ReadCommitted
	req.AddBlock(topic, 0, sarama.OffsetNewest, 1)
	res, err := leader.GetAvailableOffsets(req)
	if err != nil {
		return 0, err
	}
	b := res.GetBlock(topic, 0)
	if b == nil {
		return 0, fmt.Errorf("listing offsets of %s: no answer for partition 0", topic)
	}
	if b.Err != sarama.ErrNoError {
		return 0, fmt.Errorf("listing offsets of %s: %w", topic, b.Err)
	}
	if len(b.Offsets) > 0 {
		return b.Offsets[0], nil
	}
	return b.Offset, nil
}

// XA and WAL: rows into mb_totals, the position into writertest_positions.

var positions = writers.Upsert{Table: "writertest_positions", Keys: []string{"job"}, Values: []string{"position"}, Merge: writers.MergeReplace}

func createPositions(t *testing.T, sink *sqlsink.Writer) {
	t.Helper()
	if _, err := sink.DB().ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS writertest_positions (
  job VARCHAR(128) NOT NULL PRIMARY KEY,
  position VARCHAR(64) NOT NULL
) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
}

func readSQLWithPosition(ctx context.Context, sink *sqlsink.Writer, job string) (writertest.State, error) {
	rows, err := readTotals(ctx, sink, job)
	if err != nil {
		return writertest.State{}, err
	}
	st := writertest.State{Rows: rows}
	err = sink.DB().QueryRowContext(ctx, `SELECT position FROM writertest_positions WHERE job = ?`, job).Scan(&st.Position)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return st, err
}

type xaWriter struct {
	*sqlsink.XA
	job string
}

func (x *xaWriter) write(ctx context.Context, b writertest.Batch) error {
	if err := x.Upsert(ctx, writers.Totals, totalsRows(x.job, b.Rows)); err != nil {
		return err
	}
	return x.Upsert(ctx, positions, [][]any{{x.job, b.To}})
}

type walWriter struct {
	*sqlsink.WAL
	job string
}

func (w *walWriter) write(ctx context.Context, b writertest.Batch) error {
	if err := w.Upsert(ctx, writers.Totals, totalsRows(w.job, b.Rows)); err != nil {
		return err
	}
	return w.Upsert(ctx, positions, [][]any{{w.job, b.To}})
}

// filesink.Txn: lines "row <key> <value>" and "position <to>", read back with
// filesink.Read (committed files only, in txn order).

type fileWriter struct{ *filesink.Txn }

func (f *fileWriter) write(_ context.Context, b writertest.Batch) error {
	for _, r := range b.Rows {
		if err := f.Write(fmt.Appendf(nil, "row %s %d", r.Key, r.Value)); err != nil {
			return err
		}
	}
	return f.Write([]byte("position " + b.To))
}

func readFiles(dir, job string) (writertest.State, error) {
	st := writertest.State{Rows: map[string]int64{}}
	err := filesink.Read(dir, job, func(line []byte) error {
		f := bytes.Fields(line)
		switch {
		case len(f) == 3 && string(f[0]) == "row":
			v, err := strconv.ParseInt(string(f[2]), 10, 64)
			if err != nil {
				return err
			}
			st.Rows[string(f[1])] += v
		case len(f) == 2 && string(f[0]) == "position":
			st.Position = string(f[1])
		default:
			return fmt.Errorf("unexpected line %q", line)
		}
		return nil
	})
	return st, err
}
