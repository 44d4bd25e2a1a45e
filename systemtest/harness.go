package systemtest

// Running the binary: built once per test process, commands run to their
// end, dev brokers as subprocesses, unique names, input produced by
// `microbatch produce`. cmd/microbatch's CLI tests use these too.

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

// Main is the TestMain of a package that runs the binary: it runs the
// tests with testParallel as the default -parallel, removes the binary and
// checks for leaked goroutines, and returns the exit code for os.Exit.
func Main(m *testing.M) int {
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
	return code
}

// Binary builds ./cmd/microbatch once per test process and returns its
// path. It skips under -short.
func Binary(t testing.TB) string {
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

// Env is this process's environment without any MICROBATCH_ setting
// (so the test's own variables can't change the command), plus extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MICROBATCH_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Result is how a finished command ended.
type Result struct {
	Code           int
	Stdout, Stderr string
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Run runs the binary in dir with env (nil: Env()) and waits for it
// at most timeout.
func Run(t testing.TB, dir string, env []string, timeout time.Duration, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	cmd.Dir = dir
	if env == nil {
		env = Env()
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Code: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("microbatch %s did not finish within %s\n%s", strings.Join(args, " "), timeout, r)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running microbatch %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// Broker is a `microbatch broker` subprocess.
type Broker struct {
	Addr string // host:port it listens on

	cmd  *exec.Cmd
	out  *bytes.Buffer // stdout after the address line
	errb *bytes.Buffer
	done chan struct{} // closed when stdout hit EOF

	stopOnce sync.Once
	res      Result
}

// StartBroker starts `microbatch broker --listen 127.0.0.1:0 args...` and
// waits for its address line. Cleanup stops it with SIGTERM.
func StartBroker(t testing.TB, args ...string) *Broker {
	t.Helper()
	cmd := exec.Command(Binary(t), append([]string{"broker", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = Env()
	errb := new(bytes.Buffer)
	cmd.Stderr = errb
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &Broker{cmd: cmd, out: new(bytes.Buffer), errb: errb, done: make(chan struct{})}
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
	t.Cleanup(func() { b.Stop(t) })
	select {
	case line, ok := <-lines:
		m := regexp.MustCompile(`^dev broker listening on (\S+)$`).FindStringSubmatch(line)
		if !ok || m == nil {
			t.Fatalf("broker printed %q first, want \"dev broker listening on ADDR\"", line)
		}
		b.Addr = m[1]
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not print its address within 30s")
	}
	return b
}

// Stop sends SIGTERM and waits for the broker to exit; it returns how it
// ended. Safe to call twice.
func (b *Broker) Stop(t testing.TB) Result {
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
		b.res = Result{Code: b.cmd.ProcessState.ExitCode(), Stdout: b.out.String(), Stderr: b.errb.String()}
	})
	return b.res
}

var nameSeq atomic.Int64

// UniqueName is a topic/job name unique to this test and process run.
func UniqueName(t testing.TB, prefix string) string {
	clean := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), ".")
	if len(clean) > 60 {
		clean = clean[len(clean)-60:]
	}
	return fmt.Sprintf("%s-%s-%d-%d", prefix, clean, time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

// ExpectedRE matches the totals that produce prints.
var ExpectedRE = regexp.MustCompile(`expected events=(\d+) amount=(\d+)`)

// Produce runs `microbatch produce` and returns the totals it printed.
func Produce(t testing.TB, brokers, topic string, seed uint64, skip, count int64) (events, amount int64) {
	t.Helper()
	r := Run(t, t.TempDir(), nil, 5*time.Minute, "produce", "--brokers", brokers, "--topic", topic,
		"--partitions", "4", "--keys", "1000", "--seed", fmt.Sprint(seed), "--skip", fmt.Sprint(skip), "--count", fmt.Sprint(count))
	if r.Code != 0 {
		t.Fatalf("microbatch produce: %s", r)
	}
	m := ExpectedRE.FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("microbatch produce printed no expected totals:\n%s", r)
	}
	fmt.Sscan(m[1], &events)
	fmt.Sscan(m[2], &amount)
	return events, amount
}
