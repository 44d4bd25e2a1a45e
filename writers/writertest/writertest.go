// Package writertest is a conformance suite for sink writers: one set of
// tests every writer must pass, whatever it writes to.
//
//   - CommitShowsRowsAndPositionTogether: nothing of a batch is visible
//     before its commit (for a two-phase writer: also after PreCommit), and
//     after it the batch's rows and the position it ends at are visible
//     together.
//   - AbortLeavesNothing: an aborted batch (for a two-phase writer: aborted
//     while open and aborted after PreCommit) leaves neither rows nor
//     position behind, and the next batch from the same position commits.
//   - ReplayIsHarmless: committing a committed batch again changes nothing.
//     An idempotent writer accepts the replay (ReplayIgnored), a
//     compare-and-set writer refuses it with an error (ReplayRefused).
//   - PreCommittedSurvivesRestart (two-phase writers): a batch
//     pre-committed by a writer that then closes is committed by a writer
//     opened later that keeps it (as a job restored from a checkpoint
//     listing it does), visible exactly once; one that the later writer
//     does not keep is aborted and never shows.
//   - StaleEpochRejected: a writer opened later (a restart, a new owner)
//     makes the commit of a batch an older writer still had in flight fail,
//     and that commit changes nothing. With FencedByOpen, so does a batch
//     the older writer begins after the newer one opened.
//   - CloseTwice: Close is safe to call twice, and closing a writer never
//     commits the batch it had open.
//
// Every assertion reads the state back from the sink (Subject.Read), through
// a connection of the Subject's own, not through the writer under test.
//
// It is an ordinary package, not a _test one, so that a program with a
// writer of its own can run the same suite: wrap the writer in a Subject
// (a writer factory on fresh space in the sink, plus a reader of that
// space) and call Run from one of its tests:
//
//	func TestMyWriterConformance(t *testing.T) {
//		writertest.Run(t, func(t *testing.T) writertest.Subject {
//			return newMySubject(t) // a new job/table/topic; cleanup via t.Cleanup
//		})
//	}
//
// This package's own tests run it for the writer of every sink package
// (writers/sqlsink, writers/kafkasink, writers/filesink and Redis),
// against real MariaDB, Redis and Apache Kafka (their adapters show how
// each kind of writer maps onto Subject), and against a small in-memory
// writer that is a complete Subject in one file (memory_test.go), which
// they also break on purpose to check that each test catches what it is
// for.
package writertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// Row is one keyed value of a batch. Rows are merged into the sink by
// adding: a key written by two batches holds the sum, so a batch applied
// twice shows up as doubled values.
type Row struct {
	Key   string
	Value int64
}

// Batch is what a writer commits as one unit: rows, and the move of the
// position from From to To. Positions are opaque strings: a Kafka offset
// in decimal, or a source position (offsets.SourceAdvance). The suite takes
// From from what Subject.Read last returned and picks each To itself:
// "10", "20", … — decimal numbers that only grow, valid as Kafka offsets
// and as source positions alike.
type Batch struct {
	From, To string
	Rows     []Row
}

// State is what a reader of the sink sees: the merged rows by key and the
// committed position ("" or the starting offset before the first commit,
// as the Subject stores it).
type State struct {
	Rows     map[string]int64
	Position string
}

func (s State) String() string {
	keys := slices.Sorted(maps.Keys(s.Rows))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, s.Rows[k])
	}
	return fmt.Sprintf("{rows {%s} position %q}", strings.Join(parts, " "), s.Position)
}

func (s State) equal(o State) bool {
	return s.Position == o.Position && maps.Equal(s.Rows, o.Rows)
}

// Pending is a pre-committed batch as a checkpoint stores it: what a
// writer opened later needs to commit it (writers.Pending, for the writers
// of package writers). The suite only hands it back to the Subject.
type Pending any

// Subject adapts one writer, with its own fresh space in the sink (a job
// name, a topic, a directory), to the suite. Run asks for a new Subject for
// every test.
type Subject interface {
	// Capabilities says which properties the writer offers.
	Capabilities() Capabilities
	// Open starts a writer instance, as a process does when it starts:
	// it claims the sink (takes a new epoch, recovers or aborts what an
	// earlier instance left) and can then write batches. Each Open is a
	// newer instance than every earlier one.
	Open(ctx context.Context) (Writer, error)
	// Read returns what a reader of the sink sees now, read through the
	// Subject's own connection.
	Read(ctx context.Context) (State, error)
}

