package systemtest

// The process runner with kills placed by construction: stopRunAt runs
// one `microbatch run` and signals it after a delay, on a log line, or only
// once the stopped run's log shows it is where the kill must land.

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// batchStartedMarker is the log line stopRun aligns its kills on.
const batchStartedMarker = `msg="batch started"`

// stopRun starts one run, lets it work for delay (then, if align, until
// the next batch starts plus alignLag), sends it sig and returns how it
// ended. Its stderr goes to logPath. A run that exits before the signal
// fails the test.
func stopRun(t *testing.T, bin string, args []string, logPath string, delay time.Duration, align bool, alignLag time.Duration, sig syscall.Signal) *os.ProcessState {
	t.Helper()
	marker := ""
	if align {
		marker = batchStartedMarker
	}
	return stopRunOn(t, bin, args, logPath, delay, marker, alignLag, sig)
}

// stopRunOn is stopRun aligned on any log line: after delay it waits for
// the next line containing marker plus alignLag before it sends sig. An
// empty marker sends sig right after delay.
func stopRunOn(t *testing.T, bin string, args []string, logPath string, delay time.Duration, marker string, alignLag time.Duration, sig syscall.Signal) *os.ProcessState {
	t.Helper()
	ps, _ := stopRunAt(t, bin, args, logPath, stopPlan{delay: delay, marker: marker, lag: alignLag}, sig)
	return ps
}

// stopPlan says when stopRunAt signals a run.
type stopPlan struct {
	env    []string      // more environment for the run,
	delay  time.Duration // the run works at least this long,
	marker string        // then (if set) until the next line containing marker,
	lag    time.Duration // and this much longer.
	// inside, if set, judges whether the signal would land where it must:
	// the run is stopped (SIGSTOP) at the moment the plan chose, its whole
	// log read, and inside called with it; only if it says yes is sig
	// sent. Otherwise the run goes on (SIGCONT) to the next marker line,
	// up to tries times; the last try signals it wherever it is. So a kill
	// lands where the test reads that it landed, not because the test read
	// the log in time.
	inside func(log string) bool
	tries  int
}

const (
	// markerWait bounds the wait for the next marker line.
	markerWait = time.Minute
	// stopWait bounds the wait for a run to stop after SIGSTOP.
	stopWait = 30 * time.Second
)

// stopRunAt runs bin with args until plan says to send sig, and returns
// how the run ended and how many tries plan.inside took (0 without one).
// Its stderr goes to logPath. A run that exits before the signal fails the
// test.
func stopRunAt(t *testing.T, bin string, args []string, logPath string, plan stopPlan, sig syscall.Signal) (ps *os.ProcessState, tries int) {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := startPlannedRun(t, bin, args, f, logPath, plan)
	// On every way out, a failed test's too, the run is gone.
	defer r.reap()

	select {
	case <-r.eof:
		r.exitedEarly()
	case <-time.After(plan.delay):
	}
	for {
		if plan.marker != "" {
			r.nextMarker(r.markersSeen())
			time.Sleep(plan.lag)
		}
		if plan.inside == nil {
			break
		}
		tries++
		if plan.inside(r.stopAndRead()) || tries >= plan.tries {
			break
		}
		r.signal(syscall.SIGCONT)
	}
	r.signal(sig)
	if plan.inside != nil && sig != syscall.SIGKILL {
		r.signal(syscall.SIGCONT) // a stopped process acts on other signals once continued
	}
	select {
	case <-r.eof:
	case <-time.After(time.Minute):
		t.Fatalf("run still running a minute after %v", sig)
	}
	<-r.waited
	return r.cmd.ProcessState, tries
}

// plannedRun is one run of stopRunAt: the process, and its log as read so
// far, with the marker lines counted.
type plannedRun struct {
	t       *testing.T
	cmd     *exec.Cmd
	plan    stopPlan
	logPath string
	stderr  *logPipe
	eof     chan struct{} // the stderr reader is at EOF
	waited  chan struct{} // cmd.Wait returned

	mu      sync.Mutex
	log     strings.Builder
	markers int           // marker lines read
	marked  chan struct{} // a marker line was read (buffered 1)
}

// startPlannedRun starts bin with args, its stdout and stderr to f, and
// reads its stderr line by line.
func startPlannedRun(t *testing.T, bin string, args []string, f *os.File, logPath string, plan stopPlan) *plannedRun {
	t.Helper()
	r := &plannedRun{t: t, plan: plan, logPath: logPath, stderr: newLogPipe(t),
		waited: make(chan struct{}), marked: make(chan struct{}, 1)}
	r.cmd = exec.Command(bin, args...)
	r.cmd.Env = Env(plan.env...)
	r.cmd.Stdout = f
	r.cmd.Stderr = r.stderr.w
	if err := r.cmd.Start(); err != nil {
		r.stderr.closeWrite()
		t.Fatal(err)
	}
	go func() {
		_ = r.cmd.Wait()
		close(r.waited)
		r.stderr.closeWrite() // the reader gets EOF
	}()
	go r.stderr.read(func(line string) {
		f.WriteString(line + "\n")
		r.mu.Lock()
		r.log.WriteString(line + "\n")
		if plan.marker != "" && strings.Contains(line, plan.marker) {
			r.markers++
			select {
			case r.marked <- struct{}{}:
			default:
			}
		}
		r.mu.Unlock()
	})
	r.eof = r.stderr.done
	return r
}

