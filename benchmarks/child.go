package benchmarks

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// child is one `microbatch` subprocess. Its stderr (the slog text log) is
// read as it is written, each line stamped with the time it arrived, copied
// to a log file, and summed up in a runLog: when the process started, when
// it first and last committed, how many records its commits held, and
// whether the batch or checkpoint it was in when it died had committed.
type child struct {
	cmd     *exec.Cmd
	start   time.Time
	logPath string
	target  int64         // records after which reachedAt is set; 0: never
	marks   chan struct{} // one slot: a batch started / checkpoint triggered
	eof     chan struct{} // stderr reached EOF

	mu  sync.Mutex
	log runLog

	hwm atomic.Int64 // the process's peak RSS in bytes as last sampled (VmHWM); 0: none

	waitOnce sync.Once
	end      time.Time // when wait saw it exit
	state    *os.ProcessState
	waitErr  error
}

// runLog is what a run's log said.
type runLog struct {
	started     time.Time // "job started" (zero: never)
	firstCommit time.Time // first batch committed / checkpoint completed
	lastCommit  time.Time
	reachedAt   time.Time // the commit that brought records to target
	commits     int
	records     int64 // records of all commits
	opened      int   // batches started / checkpoints triggered (debug lines)
	lastOpened  int64 // id of the last one opened
	lastClosed  int64 // id of the last one committed
	lines       int
}

// open reports whether the run died inside a batch or checkpoint: the last
// one it opened has no commit line.
func (l runLog) open() bool { return l.lastOpened != 0 && l.lastOpened != l.lastClosed }

var (
	commitLineRE  = regexp.MustCompile(`msg="(?:batch committed|checkpoint completed)" (?:batch|checkpoint)=(\d+)\b.*? records=(\d+)`)
	openLineRE    = regexp.MustCompile(`msg="(?:batch started|checkpoint triggered)" (?:batch|checkpoint)=(\d+)`)
	startedLineRE = regexp.MustCompile(`msg="job started"`)
)

// parseLine folds one log line, read at time at, into l.
func (l *runLog) parseLine(line string, at time.Time, target int64) (opened bool) {
	l.lines++
	if m := commitLineRE.FindStringSubmatch(line); m != nil {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		n, _ := strconv.ParseInt(m[2], 10, 64)
		if l.commits == 0 {
			l.firstCommit = at
		}
		l.commits++
		l.lastCommit = at
		l.lastClosed = id
		l.records += n
		if target > 0 && l.records >= target && l.reachedAt.IsZero() {
			l.reachedAt = at
		}
		return false
	}
	if m := openLineRE.FindStringSubmatch(line); m != nil {
		l.opened++
		l.lastOpened, _ = strconv.ParseInt(m[1], 10, 64)
		return true
	}
	if l.started.IsZero() && startedLineRE.MatchString(line) {
		l.started = at
	}
	return false
}

// startChild starts bin with args (env added to the bench's environment),
// logging its stderr and stdout to logPath.
func startChild(bin string, args, env []string, logPath string, target int64) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(childEnv(), env...)
	cmd.Stdout = f
	pipe, err := cmd.StderrPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	c := &child{cmd: cmd, logPath: logPath, target: target, marks: make(chan struct{}, 1), eof: make(chan struct{})}
	c.start = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go c.sampleRSS()
	go func() {
		defer close(c.eof)
		defer f.Close()
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			at := time.Now()
			line := sc.Text()
			fmt.Fprintln(f, line)
			c.mu.Lock()
			opened := c.log.parseLine(line, at, c.target)
			c.mu.Unlock()
			if opened {
				select {
				case c.marks <- struct{}{}:
				default:
				}
			}
		}
	}()
	return c, nil
}

// rssSampleEvery is how often a child's peak RSS is read while it runs:
// the figure misses at most the growth of its last this-much.
const rssSampleEvery = 20 * time.Millisecond

// sampleRSS reads the child's VmHWM (the peak RSS of its own address
// space) from /proc until it exits. Its rusage can't be used for that: Go
// starts a child with vfork (CLONE_VM), so on exec the kernel records the
// bench's own peak RSS as the child's ru_maxrss, and every child of a
// bench process bigger than it reported the bench's size.
func (c *child) sampleRSS() {
	path := fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid)
	t := time.NewTicker(rssSampleEvery)
	defer t.Stop()
	for {
		if b, ok := vmHWM(path); ok {
			c.hwm.Store(max(c.hwm.Load(), b))
		}
		select {
		case <-c.eof:
			return
		case <-t.C:
		}
	}
}

// vmHWM reads the VmHWM line of a /proc/<pid>/status file, in bytes.
func vmHWM(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// usage is the CPU time and peak RSS of the finished child: the RSS as
// sampled from /proc where there is one, else rusage's (which may be the
// bench's own, see sampleRSS).
func (c *child) usage() usage {
	u := usageOf(c.state)
	if hwm := c.hwm.Load(); hwm > 0 {
		u.PeakRSS = hwm
	}
	return u
}

// childEnv is the bench's environment without MICROBATCH_ settings, so
// that nothing but the flags the bench passes configures a run.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) < 11 || kv[:11] != "MICROBATCH_" {
			env = append(env, kv)
		}
	}
	return env
}

// snapshot returns what the log said so far.
func (c *child) snapshot() runLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log
}

// exited is closed once the process closed its stderr (it is exiting).
func (c *child) exited() <-chan struct{} { return c.eof }

// wait waits for the process to exit, at most timeout; then it is
// SIGKILLed and errTimeout returned. The log is complete when wait returns.
func (c *child) wait(timeout time.Duration) (*os.ProcessState, error) {
	var timedOut bool
	select {
	case <-c.eof:
	case <-time.After(timeout):
		timedOut = true
		_ = c.cmd.Process.Kill()
		<-c.eof
	}
	c.waitOnce.Do(func() {
		c.end = time.Now()
		c.waitErr = c.cmd.Wait()
		c.state = c.cmd.ProcessState
	})
	if timedOut {
		return c.state, fmt.Errorf("%w (%s; log %s)", errTimeout, timeout, c.logPath)
	}
	var ee *exec.ExitError
	if c.waitErr != nil && !errors.As(c.waitErr, &ee) {
		return c.state, c.waitErr
	}
	return c.state, nil
}

var errTimeout = errors.New("run did not finish in time")

// kill sends SIGKILL and waits for the process.
func (c *child) kill() *os.ProcessState {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	ps, _ := c.wait(time.Minute)
	return ps
}

// waitMark waits for the next batch start / checkpoint trigger after the
// call (one seen earlier does not count), at most timeout; false if none
// came or the process exited.
func (c *child) waitMark(timeout time.Duration) bool {
	select {
	case <-c.marks: // stale
	default:
	}
	select {
	case <-c.marks:
		return true
	case <-c.eof:
	case <-time.After(timeout):
	}
	return false
}

// killedBySIGKILL reports whether ps ended by SIGKILL.
func killedBySIGKILL(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// usage is the CPU time and peak RSS of a finished process.
type usage struct {
	CPU     time.Duration
	PeakRSS int64 // bytes
}

func usageOf(ps *os.ProcessState) usage {
	if ps == nil {
		return usage{}
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return usage{}
	}
	// Linux reports ru_maxrss in KiB.
	return usage{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), PeakRSS: ru.Maxrss * 1024}
}

// selfCPU is the CPU time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
