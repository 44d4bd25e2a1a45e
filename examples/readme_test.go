package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// microbatchCLI builds ./cmd/microbatch once (as binary builds the
// examples) for the tests that run an example's README.
func microbatchCLI(t *testing.T) string {
	t.Helper()
	binary(t, "quickstart") // the build directory, and the skip under -short
	cliOnce.Do(func() {
		cliPath = filepath.Join(buildDir, "microbatch")
		cmd := exec.Command("go", "build", "-trimpath", "-o", cliPath, "../cmd/microbatch")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = err
			t.Logf("go build ../cmd/microbatch:\n%s", out)
		}
	})
	if cliErr != nil {
		t.Fatalf("building microbatch: %v", cliErr)
	}
	return cliPath
}

// TestQuickstartReadme runs the commands of examples/quickstart/README.md
// as written — produce, the example, verify — against a dev broker in
// place of localhost:9092, in an empty directory, and checks what each
// prints against the README's "# -> " lines.
func TestQuickstartReadme(t *testing.T) {
	cmds := testutil.DocCommands(t, "quickstart/README.md", "")
	programs := map[string]string{
		"./cmd/microbatch":      microbatchCLI(t),
		"./examples/quickstart": binary(t, "quickstart"),
	}
	brokers := strings.Join(startDevBroker(t, 1), ",")
	dir := t.TempDir()
	for _, c := range cmds {
		if len(c.Args) < 3 || c.Args[0] != "go" || c.Args[1] != "run" || programs[c.Args[2]] == "" {
			t.Fatalf("README line %d: %s: want go run of ./cmd/microbatch or ./examples/quickstart", c.Line, c)
		}
		args := slices.Clone(c.Args[3:])
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "localhost:9092", brokers)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, programs[c.Args[2]], args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), c.Env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("README line %d: %s: %v\nstdout:\n%s\nstderr:\n%s", c.Line, c, err, stdout.String(), stderr.String())
		}
		for _, want := range c.Output {
			if !strings.Contains(stdout.String(), want) {
				t.Fatalf("README line %d: %s printed\n%s\nwithout the README's %q", c.Line, c, stdout.String(), want)
			}
		}
		t.Logf("README line %d: %s: ok", c.Line, c)
	}
	if last := cmds[len(cmds)-1]; !slices.Contains(last.Args, "verify") || len(last.Output) == 0 {
		t.Fatalf("the README's last command is %s: want a verify with its output", last)
	}
}
