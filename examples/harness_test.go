package examples_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
)

var examples = []string{"quickstart", "csv-import", "kafka-enrich", "custom-agg", "sql-job"}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the path of example name, building all of them on the
// first call.
func binary(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the examples: skipped with -short")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "mb-examples-"); buildErr != nil {
			return
		}
		// Compiled as docker/Dockerfile compiles the image (cgo off,
		// -trimpath), like cmd/microbatch's tests: the suite then compiles
		// the dependencies once for the three packages' binaries.
		args := []string{"build", "-trimpath", "-o", buildDir + string(filepath.Separator)}
		for _, e := range examples {
			args = append(args, "./"+e)
		}
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, name)
}

// proc is a running example; its stdout lines arrive on lines.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	lines   chan string
	out     bytes.Buffer // all of stdout, once done
	stderr  bytes.Buffer
	mu      sync.Mutex
	done    chan struct{}
	err     error
	started time.Time
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, bin, args...)
}

// startEnv is start with env (NAME=value) added to the environment: the
// examples' test hooks.
func startEnv(t *testing.T, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 10000), done: make(chan struct{}), started: time.Now()}
	p.cmd = exec.Command(bin, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// killAfter waits for n stdout lines matching re, then SIGKILLs the
// process. It fails if the process ends first.
func (p *proc) killAfter(n int, re string) {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	seen := 0
	p.killWhen(fmt.Sprintf("%d lines /%s/", n, re), func(l string) bool {
		if rx.MatchString(l) {
			seen++
		}
		return seen == n
	})
}

// killWhen passes the stdout lines to done until it says yes, then
// SIGKILLs the process. It fails if the process ends first.
func (p *proc) killWhen(what string, done func(line string) bool) {
	p.t.Helper()
	const wait = 2 * time.Minute // a bound for a busy machine
	timeout := time.After(wait)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				p.t.Fatalf("%s ended (%v) before %s it was to be killed after\nstdout:\n%s\nstderr:\n%s",
					p.cmd.Path, p.err, what, p.stdout(), p.stderr.String())
			}
			if !done(l) {
				continue
			}
		case <-timeout:
			p.t.Fatalf("%s: no %s within %s\nstdout:\n%s", p.cmd.Path, what, wait, p.stdout())
		}
		break
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
	p.t.Logf("killed %s after %s (%v after its start)", filepath.Base(p.cmd.Path), what, time.Since(p.started).Round(time.Millisecond))
}

// waitExit reads the rest of the output and waits up to limit for the
// process to end; past that it kills it and fails the test, saying it did
// not do what (finish, kill itself) in time.
func (p *proc) waitExit(limit time.Duration, what string) {
	p.t.Helper()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s did not %s within %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, what, limit, p.stdout(), p.stderr.String())
	}
}

// wait waits for the process to exit successfully and returns its stdout.
func (p *proc) wait(limit time.Duration) string {
	p.t.Helper()
	p.waitExit(limit, "finish")
	if p.err != nil {
		p.t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, p.err, p.stdout(), p.stderr.String())
	}
	return p.stdout()
}

// waitKilled waits for the process to die of SIGKILL, sent by itself (a
// test hook), and returns its stdout.
func (p *proc) waitKilled(limit time.Duration) string {
	p.t.Helper()
	p.waitExit(limit, "kill itself")
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		p.t.Fatalf("%s ended with %v, want killed by SIGKILL (its test hook)\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, p.err, p.stdout(), p.stderr.String())
	}
	p.t.Logf("%s killed itself (%v after its start)", filepath.Base(p.cmd.Path), time.Since(p.started).Round(time.Millisecond))
	return p.stdout()
}

// waitFail waits for the process to exit with an error and returns its
// stderr.
func (p *proc) waitFail(limit time.Duration) string {
	p.t.Helper()
	p.waitExit(limit, "finish")
	if p.err == nil {
		p.t.Fatalf("%s succeeded, want it to fail\nstdout:\n%s", p.cmd.Path, p.stdout())
	}
	return p.stderr.String()
}

func (p *proc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

var nameSeq atomic.Int64

// uniqueName is a table, job or topic name unique to this run.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

func startDevBroker(t *testing.T, partitions int32) []string {
	t.Helper()
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// produce writes values to topic, spread over its partitions by key.
func produce(t *testing.T, brokers []string, topic string, keys, values []string) {
	t.Helper()
	conf := kafkautil.Config("examples-test-producer")
	conf.Producer.Return.Successes = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	p, err := sarama.NewSyncProducer(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(values))
	for i, v := range values {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(keys[i]), Value: sarama.StringEncoder(v)}
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 1000)
		if err := p.SendMessages(msgs[:n]); err != nil {
			t.Fatal(err)
		}
		msgs = msgs[n:]
	}
}