// reap kills the run if it is still running and waits until it is gone
// and its log read.
func (r *plannedRun) reap() {
	select {
	case <-r.eof:
	default:
		_ = r.cmd.Process.Kill()
		<-r.eof
	}
	<-r.waited
}

func (r *plannedRun) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

func (r *plannedRun) markersSeen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.markers
}

// exitedEarly fails the test: the run exited before it was signalled.
func (r *plannedRun) exitedEarly() {
	<-r.eof
	<-r.waited
	log, _ := os.ReadFile(r.logPath)
	r.t.Fatalf("run exited by itself (%v) before it was signalled; log %s:\n%s", r.cmd.ProcessState, r.logPath, log)
}

// nextMarker waits for a marker line after the seen-th.
func (r *plannedRun) nextMarker(seen int) {
	deadline := time.After(markerWait)
	for r.markersSeen() <= seen {
		select {
		case <-r.marked:
		case <-r.eof:
			r.exitedEarly()
		case <-deadline:
			r.t.Fatalf("no line %s within %s (after %s and %d such lines); log %s:\n%s", r.plan.marker, markerWait, r.plan.delay, seen, r.logPath, r.text())
		}
	}
}

func (r *plannedRun) signal(sig syscall.Signal) {
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("sending %v to the run: %v", sig, err)
	}
}

// stopAndRead stops the run (SIGSTOP), waits until every thread of it is
// stopped and everything it wrote is read, and returns its whole log.
func (r *plannedRun) stopAndRead() string {
	r.signal(syscall.SIGSTOP)
	for deadline := time.Now().Add(stopWait); !procStopped(r.cmd.Process.Pid); time.Sleep(5 * time.Millisecond) {
		select {
		case <-r.eof:
			r.exitedEarly()
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the run did not stop within %s of SIGSTOP", stopWait)
		}
	}
	if err := r.stderr.sync(stopWait); err != nil {
		r.t.Fatal(err)
	}
	return r.text()
}

// batchLog is what a run's log says about its batches.
type batchLog struct {
	started, committed int
	last               int64 // id of the last batch started (0: none)
	open               bool  // the last batch started has no commit line
}

var batchLineRE = regexp.MustCompile(`msg="batch (started|committed)" batch=(\d+)`)

// parseBatchLog reads the slog text lines `msg="batch started" batch=N` and
// `msg="batch committed" batch=N`.
func parseBatchLog(log string) batchLog {
	var st batchLog
	committed := map[int64]bool{}
	for _, m := range batchLineRE.FindAllStringSubmatch(log, -1) {
		id, _ := strconv.ParseInt(m[2], 10, 64)
		if m[1] == "started" {
			st.started++
			st.last = id
		} else {
			st.committed++
			committed[id] = true
		}
	}
	st.open = st.last != 0 && !committed[st.last]
	return st
}

// TestParseBatchLog makes sure the mid-batch detector can say yes and no.
func TestParseBatchLog(t *testing.T) {
	const (
		claimed = `time=2026-01-01T00:00:00.000Z level=INFO msg="job claimed" job=j epoch=3` + "\n"
		start1  = `time=2026-01-01T00:00:00.001Z level=DEBUG msg="batch started" batch=11 partitions=4 offsets=20000` + "\n"
		commit1 = `time=2026-01-01T00:00:00.030Z level=INFO msg="batch committed" batch=11 partitions=4 records=20000` + "\n"
		start2  = `time=2026-01-01T00:00:00.201Z level=DEBUG msg="batch started" batch=12 partitions=4 offsets=20000` + "\n"
		cut     = `time=2026-01-01T00:00:00.230Z level=INFO msg="batch comm`
	)
	for _, c := range []struct {
		name string
		log  string
		want batchLog
	}{
		{"killed at start-up", claimed, batchLog{}},
		{"killed inside the first batch", claimed + start1, batchLog{started: 1, last: 11, open: true}},
		{"killed between batches", claimed + start1 + commit1, batchLog{started: 1, committed: 1, last: 11}},
		{"killed inside the second batch", claimed + start1 + commit1 + start2, batchLog{started: 2, committed: 1, last: 12, open: true}},
		{"killed while logging the commit", claimed + start1 + commit1 + start2 + cut, batchLog{started: 2, committed: 1, last: 12, open: true}},
	} {
		if got := parseBatchLog(c.log); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}
