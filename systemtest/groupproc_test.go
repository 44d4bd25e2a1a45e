package systemtest

// Long-lived `microbatch run` processes whose logs the tests read while
// they run (groupProc), and what those logs say: assignments, batches,
// commits, fencing.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// groupProc is one `microbatch run` process of a group test; its stderr is
// kept line by line (and copied to logPath with its stdout).
type groupProc struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	mu      sync.Mutex
	lines   []string
	assigns []assignment  // its "partitions assigned" lines
	commits []int         // indexes of its "batch committed" lines
	notify  chan struct{} // a line arrived (1-buffered)
	eof     chan struct{} // stderr closed: the process is gone

	stderr *logPipe
	waited chan struct{} // closed when the process has been waited for
	state  *os.ProcessState
}

// startGroupProc starts `microbatch args...` with env; cleanup kills it if
// it is still running.
func startGroupProc(t *testing.T, name, logDir string, env, args []string) *groupProc {
	t.Helper()
	p := &groupProc{name: name, logPath: filepath.Join(logDir, name+".log"), notify: make(chan struct{}, 1),
		stderr: newLogPipe(t), waited: make(chan struct{})}
	p.eof = p.stderr.done
	f, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(Binary(t), args...)
	p.cmd.Env = env
	p.cmd.Stdout = f
	p.cmd.Stderr = p.stderr.w
	if err := p.cmd.Start(); err != nil {
		f.Close()
		p.stderr.closeWrite()
		p.stderr.r.Close()
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.waited)
		p.stderr.closeWrite() // the reader gets EOF
	}()
	go func() {
		defer f.Close()
		p.stderr.read(func(line string) {
			f.WriteString(line + "\n")
			p.mu.Lock()
			if as := parseAssignments([]string{line}); len(as) == 1 {
				as[0].line = len(p.lines)
				p.assigns = append(p.assigns, as[0])
			}
			if strings.Contains(line, committedMarker) {
				p.commits = append(p.commits, len(p.lines))
			}
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			select {
			case p.notify <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		select {
		case <-p.eof:
		default:
			// SIGKILL ends a stopped process too.
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
		p.wait()
		if t.Failed() { // the log directory goes with the test
			t.Logf("%s ended %v; last lines of its log:\n%s", p.name, p.state, tail(p.snapshot(), 30))
		}
	})
	return p
}

func (p *groupProc) wait() *os.ProcessState {
	<-p.eof
	<-p.waited
	return p.state
}

// sync returns once every line the process wrote before the call is in
// p.lines (logPipe.sync): after a stop, its whole log.
func (p *groupProc) sync(t *testing.T) {
	t.Helper()
	if err := p.stderr.sync(groupWait); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
}

func (p *groupProc) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// linesFrom returns the lines from index from on.
func (p *groupProc) linesFrom(from int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines[min(from, len(p.lines)):])
}

func (p *groupProc) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

func (p *groupProc) text() string { return strings.Join(p.snapshot(), "\n") }

// assignments are the process's "partitions assigned" lines so far.
func (p *groupProc) assignments() []assignment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.assigns)
}

// commitsAfter counts the "batch committed" lines after line index line.
func (p *groupProc) commitsAfter(line int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearch(p.commits, line+1)
	return len(p.commits) - i
}

func (p *groupProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: sending %v: %v", p.name, sig, err)
	}
}

func (p *groupProc) exited() bool {
	select {
	case <-p.eof:
		return true
	default:
		return false
	}
}

// requireRunning fails the test if the process ended by itself.
func (p *groupProc) requireRunning(t *testing.T) {
	t.Helper()
	if p.exited() {
		ps := p.wait()
		t.Fatalf("%s exited by itself (%v); log %s:\n%s", p.name, ps, p.logPath, tail(p.snapshot(), 40))
	}
}

// exit waits at most timeout for the process to end.
func (p *groupProc) exit(t *testing.T, timeout time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.eof:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %s; log %s:\n%s", p.name, timeout, p.logPath, tail(p.snapshot(), 40))
	}
	return p.wait()
}

// stopped reports whether the process is stopped (SIGSTOP), every thread.
func (p *groupProc) stopped() bool { return procStopped(p.cmd.Process.Pid) }