// TwoPhaseSubject is the Subject of a two-phase writer
// (Capabilities.TwoPhase): it can also open a writer the way a job restored
// from a checkpoint does.
type TwoPhaseSubject interface {
	Subject
	// OpenKeeping opens a writer instance like Open, handing it keep: the
	// batches earlier instances pre-committed that it is to commit (a
	// restored checkpoint's, writers.TwoPhase.Recover's keep). Every other
	// batch an earlier instance left open or pre-committed, it aborts;
	// Open is OpenKeeping with nothing to keep. It may commit the kept
	// batches before it returns (Recover does) or leave them to
	// CommitKept.
	OpenKeeping(ctx context.Context, keep []Pending) (TwoPhaseWriter, error)
}

// TwoPhaseWriter is a writer instance opened by OpenKeeping.
type TwoPhaseWriter interface {
	Writer
	// CommitKept commits p, one of the batches handed to OpenKeeping.
	// Idempotent: a batch committed already (by OpenKeeping, or by an
	// earlier CommitKept) is success.
	CommitKept(ctx context.Context, p Pending) error
}

// Writer is one writer instance.
type Writer interface {
	// Begin starts a transaction and writes batch b into it. Nothing of
	// it may be visible before Commit.
	Begin(ctx context.Context, b Batch) (Txn, error)
	// Close releases the writer without committing what is open. Safe
	// to call twice.
	Close() error
}

// Txn is one batch in a writer.
type Txn interface {
	// PreCommit makes the batch durable but still invisible, and returns
	// what a writer opened later needs to commit it (see
	// TwoPhaseSubject). Called only for a two-phase writer
	// (Capabilities.TwoPhase), always before Commit.
	PreCommit(ctx context.Context) (Pending, error)
	// Commit makes the batch visible. ReplayIsHarmless calls it again
	// after it succeeded.
	Commit(ctx context.Context) error
	// Abort discards the batch, open or pre-committed.
	Abort(ctx context.Context) error
}

// Replay says what committing a committed batch again does.
type Replay int

const (
	// ReplayIgnored: the second commit succeeds and changes nothing
	// (idempotent writers: Redis folds, two-phase commits).
	ReplayIgnored Replay = iota + 1
	// ReplayRefused: the second commit fails with an error and changes
	// nothing (compare-and-set writers: the position is no longer where
	// the batch started).
	ReplayRefused
)

func (r Replay) String() string {
	switch r {
	case ReplayIgnored:
		return "ignored"
	case ReplayRefused:
		return "refused"
	}
	return fmt.Sprintf("Replay(%d)", int(r))
}

// Fencing says how a newer writer stops an older one.
type Fencing int

const (
	// NoFencing: nothing in the writer stops an older instance; whatever
	// runs it must (Capabilities.NoFencingReason says what).
	NoFencing Fencing = iota
	// FencedByNewerCommit: the commit of a batch an older writer had in
	// flight (begun before a newer writer opened) is refused once the
	// newer writer has committed a batch, not before. Batches the older
	// writer begins later are not covered.
	FencedByNewerCommit
	// FencedInFlightByOpen: the commit of a batch an older writer had in
	// flight is refused as soon as a newer writer has opened, whether or
	// not it committed anything; but a batch the older writer begins
	// after that is not stopped (e.g. a writer whose Open deletes what
	// older instances left, with no epoch to check later batches
	// against). NoFencingReason must say what stops those.
	FencedInFlightByOpen
	// FencedByOpen: every commit of an older writer is refused as soon
	// as a newer writer has opened, whether or not it committed anything:
	// of the batches it had in flight, and of those it begins after that
	// (refused at Begin, PreCommit or Commit).
	FencedByOpen
)

func (f Fencing) String() string {
	switch f {
	case NoFencing:
		return "none"
	case FencedByNewerCommit:
		return "by a newer commit"
	case FencedInFlightByOpen:
		return "in flight by a newer open"
	case FencedByOpen:
		return "by a newer open"
	}
	return fmt.Sprintf("Fencing(%d)", int(f))
}

