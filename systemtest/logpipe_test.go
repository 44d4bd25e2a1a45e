package systemtest

// A child's stderr read line by line, with a sync that proves everything
// a stopped child wrote has been read.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// syncMark starts a line the test writes into a child's stderr pipe.
const syncMark = "microbatch-test-sync "

// logPipe carries a child's stderr to the test line by line. The test
// keeps the pipe's write end too: sync writes a mark behind what the child
// wrote and waits until the reader got to it, so that everything a stopped
// child wrote is read — which no sleep can promise on a busy machine.
type logPipe struct {
	r    *os.File
	done chan struct{} // closed when the reader is at EOF

	mu  sync.Mutex // guards w
	w   *os.File   // nil once closed
	seq atomic.Int64

	syncMu sync.Mutex // one sync at a time
	marks  chan int64 // sync marks read back
}

// newLogPipe makes the pipe; set the child's Stderr to lp.w before Start,
// run lp.read in a goroutine and call lp.closeWrite once the child has
// exited (its EOF).
func newLogPipe(t testing.TB) *logPipe {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return &logPipe{r: r, w: w, done: make(chan struct{}), marks: make(chan int64, 16)}
}

// read calls line for every line the child writes (the marks left out)
// until EOF, then closes lp.done.
func (lp *logPipe) read(line func(string)) {
	defer close(lp.done)
	defer lp.r.Close()
	sc := bufio.NewScanner(lp.r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if mark, ok := strings.CutPrefix(sc.Text(), syncMark); ok {
			n, _ := strconv.ParseInt(mark, 10, 64)
			select {
			case lp.marks <- n:
			default: // a sync that gave up; the next reads on
			}
			continue
		}
		line(sc.Text())
	}
}

// closeWrite closes the test's write end (after the child exited: the
// reader then gets EOF). Safe to call twice.
func (lp *logPipe) closeWrite() {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.w != nil {
		lp.w.Close()
		lp.w = nil
	}
}

// sync returns once every line the child wrote before the call has been
// passed to read's line function, or the pipe reached EOF; it fails after
// timeout.
func (lp *logPipe) sync(timeout time.Duration) error {
	lp.syncMu.Lock()
	defer lp.syncMu.Unlock()
	n := lp.seq.Add(1)
	lp.mu.Lock()
	var err error
	if lp.w != nil {
		_, err = fmt.Fprintf(lp.w, "%s%d\n", syncMark, n)
	}
	lp.mu.Unlock()
	if err != nil {
		return fmt.Errorf("writing a sync mark into the child's stderr pipe: %w", err)
	}
	deadline := time.After(timeout)
	for {
		select {
		case m := <-lp.marks:
			if m >= n {
				return nil
			}
		case <-lp.done:
			return nil
		case <-deadline:
			return fmt.Errorf("the test's reader did not catch up with the child's stderr within %s", timeout)
		}
	}
}

// procStopped reports whether every thread of process pid is stopped
// (SIGSTOP): only then can it write nothing more.
func procStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // a thread that ended
			}
			return false
		}
		// pid (comm) state ...: comm may hold anything but ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
			return false
		}
	}
	return true
}