// waitLine waits for a line from index from on that matches and returns its
// index. The process ending first fails the test.
func (p *groupProc) waitLine(t *testing.T, from int, timeout time.Duration, what string, match func(string) bool) int {
	t.Helper()
	deadline := time.After(timeout)
	for {
		for i, l := range p.linesFrom(from) {
			if match(l) {
				return from + i
			}
		}
		from = max(from, p.lineCount())
		select {
		case <-p.notify:
		case <-p.eof:
			// Lines read before EOF are in p.lines already.
			if p.lineCount() > from {
				continue
			}
			p.requireRunning(t)
		case <-deadline:
			t.Fatalf("%s: waited %s for %s; log %s:\n%s", p.name, timeout, what, p.logPath, tail(p.snapshot(), 40))
		}
	}
}

// lastAssignment is the process's latest "partitions assigned" line.
func (p *groupProc) lastAssignment() assignment {
	as := p.assignments()
	if len(as) == 0 {
		return assignment{line: -1}
	}
	return as[len(as)-1]
}

// stopGroupProc sends SIGTERM and requires exit 0 and a "run finished"
// line; it returns that line's fenced count.
func stopGroupProc(t *testing.T, p *groupProc) int {
	t.Helper()
	p.requireRunning(t)
	p.signal(t, syscall.SIGTERM)
	if ps := p.exit(t, 30*time.Second); ps.ExitCode() != 0 {
		t.Fatalf("%s after SIGTERM: %v, want exit 0; log %s:\n%s", p.name, ps, p.logPath, tail(p.snapshot(), 40))
	}
	return finishedFenced(t, p)
}

var finishedRE = regexp.MustCompile(`msg="run finished" .*\bfenced=(\d+)`)