// Capabilities are the properties a writer claims; the suite tests what is
// claimed and says what is not.
type Capabilities struct {
	// TwoPhase: the writer has PreCommit (a durable, invisible stage
	// between write and commit) and Abort works after it too.
	TwoPhase bool

	// Replay is what committing a committed batch again (Txn.Commit a
	// second time, as a retry after an outcome-unknown commit) does.
	Replay Replay
	// ReplayInNewWriter: a writer opened later may also run the same
	// batch again (Begin with the same From, To and rows, then Commit: a
	// restart that redoes its last batch), and Replay says what that
	// does. Two-phase writers say false: a new transaction with the same
	// rows is new output, and not running a committed batch twice is the
	// job of whatever stores their position (the checkpoint).
	ReplayInNewWriter bool
	// ReplayErr, if set, is what a refused replay's error must wrap
	// (errors.Is), e.g. offsets.ErrConflict.
	ReplayErr error

	// Fencing is how a newer writer stops an older one's batch in flight.
	Fencing Fencing
	// FencedErr, if set, is what a fenced commit's error must wrap, e.g.
	// offsets.ErrFenced.
	FencedErr error
	// NoFencingReason says, with NoFencing, why the writer can't fence
	// and what does instead. Required then, and with
	// FencedInFlightByOpen, for the batches not fenced.
	NoFencingReason string
}

func (c Capabilities) check() error {
	switch {
	case c.Replay != ReplayIgnored && c.Replay != ReplayRefused:
		return fmt.Errorf("Capabilities.Replay = %v: want ReplayIgnored or ReplayRefused", c.Replay)
	case (c.Fencing == NoFencing || c.Fencing == FencedInFlightByOpen) && c.NoFencingReason == "":
		return fmt.Errorf("Capabilities.Fencing = %v needs a NoFencingReason", c.Fencing)
	case c.Fencing < NoFencing || c.Fencing > FencedByOpen:
		return fmt.Errorf("Capabilities.Fencing = %v: unknown", c.Fencing)
	}
	return nil
}

// Timeout bounds each test's calls (its context).
const Timeout = 2 * time.Minute

// Run runs the suite, each test as a subtest with a Subject of its own
// from newSubject (which should register its cleanup with t.Cleanup).
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	tests := []struct {
		name string
		run  func(h *harness)
	}{
		{"CommitShowsRowsAndPositionTogether", commitShowsRowsAndPositionTogether},
		{"AbortLeavesNothing", abortLeavesNothing},
		{"ReplayIsHarmless", replayIsHarmless},
		{"PreCommittedSurvivesRestart", preCommittedSurvivesRestart},
		{"StaleEpochRejected", staleEpochRejected},
		{"CloseTwice", closeTwice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), Timeout)
			defer cancel()
			s := newSubject(t)
			caps := s.Capabilities()
			if err := caps.check(); err != nil {
				t.Fatalf("bad Subject: %v", err)
			}
			h := &harness{t: t, ctx: ctx, s: s, caps: caps}
			if caps.TwoPhase {
				ts, ok := s.(TwoPhaseSubject)
				if !ok {
					t.Fatalf("bad Subject: a two-phase writer's Subject (%T) must be a TwoPhaseSubject", s)
				}
				h.ts = ts
			}
			tc.run(h)
		})
	}
}

// The rows of the batches the tests write. Their values differ so that
// any mix-up (a batch applied twice, the wrong batch applied) shows.
var (
	rowsA     = []Row{{"a", 1}, {"b", 2}}
	rowsB     = []Row{{"a", 10}, {"c", 20}}
	rowsStale = []Row{{"a", 100}, {"z", 200}}
)

func commitShowsRowsAndPositionTogether(h *harness) {
	w := h.open()
	s0 := h.read()

	a := h.begin(w, Batch{From: s0.Position, To: "10", Rows: rowsA})
	h.expect("after Begin and Write, before Commit", s0)
	if h.caps.TwoPhase {
		h.preCommit(a)
		h.expect("after PreCommit, before Commit", s0)
	}
	h.commit(a)
	s1 := s0.plus("10", rowsA)
	h.expect("after Commit", s1)

	// A second batch merges into the first one's rows and moves the
	// position on.
	b := h.begin(w, Batch{From: "10", To: "20", Rows: rowsB})
	h.expect("while the second batch is open", s1)
	if h.caps.TwoPhase {
		h.preCommit(b)
		h.expect("after the second batch's PreCommit", s1)
	}
	h.commit(b)
	h.expect("after the second Commit", s1.plus("20", rowsB))
}

