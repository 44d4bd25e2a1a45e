package writertest_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
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
		return &memSubject{store: &memStore{rows: map[string]int64{}, pos: "0"}, bug: bug}
	})
}

const memBugEnv = "WRITERTEST_MEMORY_BUG"

// Each bug, and the test of the suite that must catch it.
var memBugs = map[string]string{
	"visible-before-commit": "CommitShowsRowsAndPositionTogether",
	"rows-without-position": "CommitShowsRowsAndPositionTogether",
	"abort-applies":         "AbortLeavesNothing",
	"precommit-applies":     "AbortLeavesNothing",
	"no-position-check":     "ReplayIsHarmless",
	"replay-doubles":        "ReplayIsHarmless",
	"no-fencing":            "StaleEpochRejected",
	"close-twice-fails":     "CloseTwice",
	"close-commits":         "CloseTwice",
}

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
)

type memStore struct {
	mu    sync.Mutex
	rows  map[string]int64
	pos   string
	epoch int64
}

type memSubject struct {
	store *memStore
	bug   string
}

func (s *memSubject) Capabilities() writertest.Capabilities {
	if s.bug == "replay-doubles" {
		// Claims replays are ignored, but applies them without the
		// position check.
		return writertest.Capabilities{TwoPhase: true, Replay: writertest.ReplayIgnored,
			Fencing: writertest.FencedByOpen, FencedErr: errMemFenced}
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

func (s *memSubject) Open(context.Context) (writertest.Writer, error) {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	s.store.epoch++
	return &memWriter{s: s, epoch: s.store.epoch}, nil
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
	t := &memTxn{w: w, b: b}
	w.open = append(w.open, t)
	if w.s.bug == "visible-before-commit" {
		w.apply(b, true)
	}
	return t, nil
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

// apply moves the position from b.From to b.To and adds b's rows, if the
// writer is not fenced and the position is at b.From (check).
func (w *memWriter) apply(b writertest.Batch, check bool) error {
	st := w.s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	if check && st.epoch > w.epoch && w.s.bug != "no-fencing" {
		return errMemFenced
	}
	if check && st.pos != b.From && w.s.bug != "no-position-check" && w.s.bug != "replay-doubles" {
		return errMemConflict
	}
	for _, r := range b.Rows {
		st.rows[r.Key] += r.Value
	}
	if w.s.bug != "rows-without-position" {
		st.pos = b.To
	}
	return nil
}

type memTxn struct {
	w *memWriter
	b writertest.Batch
}

func (t *memTxn) PreCommit(context.Context) error {
	if t.w.s.bug == "precommit-applies" {
		return t.w.apply(t.b, true)
	}
	return nil
}

func (t *memTxn) Commit(context.Context) error {
	t.w.open = removeTxn(t.w.open, t)
	return t.w.apply(t.b, true)
}

func (t *memTxn) Abort(context.Context) error {
	t.w.open = removeTxn(t.w.open, t)
	if t.w.s.bug == "abort-applies" {
		return t.w.apply(t.b, true)
	}
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