// finishedFenced is the fenced count of the process's "run finished" line.
func finishedFenced(t *testing.T, p *groupProc) int {
	t.Helper()
	m := finishedRE.FindStringSubmatch(p.text())
	if m == nil {
		t.Fatalf("%s: no \"run finished\" line with fenced=; log %s:\n%s", p.name, p.logPath, tail(p.snapshot(), 40))
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func killedBy(ps *os.ProcessState, sig syscall.Signal) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// killInBatch SIGKILLs p inside a batch: at the next "batch started" line
// it stops p (SIGSTOP), and kills it if the batch has not committed yet,
// or lets it go on and tries the next batch. It returns the attempts and
// the id of the batch the kill landed in.
func killInBatch(t *testing.T, p *groupProc) (tries int, batchID string) {
	t.Helper()
	for tries = 1; tries <= 20; tries++ {
		p.waitLine(t, p.lineCount(), 10*time.Second, "a batch to start", func(l string) bool {
			return strings.Contains(l, batchStartedMarker)
		})
		p.signal(t, syscall.SIGSTOP)
		waitFor(t, groupWait, p.name+" to stop", p.stopped)
		p.sync(t) // all p wrote before it stopped is read
		if lines := p.snapshot(); openBatch(lines) {
			p.signal(t, syscall.SIGKILL)
			return tries, lastBatchStarted(lines)
		}
		p.signal(t, syscall.SIGCONT)
	}
	t.Fatalf("%s: no batch was still open at 20 stops; log %s", p.name, p.logPath)
	return 0, ""
}

var batchIDRE = regexp.MustCompile(`msg="batch (?:started|committed)" batch=(\d+)`)

func lastBatchStarted(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], batchStartedMarker) {
			if m := batchIDRE.FindStringSubmatch(lines[i]); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// openBatch reports whether the last batch started has no commit line
// after it. (By position, not by id: after a rebalance a process's batch
// ids may repeat.)
func openBatch(lines []string) bool {
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.Contains(lines[i], batchStartedMarker) {
			continue
		}
		id := batchIDRE.FindStringSubmatch(lines[i])
		if id == nil {
			return false
		}
		for _, l := range lines[i+1:] {
			if m := batchIDRE.FindStringSubmatch(l); m != nil && strings.Contains(l, committedMarker) && m[1] == id[1] {
				return false
			}
		}
		return true
	}
	return false
}

// assignment is one "partitions assigned" line of a process's log.
type assignment struct {
	line       int // index in the log
	group      string
	generation int
	member     string
	parts      []int32
	epoch      int64
}

var assignedRE = regexp.MustCompile(`msg="partitions assigned" group=(\S+) generation=(\d+) member=(\S+) partitions="?\[([0-9 ]*)\]"? epoch=(\d+)`)

func parseAssignments(lines []string) []assignment {
	var out []assignment
	for i, l := range lines {
		m := assignedRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := assignment{line: i, group: m[1], member: m[3]}
		a.generation, _ = strconv.Atoi(m[2])
		a.epoch, _ = strconv.ParseInt(m[5], 10, 64)
		for _, f := range strings.Fields(m[4]) {
			n, _ := strconv.ParseInt(f, 10, 32)
			a.parts = append(a.parts, int32(n))
		}
		out = append(out, a)
	}
	return out
}

func generationsOf(as []assignment) []int {
	var gens []int
	for _, a := range as {
		gens = append(gens, a.generation)
	}
	return gens
}

const committedMarker = `msg="batch committed"`

// waitSettled waits until procs agree on one generation newer than after,
// their partitions cover the topic's exactly once, and each process that
// has partitions committed a batch since it was assigned them. It returns
// the generation. A process that ends fails the test.
func waitSettled(t *testing.T, what string, after int, procs ...*groupProc) int {
	t.Helper()
	gen := 0
	waitFor(t, groupWait, what, func() bool {
		gen = 0
		var parts []int32
		for _, p := range procs {
			p.requireRunning(t)
			a := p.lastAssignment()
			if a.line < 0 || a.generation <= after || (gen != 0 && a.generation != gen) {
				return false
			}
			gen = a.generation
			if len(a.parts) > 0 && p.commitsAfter(a.line) == 0 {
				return false
			}
			parts = append(parts, a.parts...)
		}
		slices.Sort(parts)
		return slices.Equal(parts, allPartitions())
	})
	return gen
}

// laterOwner names the process that was assigned part in a generation
// after gen, if any.
func laterOwner(part int32, gen int, procs ...*groupProc) string {
	for _, p := range procs {
		for _, a := range p.assignments() {
			if a.generation > gen && slices.Contains(a.parts, part) {
				return p.name
			}
		}
	}
	return ""
}

// TestGroupParseLog makes sure the log readers the group tests rely on
// can say yes and no.
func TestGroupParseLog(t *testing.T) {
	const (
		assigned3 = `time=2026-01-01T00:00:00.000Z level=INFO msg="partitions assigned" group=g generation=3 member=m-1 partitions="[0 2 4]" epoch=7`
		assigned1 = `time=2026-01-01T00:00:00.000Z level=INFO msg="partitions assigned" group=g generation=4 member=m-1 partitions=[5] epoch=8`
		assigned0 = `time=2026-01-01T00:00:00.000Z level=INFO msg="partitions assigned" group=g generation=5 member=m-1 partitions=[] epoch=9`
		start4    = `time=2026-01-01T00:00:00.001Z level=DEBUG msg="batch started" batch=4 partitions=3 offsets=600`
		commit4   = `time=2026-01-01T00:00:00.030Z level=INFO msg="batch committed" batch=4 partitions=3 records=600 dead_letters=0 lag=0 fenced=0`
		start5    = `time=2026-01-01T00:00:00.151Z level=DEBUG msg="batch started" batch=5 partitions=3 offsets=600`
		finished  = `time=2026-01-01T00:00:01.000Z level=INFO msg="run finished" job=j strategy=txn epoch=9 batches=2 records=600 dead_letters=0 fenced=2 elapsed=1s`
	)
	as := parseAssignments([]string{assigned3, start4, assigned1, assigned0})
	want := []assignment{
		{line: 0, group: "g", generation: 3, member: "m-1", parts: []int32{0, 2, 4}, epoch: 7},
		{line: 2, group: "g", generation: 4, member: "m-1", parts: []int32{5}, epoch: 8},
		{line: 3, group: "g", generation: 5, member: "m-1", epoch: 9},
	}
	if fmt.Sprint(as) != fmt.Sprint(want) {
		t.Errorf("parseAssignments: got %+v, want %+v", as, want)
	}
	for _, c := range []struct {
		name  string
		lines []string
		open  bool
	}{
		{"no batch", []string{assigned3}, false},
		{"inside a batch", []string{assigned3, start4}, true},
		{"between batches", []string{assigned3, start4, commit4}, false},
		{"inside the second batch", []string{start4, commit4, start5}, true},
		// After a rebalance a batch id may come again: an older commit
		// line of the same id does not close the batch in flight.
		{"id repeated", []string{start4, commit4, assigned1, start4}, true},
	} {
		if got := openBatch(c.lines); got != c.open {
			t.Errorf("openBatch %s: got %v, want %v", c.name, got, c.open)
		}
	}
	if m := finishedRE.FindStringSubmatch(finished); m == nil || m[1] != "2" {
		t.Errorf("finishedRE on %q: %q", finished, m)
	}
}

// waitFor polls cond every 20ms until it holds, at most timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitEvery(t, 20*time.Millisecond, timeout, what, cond)
}

// waitEvery polls cond every interval until it holds, at most timeout.
func waitEvery(t *testing.T, every, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(every)
	}
}

func tail(lines []string, n int) string {
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