func abortLeavesNothing(h *harness) {
	w := h.open()
	s0 := h.read()

	open := h.begin(w, Batch{From: s0.Position, To: "10", Rows: rowsStale})
	if err := open.Abort(h.ctx); err != nil {
		h.t.Fatalf("Abort of an open batch: %v", err)
	}
	h.expect("after aborting an open batch", s0)

	if h.caps.TwoPhase {
		pre := h.begin(w, Batch{From: s0.Position, To: "10", Rows: rowsStale})
		h.preCommit(pre)
		if err := pre.Abort(h.ctx); err != nil {
			h.t.Fatalf("Abort after PreCommit: %v", err)
		}
		h.expect("after aborting a pre-committed batch", s0)
		if err := pre.Abort(h.ctx); err != nil {
			h.t.Fatalf("second Abort of a pre-committed batch (Abort is idempotent): %v", err)
		}
		h.expect("after aborting a pre-committed batch twice", s0)
	}

	// The same range commits afterwards, with nothing of the aborted
	// batches in it.
	b := h.begin(w, Batch{From: s0.Position, To: "10", Rows: rowsB})
	h.commit2(b)
	h.expect("after committing a batch in place of the aborted ones", s0.plus("10", rowsB))
}

func replayIsHarmless(h *harness) {
	w := h.open()
	s0 := h.read()

	batch := Batch{From: s0.Position, To: "10", Rows: rowsA}
	a := h.begin(w, batch)
	h.commit2(a)
	s1 := s0.plus("10", rowsA)
	h.expect("after Commit", s1)

	h.replayed("committing the same batch again", a.Commit(h.ctx))
	h.expect("after committing the same batch again", s1)

	if h.caps.ReplayInNewWriter {
		w = h.open()
		again, err := w.Begin(h.ctx, batch)
		if err == nil {
			if h.caps.TwoPhase {
				_, err = again.PreCommit(h.ctx)
			}
			if err == nil {
				err = again.Commit(h.ctx)
			}
		} else if h.caps.Replay != ReplayRefused {
			h.t.Fatalf("a newer writer's Begin of the committed batch: %v (the writer claims it ignores replays)", err)
		}
		h.replayed("a newer writer running the committed batch again", err)
		h.expect("after a newer writer ran the committed batch again", s1)
	}

	// The writer goes on from where the batch ended.
	b := h.begin(w, Batch{From: "10", To: "20", Rows: rowsB})
	h.commit2(b)
	h.expect("after the next batch", s1.plus("20", rowsB))
}

