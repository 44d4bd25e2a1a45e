package writertest

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

// RunKilledChild runs the named test of this test binary in a child
// process with env added, requires that it died of SIGKILL, and returns the
// writers.Pending values it printed as "PENDING <json>" lines. It is how a
// two-phase writer's test crashes it for real between PreCommit and Commit:
// the child writes, prints its pendings, and kills itself; the parent
// recovers them.
func RunKilledChild(t *testing.T, test string, env ...string) []writers.Pending {
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
			if err := json.Unmarshal([]byte(data), &p); err != nil {
				t.Fatalf("decoding the child's pending %q: %v", data, err)
			}
			ps = append(ps, p)
		}
	}
	return ps
}
