package writertest_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/microbatch/microbatch/writers/writertest"
)

// A writer to an in-memory store, correct unless told to have one of a few
// bugs: the suite passes it as it is, and fails it, in the right test, with
// each bug. That checks the suite itself: a conformance test that can't
// fail would pass broken writers.

func TestMemoryWriter(t *testing.T) {
	bug := os.Getenv(memBugEnv)
	writertest.Run(t, func(*testing.T) writertest.Subject {
		return &memSubject{store: &memStore{rows: map[string]int64{}, pos: "0", prepared: map[int64]writertest.Batch{}, committed: map[int64]bool{}}, bug: bug}
	})
}

const memBugEnv = "WRITERTEST_MEMORY_BUG"

// Each bug, and the test of the suite that must catch it.
var memBugs = map[string]string{
	"visible-before-commit": "CommitShowsRowsAndPositionTogether",
	"rows-without-position": "CommitShowsRowsAndPositionTogether",
	"abort-applies":         "AbortLeavesNothing",
	"precommit-applies":     "AbortLeavesNothing",
	"abort-twice-fails":     "AbortLeavesNothing",
	"abort-twice-undoes":    "AbortLeavesNothing",
	"no-position-check":     "ReplayIsHarmless",
	"replay-doubles":        "ReplayIsHarmless",
	"precommit-in-writer":   "PreCommittedSurvivesRestart",
	"open-commits-all":      "PreCommittedSurvivesRestart",
	"no-fencing":            "StaleEpochRejected",
	"fenced-commit-applies": "StaleEpochRejected",
	"fenced-at-begin-only":  "StaleEpochRejected",
	"fenced-by-commit-only": "StaleEpochRejected",
	"newer-commit-unfenced": "StaleEpochRejected",
	"close-twice-fails":     "CloseTwice",
	"close-commits":         "CloseTwice",
}

// What the bugs are:
//   - visible-before-commit: Begin applies the batch.
//   - rows-without-position: Commit adds the rows but leaves the position.
//   - abort-applies, precommit-applies: Abort, PreCommit apply the batch.
//   - abort-twice-fails: a second Abort of a batch fails.
//   - abort-twice-undoes: a second Abort takes the batch's rows off the
//     sink (an undo that runs again).
//   - no-position-check: Commit does not check that the position is at the
//     batch's From.
//   - replay-doubles: claims ReplayIgnored and applies a replay again.
//   - precommit-in-writer: PreCommit keeps the batch in the writer only,
//     so a writer opened later can't commit it.
//   - open-commits-all: Open commits every batch an earlier writer left
//     pre-committed, kept or not.
//   - no-fencing: claims FencedByOpen and fences nothing.
//   - fenced-commit-applies: a fenced commit fails, but applies the batch.
//   - fenced-at-begin-only: claims FencedByOpen, but fences only the
//     batches begun before a newer writer opened (checks the epoch the
//     batch began in, not the writer's: a filesink.Txn's behaviour).
//   - fenced-by-commit-only: claims FencedByOpen, but fences only once a
//     newer writer has committed.
//   - newer-commit-unfenced: claims FencedByNewerCommit and fences
//     nothing (a stale commit fails only on the position check, with the
//     wrong error).
//   - close-twice-fails: a second Close fails.
//   - close-commits: Close commits the open batches.

func TestSuiteCatchesBrokenWriters(t *testing.T) {
	if os.Getenv(memBugEnv) != "" {
		t.Skip("in the child process")
	}
	for bug, test := range memBugs {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMemoryWriter$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), memBugEnv+"="+bug)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a writer with bug %q (err %v):\n%s", bug, err, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestMemoryWriter/"+test+" ") {
				t.Fatalf("bug %q: want %s to fail:\n%s", bug, test, out)
			}
		})
	}
}

var (
	errMemFenced   = errors.New("memory: fenced by a newer writer")
	errMemConflict = errors.New("memory: position is not where the batch starts")
	errMemLost     = errors.New("memory: pre-committed batch lost")
)

// memStore is the sink: what is committed, and the pre-committed batches
// (a two-phase sink keeps them, not the writer: they outlive it).
type memStore struct {
	mu        sync.Mutex
	rows      map[string]int64
	pos       string
	epoch     int64                      // the newest writer's
	commitBy  int64                      // the epoch of the writer of the last commit
	prepared  map[int64]writertest.Batch // pre-committed, by id
	committed map[int64]bool             // ids of committed batches
	lastID    int64
}

type memSubject struct {
	store *memStore
	bug   string
}

// memPending is the memory writer's writertest.Pending.
type memPending struct{ id int64 }

func (s *memSubject) Capabilities() writertest.Capabilities {
	switch s.bug {
	case "replay-doubles":
		// Claims replays are ignored, but applies them without the
		// position check.
		return writertest.Capabilities{TwoPhase: true, Replay: writertest.ReplayIgnored,
			Fencing: writertest.FencedByOpen, FencedErr: errMemFenced}
	case "newer-commit-unfenced":
		return writertest.Capabilities{TwoPhase: true, Replay: writertest.ReplayRefused, ReplayErr: errMemConflict,
			Fencing: writertest.FencedByNewerCommit, FencedErr: errMemFenced}
	}
	return writertest.Capabilities{
		TwoPhase:          true,
		Replay:            writertest.ReplayRefused,
		ReplayInNewWriter: true,
		ReplayErr:         errMemConflict,
		Fencing:           writertest.FencedByOpen,
		FencedErr:         errMemFenced,
	}
}

func (s *memSubject) Open(ctx context.Context) (writertest.Writer, error) {
	return s.OpenKeeping(ctx, nil)
}

