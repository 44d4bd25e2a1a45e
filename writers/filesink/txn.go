package filesink

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/microbatch/microbatch/internal/fsutil"
	"github.com/microbatch/microbatch/writers"
)

// Txn is the file sink of checkpoint mode: each transaction is one
// file of lines (JSON Lines, for the built-in job),
//
//	dir/.pending/<job>-<txn %012d>-<subtask %03d>.jsonl   while open or pre-committed
//	dir/<job>-<txn %012d>-<subtask %03d>.jsonl            once committed
//
// Write appends to the temporary file, PreCommit flushes, fsyncs and closes
// it (and fsyncs .pending so the file survives a power loss), Commit
// renames it into dir and fsyncs dir, Abort deletes it. Because .pending is
// inside dir, the rename is on one filesystem and atomic: a reader of dir
// (Read) sees a transaction's file whole or not at all.
//
// An empty transaction makes no file: its Pending says so in Data
// ({"empty":true}) and Commit has nothing to do. An idle stream thus does
// not leave one empty file per checkpoint and subtask.
//
// Commit is idempotent: the temporary file gone and the committed one there
// means it was committed before; both gone is writers.ErrTxnLost. Commit never
// replaces a committed file of the same name (the job name and txn numbers
// were reused): it fails instead.
//
// Like every writers.TwoPhase writer, a Txn is used by one goroutine.
type Txn struct {
	dir, pending string
	job          string
	subtask      int

	open   *fileTxnOpen
	closed bool
}

var _ writers.TwoPhase = (*Txn)(nil)

// fileTxnPendingDir is where open and pre-committed transactions live.
const fileTxnPendingDir = ".pending"

// fileTxnBufferBytes is the write buffer of the open transaction.
const fileTxnBufferBytes = 64 << 10