func preCommittedSurvivesRestart(h *harness) {
	if !h.caps.TwoPhase {
		h.t.Skip("the writer has no PreCommit (not two-phase)")
	}
	// Kept: the batch the checkpoint lists is committed by the newer
	// writer, once.
	old := h.open()
	s0 := h.read()
	a := h.begin(old, Batch{From: s0.Position, To: "10", Rows: rowsA})
	p := h.preCommit(a)
	if err := old.Close(); err != nil {
		h.t.Fatalf("Close of the writer that pre-committed: %v", err)
	}
	h.expect("after the writer that pre-committed closed", s0)

	s1 := s0.plus("10", rowsA)
	w := h.openKeeping([]Pending{p})
	if got := h.read(); !got.equal(s0) && !got.equal(s1) {
		h.t.Fatalf("after a newer writer opened keeping the pre-committed batch: the sink holds %v, want %v (not committed yet) or %v (committed by the open)", got, s0, s1)
	}
	if err := w.CommitKept(h.ctx, p); err != nil {
		h.t.Fatalf("the newer writer's commit of the kept batch: %v", err)
	}
	h.expect("after the newer writer committed the kept batch", s1)
	if err := w.CommitKept(h.ctx, p); err != nil {
		h.t.Fatalf("the newer writer's second commit of the kept batch (it is idempotent): %v", err)
	}
	h.expect("after the newer writer committed the kept batch twice", s1)

	// The newer writer goes on from where the kept batch ended.
	b := h.begin(w, Batch{From: "10", To: "20", Rows: rowsB})
	h.commit2(b)
	s2 := s1.plus("20", rowsB)
	h.expect("after the newer writer's own batch", s2)
	if err := w.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}

	// Not kept: a batch pre-committed by a writer that closed, which the
	// next writer does not keep (the checkpoint that would have listed it
	// did not complete), is aborted and never shows; the batch in its
	// place does. A later writer keeping nothing leaves what was
	// committed alone.
	old = h.open()
	lost := h.begin(old, Batch{From: "20", To: "30", Rows: rowsStale})
	h.preCommit(lost)
	if err := old.Close(); err != nil {
		h.t.Fatalf("Close of the writer that pre-committed: %v", err)
	}
	w = h.openKeeping(nil)
	h.expect("after a newer writer opened without keeping the pre-committed batch", s2)
	c := h.begin(w, Batch{From: "20", To: "30", Rows: rowsA})
	h.commit2(c)
	s3 := s2.plus("30", rowsA)
	h.expect("after the newer writer's batch in place of the one not kept", s3)
	h.open()
	h.expect("after yet another writer opened", s3)
}

func staleEpochRejected(h *harness) {
	if h.caps.Fencing == NoFencing {
		h.t.Skipf("the writer does not fence older instances: %s", h.caps.NoFencingReason)
	}
	old := h.open()
	s0 := h.read()
	zombie := h.begin(old, Batch{From: s0.Position, To: "10", Rows: rowsStale})
	if h.caps.TwoPhase {
		h.preCommit(zombie)
	}

	fresh := h.open()
	if h.caps.Fencing == FencedByOpen {
		h.fenced("the older writer's commit after a newer writer opened", zombie.Commit(h.ctx))
		h.expect("after the older writer's refused commit", s0)

		// A batch the older writer begins after the newer one opened is
		// stopped too: at Begin, at PreCommit (with any error: FencedErr
		// is what a refused commit wraps) or at Commit.
		const what = "the older writer's batch begun after a newer writer opened"
		stage := "Begin"
		late, err := old.Begin(h.ctx, Batch{From: s0.Position, To: "10", Rows: rowsStale})
		if err == nil && h.caps.TwoPhase {
			stage = "PreCommit"
			_, err = late.PreCommit(h.ctx)
		}
		if err == nil {
			h.fenced(what+", its commit", late.Commit(h.ctx))
		} else {
			h.t.Logf("%s, refused at %s as it should be: %v", what, stage, err)
		}
		h.expect("after the older writer's refused batch begun after a newer writer opened", s0)
	}
	if h.caps.Fencing == FencedInFlightByOpen {
		h.fenced("the older writer's commit after a newer writer opened", zombie.Commit(h.ctx))
		h.expect("after the older writer's refused commit", s0)
	}

	// The newer writer runs the same range with its own rows.
	b := h.begin(fresh, Batch{From: s0.Position, To: "10", Rows: rowsB})
	h.commit2(b)
	s1 := s0.plus("10", rowsB)
	h.expect("after the newer writer's commit", s1)

	h.fenced("the older writer's commit after a newer writer committed", zombie.Commit(h.ctx))
	h.expect("after the older writer's refused commit", s1)
}