// OpenKeeping takes a new epoch and aborts the pre-committed batches not in
// keep. It leaves the kept ones to CommitKept.
func (s *memSubject) OpenKeeping(_ context.Context, keep []writertest.Pending) (writertest.TwoPhaseWriter, error) {
	st := s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	kept := map[int64]bool{}
	for _, k := range keep {
		p, ok := k.(memPending)
		if !ok {
			return nil, errors.New("memory: not a memPending")
		}
		kept[p.id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(st.prepared)) {
		switch {
		case s.bug == "open-commits-all":
			st.add(st.prepared[id], 1, s.bug)
			st.committed[id] = true
			delete(st.prepared, id)
		case !kept[id]:
			delete(st.prepared, id)
		}
	}
	st.epoch++
	return &memWriter{s: s, epoch: st.epoch}, nil
}

func (s *memSubject) Read(context.Context) (writertest.State, error) {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	return writertest.State{Rows: maps.Clone(s.store.rows), Position: s.store.pos}, nil
}

type memWriter struct {
	s      *memSubject
	epoch  int64
	open   []*memTxn
	closed bool
}

func (w *memWriter) Begin(_ context.Context, b writertest.Batch) (writertest.Txn, error) {
	st := w.s.store
	st.mu.Lock()
	st.lastID++
	t := &memTxn{w: w, b: b, id: st.lastID, epoch: st.epoch}
	st.mu.Unlock()
	w.open = append(w.open, t)
	if w.s.bug == "visible-before-commit" {
		_ = w.apply(b, w.epoch, false)
	}
	return t, nil
}

// CommitKept commits a batch OpenKeeping kept, from the store.
func (w *memWriter) CommitKept(_ context.Context, k writertest.Pending) error {
	p, ok := k.(memPending)
	if !ok {
		return errors.New("memory: not a memPending")
	}
	st := w.s.store
	st.mu.Lock()
	done := st.committed[p.id]
	b, prepared := st.prepared[p.id]
	st.mu.Unlock()
	switch {
	case done:
		return nil
	case !prepared:
		return errMemLost
	}
	if err := w.apply(b, w.epoch, true); err != nil {
		return err
	}
	st.mu.Lock()
	delete(st.prepared, p.id)
	st.committed[p.id] = true
	st.mu.Unlock()
	return nil
}

func (w *memWriter) Close() error {
	if w.closed && w.s.bug == "close-twice-fails" {
		return errors.New("memory: closed already")
	}
	if w.s.bug == "close-commits" {
		for _, t := range w.open {
			_ = t.Commit(context.Background())
		}
	}
	w.closed, w.open = true, nil
	return nil
}

// apply moves the position from b.From to b.To and adds b's rows, if
// (check) the writer of epoch is not fenced and the position is at b.From.
func (w *memWriter) apply(b writertest.Batch, epoch int64, check bool) error {
	st := w.s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	fenced := st.epoch > epoch
	switch w.s.bug {
	case "no-fencing", "newer-commit-unfenced":
		fenced = false
	case "fenced-by-commit-only":
		fenced = st.commitBy > epoch
	}
	if check && fenced {
		if w.s.bug == "fenced-commit-applies" {
			st.add(b, 1, w.s.bug)
		}
		return errMemFenced
	}
	if check && st.pos != b.From && w.s.bug != "no-position-check" && w.s.bug != "replay-doubles" {
		return errMemConflict
	}
	st.add(b, 1, w.s.bug)
	st.commitBy = max(st.commitBy, epoch)
	return nil
}

// add adds b's rows times sign and moves the position to b.To.
func (st *memStore) add(b writertest.Batch, sign int64, bug string) {
	for _, r := range b.Rows {
		st.rows[r.Key] += sign * r.Value
	}
	if bug != "rows-without-position" && sign > 0 {
		st.pos = b.To
	}
}

type memTxn struct {
	w       *memWriter
	b       writertest.Batch
	id      int64
	epoch   int64 // the store's when the batch began
	aborted bool
}

// fenceEpoch is the epoch a commit of t is fenced by.
func (t *memTxn) fenceEpoch() int64 {
	if t.w.s.bug == "fenced-at-begin-only" {
		return t.epoch
	}
	return t.w.epoch
}

func (t *memTxn) PreCommit(context.Context) (writertest.Pending, error) {
	switch t.w.s.bug {
	case "precommit-applies":
		return memPending{t.id}, t.w.apply(t.b, t.fenceEpoch(), true)
	case "precommit-in-writer":
		return memPending{t.id}, nil
	}
	st := t.w.s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	st.prepared[t.id] = t.b
	return memPending{t.id}, nil
}

func (t *memTxn) Commit(context.Context) error {
	t.w.open = removeTxn(t.w.open, t)
	if err := t.w.apply(t.b, t.fenceEpoch(), true); err != nil {
		return err
	}
	st := t.w.s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.prepared, t.id)
	st.committed[t.id] = true
	return nil
}

func (t *memTxn) Abort(context.Context) error {
	t.w.open = removeTxn(t.w.open, t)
	again := t.aborted
	t.aborted = true
	switch bug := t.w.s.bug; {
	case bug == "abort-applies":
		return t.w.apply(t.b, t.fenceEpoch(), true)
	case again && bug == "abort-twice-fails":
		return errors.New("memory: aborted already")
	case again && bug == "abort-twice-undoes":
		st := t.w.s.store
		st.mu.Lock()
		defer st.mu.Unlock()
		st.add(t.b, -1, bug)
		return nil
	}
	st := t.w.s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.prepared, t.id)
	return nil
}

func removeTxn(ts []*memTxn, t *memTxn) []*memTxn {
	out := ts[:0]
	for _, x := range ts {
		if x != t {
			out = append(out, x)
		}
	}
	return out
}