// fileTxnJobRE: job names usable in a file name. No leading dot: it would
// hide the files, and "." or ".." would name directories.
var fileTxnJobRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$`)

// fileTxnTailRE matches what follows "<job>-" in a transaction's file name.
var fileTxnTailRE = regexp.MustCompile(`^([0-9]{12,19})-([0-9]{3,9})\.jsonl$`)

var errFileTxnClosed = errors.New("writers: file writer closed")

type fileTxnOpen struct {
	txn  int64
	name string
	f    *os.File // nil until the first Write
	bw   *bufio.Writer
	err  error // the first write error: the transaction can't pre-commit
}

// fileTxnData is a file Pending's Data.
type fileTxnData struct {
	Empty bool `json:"empty,omitempty"`
}

func checkFileJob(job string) error {
	if !fileTxnJobRE.MatchString(job) {
		return fmt.Errorf("writers: job name %q can't name files: use up to 200 of A-Z a-z 0-9 . _ -, not starting with a dot", job)
	}
	return nil
}

// fileTxnName is the file name of transaction txn of a job's subtask.
func fileTxnName(job string, txn int64, subtask int) string {
	return fmt.Sprintf("%s-%012d-%03d.jsonl", job, txn, subtask)
}

// parseFileTxnName returns the txn and subtask of one of job's file names.
func parseFileTxnName(job, name string) (txn int64, subtask int, ok bool) {
	tail, ok := strings.CutPrefix(name, job+"-")
	if !ok {
		return 0, 0, false
	}
	m := fileTxnTailRE.FindStringSubmatch(tail)
	if m == nil {
		return 0, 0, false
	}
	txn, err1 := strconv.ParseInt(m[1], 10, 64)
	subtask, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || fileTxnName(job, txn, subtask) != name {
		return 0, 0, false
	}
	return txn, subtask, true
}

// New returns the file writer of one sink subtask of job, writing
// into dir (created, with dir/.pending, if missing).
func New(dir, job string, subtask int) (*Txn, error) {
	if err := checkFileJob(job); err != nil {
		return nil, err
	}
	if subtask < 0 {
		return nil, fmt.Errorf("writers: file subtask %d is negative", subtask)
	}
	pending := filepath.Join(dir, fileTxnPendingDir)
	if err := os.MkdirAll(pending, 0o755); err != nil {
		return nil, fmt.Errorf("opening file sink %s: %w", dir, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("opening file sink %s: %w", dir, err)
	}
	return &Txn{dir: dir, pending: pending, job: job, subtask: subtask}, nil
}

// String names the directory, job and subtask.
func (f *Txn) String() string {
	return fmt.Sprintf("file %s job %s subtask %d", f.dir, f.job, f.subtask)
}

// Begin opens transaction txn. Its file is created by the first Write.
func (f *Txn) Begin(_ context.Context, txn int64) error {
	if f.closed {
		return errFileTxnClosed
	}
	if txn < 0 {
		return fmt.Errorf("beginning file transaction %d: negative", txn)
	}
	if f.open != nil {
		return fmt.Errorf("beginning file transaction %d: transaction %d is still open", txn, f.open.txn)
	}
	f.open = &fileTxnOpen{txn: txn, name: fileTxnName(f.job, txn, f.subtask)}
	return nil
}

// Write appends line and a newline to the open transaction. A line must not
// contain a newline itself (refused without harm to the transaction); any
// other failure leaves the transaction unable to pre-commit.
func (f *Txn) Write(line []byte) error {
	if f.closed {
		return errFileTxnClosed
	}
	o := f.open
	if o == nil {
		return errors.New("writers: no open file transaction (call Begin)")
	}
	if o.err != nil {
		return o.err
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		return fmt.Errorf("writing to %s: a line must not contain a newline", o.name)
	}
	if o.f == nil {
		fh, err := os.OpenFile(filepath.Join(f.pending, o.name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			o.err = fmt.Errorf("writing to %s: %w", o.name, err)
			return o.err
		}
		o.f, o.bw = fh, bufio.NewWriterSize(fh, fileTxnBufferBytes)
	}
	_, err := o.bw.Write(line)
	if err == nil {
		err = o.bw.WriteByte('\n')
	}
	if err != nil {
		o.err = fmt.Errorf("writing to %s: %w", o.name, err)
	}
	return o.err
}

// PreCommit flushes, fsyncs and closes the open transaction's file. On
// failure the file is deleted and the transaction is gone.
func (f *Txn) PreCommit(_ context.Context) (writers.Pending, error) {
	if f.closed {
		return writers.Pending{}, errFileTxnClosed
	}
	o := f.open
	if o == nil {
		return writers.Pending{}, errors.New("writers: no open file transaction to pre-commit")
	}
	f.open = nil
	p := writers.Pending{Sink: "file", Subtask: f.subtask, Txn: o.txn, ID: o.name}
	if o.f == nil && o.err == nil {
		p.Data, _ = json.Marshal(fileTxnData{Empty: true})
		return p, nil
	}
	err := o.err
	if err == nil {
		err = o.bw.Flush()
	}
	if err == nil {
		err = o.f.Sync()
	}
	if o.f != nil {
		if cerr := o.f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = fsutil.SyncDir(f.pending)
	}
	if err != nil {
		_ = os.Remove(filepath.Join(f.pending, o.name))
		return writers.Pending{}, fmt.Errorf("pre-committing %s: %w", o.name, err)
	}
	return p, nil
}

// pendingFile checks that p is one of this writer's transactions.
func (f *Txn) pendingFile(p writers.Pending) (name string, empty bool, err error) {
	if p.Sink != "file" || p.Subtask != f.subtask || p.Txn < 0 || p.ID != fileTxnName(f.job, p.Txn, f.subtask) {
		return "", false, fmt.Errorf("writers: %+v is not a transaction of %s", p, f)
	}
	var d fileTxnData
	if len(p.Data) > 0 {
		if err := json.Unmarshal(p.Data, &d); err != nil {
			return "", false, fmt.Errorf("writers: pending %s: bad data %s: %w", p.ID, p.Data, err)
		}
	}
	return p.ID, d.Empty, nil
}

// Commit moves the pre-committed file p into dir. Idempotent; ErrTxnLost
// if the file is neither pending nor committed.
func (f *Txn) Commit(_ context.Context, p writers.Pending) error {
	if f.closed {
		return errFileTxnClosed
	}
	name, empty, err := f.pendingFile(p)
	if err != nil {
		return err
	}
	if empty {
		return nil
	}
	tmp, dst := filepath.Join(f.pending, name), filepath.Join(f.dir, name)
	ti, terr := os.Lstat(tmp)
	di, derr := os.Lstat(dst)
	switch {
	case terr != nil && !errors.Is(terr, fs.ErrNotExist):
		return fmt.Errorf("committing %s: %w", name, terr)
	case derr != nil && !errors.Is(derr, fs.ErrNotExist):
		return fmt.Errorf("committing %s: %w", name, derr)
	case terr == nil && derr == nil:
		if !os.SameFile(ti, di) {
			return fmt.Errorf("committing %s: %s exists already (a transaction with this job, txn and subtask was committed before); not replacing it", name, dst)
		}
		// Two names for one file: a rename the filesystem did not finish.
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("committing %s: %w", name, err)
		}
	case terr == nil:
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("committing %s: %w", name, err)
		}
	case derr != nil:
		return fmt.Errorf("committing %s: %w: neither %s nor %s exists", name, writers.ErrTxnLost, tmp, dst)
	}
	// Also when it was committed before: that Commit may have stopped
	// between its rename and this.
	if err := fsutil.SyncDir(f.dir); err != nil {
		return fmt.Errorf("committing %s: %w", name, err)
	}
	return nil
}

// Abort deletes the pre-committed file p (a missing one is success), or,
// for the zero Pending, the open transaction. It never touches committed
// files.
func (f *Txn) Abort(_ context.Context, p writers.Pending) error {
	if f.closed {
		return errFileTxnClosed
	}
	if p.Sink == "" && p.ID == "" {
		return f.abortOpen()
	}
	name, _, err := f.pendingFile(p)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(f.pending, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("aborting %s: %w", name, err)
	}
	return nil
}

func (f *Txn) abortOpen() error {
	o := f.open
	if o == nil {
		return nil
	}
	f.open = nil
	if o.f == nil {
		return nil
	}
	_ = o.f.Close()
	if err := os.Remove(filepath.Join(f.pending, o.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("aborting %s: %w", o.name, err)
	}
	return nil
}

// Recover commits the files in keep and deletes every other pending file
// of this job and subtask. Other jobs' and subtasks' files are left alone.
func (f *Txn) Recover(ctx context.Context, keep []writers.Pending) error {
	if f.closed {
		return errFileTxnClosed
	}
	for _, p := range keep {
		if _, _, err := f.pendingFile(p); err != nil {
			return fmt.Errorf("recovering %s: %w", f, err)
		}
	}
	if err := f.abortOpen(); err != nil {
		return fmt.Errorf("recovering %s: %w", f, err)
	}
	for _, p := range keep {
		if err := f.Commit(ctx, p); err != nil {
			return fmt.Errorf("recovering %s: %w", f, err)
		}
	}
	entries, err := os.ReadDir(f.pending)
	if err != nil {
		return fmt.Errorf("recovering %s: %w", f, err)
	}
	removed := false
	for _, e := range entries {
		if _, sub, ok := parseFileTxnName(f.job, e.Name()); ok && sub == f.subtask {
			if err := os.Remove(filepath.Join(f.pending, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("recovering %s: %w", f, err)
			}
			removed = true
		}
	}
	if removed {
		// Not needed for correctness (a deleted file that comes back is
		// deleted again), only so that it doesn't.
		if err := fsutil.SyncDir(f.pending); err != nil {
			return fmt.Errorf("recovering %s: %w", f, err)
		}
	}
	return nil
}

// Close closes the open transaction's file, if any, leaving it to Recover.
// Safe to call twice.
func (f *Txn) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	if o := f.open; o != nil && o.f != nil {
		_ = o.f.Close()
	}
	f.open = nil
	return nil
}

// Read calls fn with every line (without its newline) of job's
// committed files in dir, in (txn, subtask) order, ignoring pending ones.
// line is only valid during the call. It stops at fn's first error, which
// it returns (with the file name added).
func Read(dir, job string, fn func(line []byte) error) error {
	if err := checkFileJob(job); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading file sink %s: %w", dir, err)
	}
	type file struct {
		txn     int64
		subtask int
		name    string
	}
	var files []file
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if txn, sub, ok := parseFileTxnName(job, e.Name()); ok {
			files = append(files, file{txn, sub, e.Name()})
		}
	}
	slices.SortFunc(files, func(a, b file) int {
		return cmp.Or(cmp.Compare(a.txn, b.txn), cmp.Compare(a.subtask, b.subtask))
	})
	r := bufio.NewReaderSize(nil, fileTxnBufferBytes)
	for _, fl := range files {
		if err := readFileTxnLines(filepath.Join(dir, fl.name), r, fn); err != nil {
			return fmt.Errorf("reading %s: %w", fl.name, err)
		}
	}
	return nil
}

func readFileTxnLines(path string, r *bufio.Reader, fn func([]byte) error) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	r.Reset(fh)
	var long []byte // a line longer than r's buffer
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, chunk...)
			continue
		case errors.Is(err, io.EOF):
			if len(long)+len(chunk) > 0 {
				return errors.New("last line has no newline: not a file this writer committed")
			}
			return nil
		case err != nil:
			return err
		}
		line := chunk
		if len(long) > 0 {
			long = append(long, chunk...)
			line = long
		}
		if err := fn(line[:len(line)-1]); err != nil {
			return err
		}
		long = long[:0]
	}
}