func closeTwice(h *harness) {
	w, err := h.s.Open(h.ctx)
	if err != nil {
		h.t.Fatalf("Open: %v", err)
	}
	s0 := h.read()
	a := h.begin(w, Batch{From: s0.Position, To: "10", Rows: rowsA})
	h.commit2(a)
	s1 := s0.plus("10", rowsA)
	for i := range 2 {
		if err := w.Close(); err != nil {
			h.t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	h.expect("after closing the writer twice", s1)

	// Closing a writer with a batch open does not commit it.
	w, err = h.s.Open(h.ctx)
	if err != nil {
		h.t.Fatalf("Open: %v", err)
	}
	h.begin(w, Batch{From: "10", To: "20", Rows: rowsB})
	for i := range 2 {
		if err := w.Close(); err != nil {
			h.t.Fatalf("Close #%d of a writer with an open batch: %v", i+1, err)
		}
	}
	h.expect("after closing a writer with an open batch twice", s1)
}

// harness holds a test's Subject and the helpers that fail the test.
type harness struct {
	t    *testing.T
	ctx  context.Context
	s    Subject
	ts   TwoPhaseSubject // s, for a two-phase writer
	caps Capabilities
}

// open opens a writer that is closed when the test ends.
func (h *harness) open() Writer {
	h.t.Helper()
	w, err := h.s.Open(h.ctx)
	if err != nil {
		h.t.Fatalf("Open: %v", err)
	}
	h.t.Cleanup(func() { _ = w.Close() })
	return w
}

// openKeeping opens a two-phase writer keeping keep, closed when the test
// ends.
func (h *harness) openKeeping(keep []Pending) TwoPhaseWriter {
	h.t.Helper()
	w, err := h.ts.OpenKeeping(h.ctx, keep)
	if err != nil {
		h.t.Fatalf("OpenKeeping(%d batches): %v", len(keep), err)
	}
	h.t.Cleanup(func() { _ = w.Close() })
	return w
}

func (h *harness) read() State {
	h.t.Helper()
	s, err := h.s.Read(h.ctx)
	if err != nil {
		h.t.Fatalf("Read: %v", err)
	}
	if s.Rows == nil {
		s.Rows = map[string]int64{}
	}
	return s
}

func (h *harness) expect(when string, want State) {
	h.t.Helper()
	if got := h.read(); !got.equal(want) {
		h.t.Fatalf("%s: the sink holds %v, want %v", when, got, want)
	}
}

func (h *harness) begin(w Writer, b Batch) Txn {
	h.t.Helper()
	tx, err := w.Begin(h.ctx, b)
	if err != nil {
		h.t.Fatalf("Begin(%s → %s): %v", b.From, b.To, err)
	}
	return tx
}

func (h *harness) preCommit(tx Txn) Pending {
	h.t.Helper()
	p, err := tx.PreCommit(h.ctx)
	if err != nil {
		h.t.Fatalf("PreCommit: %v", err)
	}
	return p
}

func (h *harness) commit(tx Txn) {
	h.t.Helper()
	if err := tx.Commit(h.ctx); err != nil {
		h.t.Fatalf("Commit: %v", err)
	}
}

// commit2 pre-commits (two-phase writers) and commits.
func (h *harness) commit2(tx Txn) {
	h.t.Helper()
	if h.caps.TwoPhase {
		h.preCommit(tx)
	}
	h.commit(tx)
}

// replayed checks the outcome of a replayed commit against Capabilities.
func (h *harness) replayed(what string, err error) {
	h.t.Helper()
	switch h.caps.Replay {
	case ReplayIgnored:
		if err != nil {
			h.t.Fatalf("%s: %v (the writer claims it ignores replays)", what, err)
		}
	case ReplayRefused:
		if err == nil {
			h.t.Fatalf("%s: no error (the writer claims it refuses replays)", what)
		}
		if h.caps.ReplayErr != nil && !errors.Is(err, h.caps.ReplayErr) {
			h.t.Fatalf("%s: %v, want an error wrapping %q", what, err, h.caps.ReplayErr)
		}
		h.t.Logf("%s, refused as it should be: %v", what, err)
	}
}

// fenced checks that a stale writer's commit failed as fenced.
func (h *harness) fenced(what string, err error) {
	h.t.Helper()
	if err == nil {
		h.t.Fatalf("%s: no error, want it refused (fencing %v)", what, h.caps.Fencing)
	}
	if h.caps.FencedErr != nil && !errors.Is(err, h.caps.FencedErr) {
		h.t.Fatalf("%s: %v, want an error wrapping %q", what, err, h.caps.FencedErr)
	}
	h.t.Logf("%s, refused as it should be: %v", what, err)
}

// plus is s after committing rows and moving to position to.
func (s State) plus(to string, rows []Row) State {
	out := State{Rows: maps.Clone(s.Rows), Position: to}
	if out.Rows == nil {
		out.Rows = map[string]int64{}
	}
	for _, r := range rows {
		out.Rows[r.Key] += r.Value
	}
	return out
}
