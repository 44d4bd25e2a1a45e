package filesink

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/writertest"
)

func twoPhaseOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func fileTxnJob(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "ft-" + hex.EncodeToString(b)
}

func newTestFileTxn(t *testing.T, dir, job string, subtask int) *Txn {
	t.Helper()
	f, err := New(dir, job, subtask)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// fileTxnLines is what fileTxnWrite writes for txn: n lines, each long
// enough that n of them overflow the write buffer.
func fileTxnLines(txn int64, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"txn":%d,"i":%d,"n":%d,"pad":"%s"}`, txn, i, n, strings.Repeat("x", 80))
	}
	return out
}

func fileTxnWrite(t *testing.T, f *Txn, txn int64, n int) {
	t.Helper()
	twoPhaseOK(t, "Begin", f.Begin(t.Context(), txn))
	for _, l := range fileTxnLines(txn, n) {
		twoPhaseOK(t, "Write", f.Write([]byte(l)))
	}
}

func fileTxnPre(t *testing.T, f *Txn, txn int64, n int) writers.Pending {
	t.Helper()
	fileTxnWrite(t, f, txn, n)
	p, err := f.PreCommit(t.Context())
	twoPhaseOK(t, "PreCommit", err)
	return p
}

func readFileSinkLines(t *testing.T, dir, job string) []string {
	t.Helper()
	var out []string
	twoPhaseOK(t, "Read", Read(dir, job, func(line []byte) error {
		out = append(out, string(line))
		return nil
	}))
	return out
}

func wantFileLines(t *testing.T, dir, job string, want ...[]string) {
	t.Helper()
	got := readFileSinkLines(t, dir, job)
	all := slices.Concat(want...)
	if !slices.Equal(got, all) {
		t.Fatalf("committed lines of %s: %d lines, want %d (first got %.60q, first want %.60q)", job, len(got), len(all), first(got), first(all))
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func pendingNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, fileTxnPendingDir))
	twoPhaseOK(t, "reading .pending", err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestFileTxnNew(t *testing.T) {
	dir := t.TempDir()
	for _, job := range []string{"", ".", "..", ".hidden", "a/b", "a b", strings.Repeat("j", 201)} {
		if _, err := New(dir, job, 0); err == nil {
			t.Errorf("New(job %q) succeeded", job)
		}
		if err := Read(dir, job, func([]byte) error { return nil }); err == nil {
			t.Errorf("Read(job %q) succeeded", job)
		}
	}
	if _, err := New(dir, "j", -1); err == nil {
		t.Error("New with subtask -1 succeeded")
	}
	sub := filepath.Join(dir, "new", "sink")
	f := newTestFileTxn(t, sub, "job-1.a_b", 7)
	if fi, err := os.Stat(filepath.Join(sub, ".pending")); err != nil || !fi.IsDir() {
		t.Fatalf(".pending not created: %v", err)
	}
	if s := f.String(); !strings.Contains(s, sub) || !strings.Contains(s, "subtask 7") {
		t.Errorf("String() = %q", s)
	}
}

// TestFileTxnCommit: nothing is visible while written or pre-committed,
// all of it after Commit; Commit is idempotent.
func TestFileTxnCommit(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	f := newTestFileTxn(t, dir, job, 0)
	ctx := t.Context()
	twoPhaseOK(t, "Recover", f.Recover(ctx, nil))
	lines := fileTxnLines(1, 3000) // ~350 KB: most of it reaches the temp file before PreCommit
	fileTxnWrite(t, f, 1, len(lines))
	tmp := filepath.Join(dir, ".pending", job+"-000000000001-000.jsonl")
	if fi, err := os.Stat(tmp); err != nil || fi.Size() < fileTxnBufferBytes {
		t.Fatalf("temp file while writing: %v, %v", fi, err)
	}
	wantFileLines(t, dir, job)
	p, err := f.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit", err)
	if p.Sink != "file" || p.Subtask != 0 || p.Txn != 1 || p.ID != filepath.Base(tmp) || p.Data != nil {
		t.Fatalf("Pending = %+v", p)
	}
	wantFileLines(t, dir, job)

	twoPhaseOK(t, "Commit", f.Commit(ctx, p))
	wantFileLines(t, dir, job, lines)
	if names := pendingNames(t, dir); len(names) != 0 {
		t.Fatalf(".pending after Commit: %v", names)
	}
	twoPhaseOK(t, "second Commit", f.Commit(ctx, p))
	twoPhaseOK(t, "Commit from another writer", newTestFileTxn(t, dir, job, 0).Commit(ctx, p))
	wantFileLines(t, dir, job, lines)

	// A committed file is never replaced, e.g. when txn numbers are reused.
	p1again := fileTxnPre(t, f, 1, 2)
	if err := f.Commit(ctx, p1again); err == nil || errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("Commit over a committed file: %v, want a refusal", err)
	}
	wantFileLines(t, dir, job, lines)
	twoPhaseOK(t, "Abort", f.Abort(ctx, p1again))

	// A rename the filesystem left half done (both names, one file) is
	// finished, not refused.
	p2 := fileTxnPre(t, f, 2, 5)
	twoPhaseOK(t, "Link", os.Link(filepath.Join(dir, ".pending", p2.ID), filepath.Join(dir, p2.ID)))
	twoPhaseOK(t, "Commit of a half-renamed file", f.Commit(ctx, p2))
	if names := pendingNames(t, dir); len(names) != 0 {
		t.Fatalf(".pending after Commit: %v", names)
	}
	wantFileLines(t, dir, job, lines, fileTxnLines(2, 5))

	other := p
	other.Subtask = 1
	if err := f.Commit(ctx, other); err == nil || errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("Commit of another subtask's pending: %v", err)
	}
}

func TestFileTxnAbort(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	f := newTestFileTxn(t, dir, job, 0)
	ctx := t.Context()
	p := fileTxnPre(t, f, 1, 10)
	twoPhaseOK(t, "Abort", f.Abort(ctx, p))
	twoPhaseOK(t, "second Abort", f.Abort(ctx, p))
	if names := pendingNames(t, dir); len(names) != 0 {
		t.Fatalf(".pending after Abort: %v", names)
	}
	if err := f.Commit(ctx, p); !errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("Commit after Abort: %v, want ErrTxnLost", err)
	}

	// The zero Pending drops the open transaction.
	fileTxnWrite(t, f, 2, 10)
	twoPhaseOK(t, "Abort open", f.Abort(ctx, writers.Pending{}))
	twoPhaseOK(t, "Abort with nothing open", f.Abort(ctx, writers.Pending{}))
	if _, err := f.PreCommit(ctx); err == nil {
		t.Fatal("PreCommit after Abort of the open transaction succeeded")
	}
	if names := pendingNames(t, dir); len(names) != 0 {
		t.Fatalf(".pending after Abort of the open transaction: %v", names)
	}

	// Abort never touches a committed file.
	p3 := fileTxnPre(t, f, 3, 5)
	twoPhaseOK(t, "Commit", f.Commit(ctx, p3))
	twoPhaseOK(t, "Abort after Commit", f.Abort(ctx, p3))
	wantFileLines(t, dir, job, fileTxnLines(3, 5))
}

// TestFileTxnEmpty: an empty transaction makes no file and commits.
func TestFileTxnEmpty(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	f := newTestFileTxn(t, dir, job, 0)
	ctx := t.Context()
	twoPhaseOK(t, "Begin", f.Begin(ctx, 1))
	p, err := f.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit", err)
	if len(pendingNames(t, dir)) != 0 {
		t.Fatal("an empty transaction made a pending file")
	}
	twoPhaseOK(t, "Commit", f.Commit(ctx, p))
	twoPhaseOK(t, "Recover", newTestFileTxn(t, dir, job, 0).Recover(ctx, []writers.Pending{p}))
	twoPhaseOK(t, "Abort", f.Abort(ctx, p))
	entries, err := os.ReadDir(dir)
	twoPhaseOK(t, "ReadDir", err)
	if len(entries) != 1 {
		t.Fatalf("dir after an empty transaction: %v", entries)
	}
}

func TestFileTxnWriteErrors(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	f := newTestFileTxn(t, dir, job, 0)
	ctx := t.Context()
	if err := f.Write([]byte("x")); err == nil {
		t.Error("Write before Begin succeeded")
	}
	twoPhaseOK(t, "Begin", f.Begin(ctx, 1))
	if err := f.Begin(ctx, 2); err == nil {
		t.Error("Begin while open succeeded")
	}
	twoPhaseOK(t, "Write", f.Write([]byte("a")))
	if err := f.Write([]byte("b\nc")); err == nil {
		t.Error("Write of a line with a newline succeeded")
	}
	twoPhaseOK(t, "Write after a refused line", f.Write(nil))
	p, err := f.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit", err)
	twoPhaseOK(t, "Commit", f.Commit(ctx, p))
	wantFileLines(t, dir, job, []string{"a", ""})

	twoPhaseOK(t, "Close", f.Close())
	twoPhaseOK(t, "second Close", f.Close())
	if err := f.Begin(ctx, 3); err == nil {
		t.Error("Begin after Close succeeded")
	}
}

// TestFileTxnOrder: Read reads by (txn, subtask), whatever the
// commit order, and skips other jobs, including one whose name starts
// with this one's.
func TestFileTxnOrder(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	ctx := t.Context()
	f0 := newTestFileTxn(t, dir, job, 0)
	f12 := newTestFileTxn(t, dir, job, 12)
	lookalike := newTestFileTxn(t, dir, job+"-000000000001", 0)
	p0a := fileTxnPre(t, f0, 1, 3)
	p0b := fileTxnPre(t, f0, 2, 4) // pre-committed while 1 waits
	p12 := fileTxnPre(t, f12, 1, 5)
	pl := fileTxnPre(t, lookalike, 1, 6)
	for _, c := range []struct {
		f *Txn
		p writers.Pending
	}{{f0, p0b}, {lookalike, pl}, {f12, p12}, {f0, p0a}} {
		twoPhaseOK(t, "Commit", c.f.Commit(ctx, c.p))
	}
	wantFileLines(t, dir, job, fileTxnLines(1, 3), fileTxnLines(1, 5), fileTxnLines(2, 4))
	wantFileLines(t, dir, job+"-000000000001", fileTxnLines(1, 6))

	// fn's error stops the read and comes back.
	stop := errors.New("stop")
	n := 0
	err := Read(dir, job, func([]byte) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Read with a failing fn: %v after %d lines", err, n)
	}
}

func TestFileTxnLongLine(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	f := newTestFileTxn(t, dir, job, 0)
	long := strings.Repeat("0123456789", 30000) // 300 KB, several reader buffers
	twoPhaseOK(t, "Begin", f.Begin(t.Context(), 1))
	for _, l := range []string{"a", long, "b"} {
		twoPhaseOK(t, "Write", f.Write([]byte(l)))
	}
	p, err := f.PreCommit(t.Context())
	twoPhaseOK(t, "PreCommit", err)
	twoPhaseOK(t, "Commit", f.Commit(t.Context(), p))
	wantFileLines(t, dir, job, []string{"a", long, "b"})

	// A file without a final newline was not written by a Txn.
	twoPhaseOK(t, "WriteFile", os.WriteFile(filepath.Join(dir, fileTxnName(job, 2, 0)), []byte("c\nd"), 0o644))
	if err := Read(dir, job, func([]byte) error { return nil }); err == nil {
		t.Fatal("Read accepted a file whose last line has no newline")
	}
}

func TestFileTxnRecover(t *testing.T) {
	dir, job, otherJob := t.TempDir(), fileTxnJob(t), fileTxnJob(t)
	ctx := t.Context()
	old := newTestFileTxn(t, dir, job, 0)
	p1 := fileTxnPre(t, old, 1, 3)
	fileTxnPre(t, old, 2, 3)
	fileTxnWrite(t, old, 3, 2000) // open, partly written
	sub1 := newTestFileTxn(t, dir, job, 1)
	q1 := fileTxnPre(t, sub1, 1, 3)
	oj := newTestFileTxn(t, dir, otherJob, 0)
	o1 := fileTxnPre(t, oj, 1, 3)
	for _, f := range []*Txn{old, sub1, oj} {
		twoPhaseOK(t, "Close", f.Close())
	}
	if n := len(pendingNames(t, dir)); n != 5 {
		t.Fatalf("%d pending files, want 5", n)
	}

	f := newTestFileTxn(t, dir, job, 0)
	if err := f.Recover(ctx, []writers.Pending{q1}); err == nil {
		t.Fatal("Recover with another subtask's pending succeeded")
	}
	twoPhaseOK(t, "Recover", f.Recover(ctx, []writers.Pending{p1}))
	wantFileLines(t, dir, job, fileTxnLines(1, 3))
	want := []string{fileTxnName(job, 1, 1), fileTxnName(otherJob, 1, 0)}
	slices.Sort(want)
	if got := pendingNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf(".pending after Recover: %v, want %v", got, want)
	}
	twoPhaseOK(t, "Recover again", f.Recover(ctx, []writers.Pending{p1}))
	wantFileLines(t, dir, job, fileTxnLines(1, 3))

	// Recover also drops this writer's own open transaction.
	fileTxnWrite(t, f, 2, 10)
	twoPhaseOK(t, "Recover with an open transaction", f.Recover(ctx, nil))
	if got := pendingNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf(".pending after Recover: %v, want %v", got, want)
	}

	twoPhaseOK(t, "Recover subtask 1", newTestFileTxn(t, dir, job, 1).Recover(ctx, nil))
	twoPhaseOK(t, "Recover other job", newTestFileTxn(t, dir, otherJob, 0).Recover(ctx, []writers.Pending{o1}))
	wantFileLines(t, dir, job, fileTxnLines(1, 3))
	wantFileLines(t, dir, otherJob, fileTxnLines(1, 3))
	if got := pendingNames(t, dir); len(got) != 0 {
		t.Fatalf(".pending at the end: %v", got)
	}

	// A kept transaction that is gone for good is reported, not skipped.
	lost := writers.Pending{Sink: "file", Subtask: 0, Txn: 9, ID: fileTxnName(job, 9, 0)}
	if err := f.Recover(ctx, []writers.Pending{lost}); !errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("Recover of a lost transaction: %v, want ErrTxnLost", err)
	}
}

const fileTxnCrashEnv = "MICROBATCH_TEST_FILETXN_CRASH_DIR"

// TestFileTxnCrashChild is the process TestFileTxnCrash kills: it
// pre-commits txn 1 and 2, leaves 3 open with part of it written, and
// SIGKILLs itself.
func TestFileTxnCrashChild(t *testing.T) {
	spec := os.Getenv(fileTxnCrashEnv)
	if spec == "" {
		t.Skip("helper process of TestFileTxnCrash")
	}
	dir, job, _ := strings.Cut(spec, "|")
	f, err := New(dir, job, 0)
	twoPhaseOK(t, "New", err)
	for txn := int64(1); txn <= 2; txn++ {
		p := fileTxnPre(t, f, txn, 100*int(txn))
		data, err := json.Marshal(p)
		twoPhaseOK(t, "Marshal", err)
		fmt.Printf("PENDING %s\n", data)
	}
	fileTxnWrite(t, f, 3, 2000)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
}

// TestFileTxnCrash: the writing process dies by SIGKILL between PreCommit
// and Commit (and in the middle of a transaction); a new writer commits
// what the checkpoint kept and deletes the rest.
func TestFileTxnCrash(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	ps := writertest.RunKilledChild(t, "TestFileTxnCrashChild", fileTxnCrashEnv+"="+dir+"|"+job)
	if len(ps) != 2 {
		t.Fatalf("child printed %d pendings, want 2", len(ps))
	}
	if n := len(pendingNames(t, dir)); n != 3 {
		t.Fatalf("%d pending files after the kill, want 3", n)
	}
	wantFileLines(t, dir, job)
	f := newTestFileTxn(t, dir, job, 0)
	twoPhaseOK(t, "Recover", f.Recover(t.Context(), ps[:1]))
	wantFileLines(t, dir, job, fileTxnLines(1, 100))
	if got := pendingNames(t, dir); len(got) != 0 {
		t.Fatalf(".pending after Recover: %v", got)
	}
}

// TestFileTxnReaderSeesWholeFiles reads the sink over and over while
// transactions are written and committed: every transaction it sees must
// be complete.
func TestFileTxnReaderSeesWholeFiles(t *testing.T) {
	dir, job := t.TempDir(), fileTxnJob(t)
	const txns, lines = 40, 1500
	f := newTestFileTxn(t, dir, job, 0)
	ctx := t.Context()

	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var readErr error
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			reads++
			if readErr = checkWholeTxns(dir, job); readErr != nil {
				return
			}
		}
	})
	for txn := int64(1); txn <= txns && ctx.Err() == nil; txn++ {
		p := fileTxnPre(t, f, txn, lines)
		twoPhaseOK(t, "Commit", f.Commit(ctx, p))
	}
	close(done)
	wg.Wait()
	if readErr != nil {
		t.Fatalf("read %d: %v", reads, readErr)
	}
	twoPhaseOK(t, "final read", checkWholeTxns(dir, job))
	if got := len(readFileSinkLines(t, dir, job)); got != txns*lines {
		t.Fatalf("%d lines at the end, want %d", got, txns*lines)
	}
	t.Logf("%d reads while writing", reads)
}

// checkWholeTxns reads the sink once and checks that each transaction's
// lines, as written by fileTxnLines, are all there, in order.
func checkWholeTxns(dir, job string) error {
	var txn, next, n int64 = -1, 0, 0
	err := Read(dir, job, func(line []byte) error {
		var lt, li, ln int64
		if _, err := fmt.Sscanf(string(line), `{"txn":%d,"i":%d,"n":%d,`, &lt, &li, &ln); err != nil {
			return fmt.Errorf("line %q: %w", line, err)
		}
		if lt != txn {
			if txn >= 0 && next != n {
				return fmt.Errorf("txn %d: %d of %d lines", txn, next, n)
			}
			txn, next, n = lt, 0, ln
		}
		if li != next {
			return fmt.Errorf("txn %d: line %d where %d was due", txn, li, next)
		}
		next++
		return nil
	})
	if err == nil && txn >= 0 && next != n {
		err = fmt.Errorf("txn %d: %d of %d lines", txn, next, n)
	}
	return err
}
