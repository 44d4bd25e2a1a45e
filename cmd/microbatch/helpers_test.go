package main_test

// Helpers shared by the CLI and crash tests: the microbatch binary (built
// once per test process), running it, a dev broker subprocess, names.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
)

var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

// The process-level tests mostly wait — for kills, restarts, group
// sessions and rebalances — and share nothing but the servers and the
// binary (each has its own topics, jobs, brokers and temp dirs): they run
// side by side, more of them than there are CPUs, or the package would not
// fit its timeout on a 2-core machine.
const testParallel = 8

func TestMain(m *testing.M) {
	testutil.DefaultParallel(testParallel)
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	// Checked after failures too: a failing test must not hide a leak.
	if !testing.Short() {
		if leaked := testutil.LeakedGoroutines(10 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// binary builds ./cmd/microbatch once per test process and returns its
// path. It skips under -short.
func binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the microbatch binary: skipped with -short")
	}
	buildOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			buildErr = fmt.Errorf("go env GOMOD: %v", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		if buildDir, buildErr = os.MkdirTemp("", "microbatch-test-bin-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "microbatch")
		// Compiled as docker/Dockerfile compiles the image (cgo off,
		// -trimpath), like the examples' tests: the suite then compiles
		// the dependencies once for the three packages' binaries, not
		// once per build configuration (minutes each on a cold cache).
		cmd := exec.Command("go", "build", "-trimpath", "-o", binPath, "./cmd/microbatch")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/microbatch: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// cmdEnv is this process's environment without any MICROBATCH_ setting
// (so the test's own variables can't change the command), plus extra.
func cmdEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MICROBATCH_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// result is how a finished command ended.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runBin runs the binary in dir with env (nil: cmdEnv()) and waits for it
// at most timeout.
func runBin(t testing.TB, dir string, env []string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Dir = dir
	if env == nil {
		env = cmdEnv()
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("microbatch %s did not finish within %s\n%s", strings.Join(args, " "), timeout, r)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running microbatch %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// brokerProc is a `microbatch broker` subprocess.
type brokerProc struct {
	addr string
	cmd  *exec.Cmd
	out  *bytes.Buffer // stdout after the address line
	errb *bytes.Buffer
	done chan struct{} // closed when stdout hit EOF

	stopOnce sync.Once
	res      result
}

// startBroker starts `microbatch broker --listen 127.0.0.1:0 args...` and
// waits for its address line. Cleanup stops it with SIGTERM.
func startBroker(t testing.TB, args ...string) *brokerProc {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"broker", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = cmdEnv()
	errb := new(bytes.Buffer)
	cmd.Stderr = errb
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &brokerProc{cmd: cmd, out: new(bytes.Buffer), errb: errb, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(pipe)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
				continue
			}
			b.out.WriteString(sc.Text() + "\n")
		}
		if first {
			close(lines)
		}
	}()
	t.Cleanup(func() { b.stop(t) })
	select {
	case line, ok := <-lines:
		m := regexp.MustCompile(`^dev broker listening on (\S+)$`).FindStringSubmatch(line)
		if !ok || m == nil {
			t.Fatalf("broker printed %q first, want \"dev broker listening on ADDR\"", line)
		}
		b.addr = m[1]
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not print its address within 30s")
	}
	return b
}

// stop sends SIGTERM and waits for the broker to exit; it returns how it
// ended. Safe to call twice.
func (b *brokerProc) stop(t testing.TB) result {
	b.stopOnce.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(30 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
			t.Errorf("broker did not stop within 30s of SIGTERM")
		}
		_ = b.cmd.Wait()
		b.res = result{code: b.cmd.ProcessState.ExitCode(), stdout: b.out.String(), stderr: b.errb.String()}
	})
	return b.res
}

var nameSeq atomic.Int64

// uniqueName is a topic/job name unique to this test and process run.
func uniqueName(t testing.TB, prefix string) string {
	clean := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), ".")
	if len(clean) > 60 {
		clean = clean[len(clean)-60:]
	}
	return fmt.Sprintf("%s-%s-%d-%d", prefix, clean, time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

var expectedRE = regexp.MustCompile(`expected events=(\d+) amount=(\d+)`)

// produceCLI runs `microbatch produce` and returns the totals it printed.
func produceCLI(t testing.TB, brokers, topic string, seed uint64, skip, count int64) (events, amount int64) {
	t.Helper()
	r := runBin(t, t.TempDir(), nil, 5*time.Minute, "produce", "--brokers", brokers, "--topic", topic,
		"--partitions", "4", "--keys", "1000", "--seed", fmt.Sprint(seed), "--skip", fmt.Sprint(skip), "--count", fmt.Sprint(count))
	if r.code != 0 {
		t.Fatalf("microbatch produce: %s", r)
	}
	m := expectedRE.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("microbatch produce printed no expected totals:\n%s", r)
	}
	fmt.Sscan(m[1], &events)
	fmt.Sscan(m[2], &amount)
	return events, amount
}

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
