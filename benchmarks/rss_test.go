package benchmarks

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestChildPeakRSSIsTheChilds: the peak RSS the bench reports for a run
// is the child's, not the bench's. A bench process much bigger than its
// child (it has just read millions of events) made every run report the
// bench's size: Go starts children with vfork, and the kernel records the
// parent's peak as the child's ru_maxrss at exec.
func TestChildPeakRSSIsTheChilds(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is read from /proc")
	}
	const big = 256 << 20
	ballast := make([]byte, big)
	for i := range ballast {
		ballast[i] = 1 // resident, not just reserved
	}
	c, err := startChild("/bin/sleep", []string{"0.3"}, nil, filepath.Join(t.TempDir(), "child.log"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(ballast)
	got := c.usage().PeakRSS
	if got <= 0 || got >= big/4 {
		t.Fatalf("peak RSS of /bin/sleep reported as %d MiB (the bench holds %d MiB): want the child's own few MiB", got>>20, big>>20)
	}
}
