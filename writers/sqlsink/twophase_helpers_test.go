package sqlsink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/writers"
)

// Helpers of the two-phase (XA) tests; filesink's tests have the same.

func twoPhaseOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// runKilledChild runs the named test of this binary in a child process
// with env added, requires that it died of SIGKILL and returns the
// Pendings it printed ("PENDING <json>" lines).
func runKilledChild(t *testing.T, test string, env ...string) []writers.Pending {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child %s: %v\n%s%s", test, err, out, stderr.Bytes())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child %s did not die of SIGKILL: %v\n%s%s", test, err, out, stderr.Bytes())
	}
	var ps []writers.Pending
	for _, l := range strings.Split(string(out), "\n") {
		if data, ok := strings.CutPrefix(l, "PENDING "); ok {
			var p writers.Pending
			twoPhaseOK(t, "decoding the child's pending", json.Unmarshal([]byte(data), &p))
			ps = append(ps, p)
		}
	}
	return ps
}
