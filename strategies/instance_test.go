package strategies

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestDefaultInstanceID(t *testing.T) {
	for _, c := range []struct {
		job, host string
		slot      int
		want      string
	}{
		{"shop", "web-0", 0, "shop-web-0-0"},
		{"shop", "db1.example.com", 3, "shop-db1.example.com-3"},
		{"shop", "ünïcode host/x", 1, "shop--n-code-host-x-1"},
		{"shop", "", 2, "shop-host-2"},
	} {
		if got := defaultInstanceID(c.job, c.host, c.slot); got != c.want {
			t.Errorf("defaultInstanceID(%q, %q, %d) = %q, want %q", c.job, c.host, c.slot, got, c.want)
		}
		if !validGroup(defaultInstanceID(c.job, c.host, c.slot)) {
			t.Errorf("id for %q is not a valid instance id", c.host)
		}
	}
	long := defaultInstanceID(strings.Repeat("j", 128), strings.Repeat("h", 200), 17)
	if len(long) != 249 || !strings.HasSuffix(long, "-17") {
		t.Errorf("long id has %d characters, ends %q: want 249, the slot kept", len(long), long[len(long)-4:])
	}
}

// TestInstanceSlots: processes side by side get distinct slots; a slot is
// free again once its holder is gone, and a free slot left by a crash (its
// mark still there) is taken before a lower one left by a graceful stop.
func TestInstanceSlots(t *testing.T) {
	dir := t.TempDir()
	claim := func() *instanceSlot {
		t.Helper()
		s, err := claimInstanceSlot(dir, "g", "job", "h")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b, c := claim(), claim(), claim()
	if a.Slot != 0 || b.Slot != 1 || c.Slot != 2 || a.ID != "job-h-0" || c.ID != "job-h-2" {
		t.Fatalf("slots %d %d %d (%s), want 0 1 2", a.Slot, b.Slot, c.Slot, a.ID)
	}
	a.Release(true)  // stopped on purpose: left the group
	c.Release(false) // crashed (the mark stays, as after SIGKILL)
	if d := claim(); d.Slot != 2 {
		t.Errorf("took slot %d, want 2: the crashed process's member still holds partitions in the group", d.Slot)
	}
	if e := claim(); e.Slot != 0 {
		t.Errorf("took slot %d, want 0, the lowest free one", e.Slot)
	}
	b.Release(true)
	b.Release(true) // twice is fine
	if _, err := os.Stat(filepath.Join(dir, "g.1.held")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a graceful release left its mark: %v", err)
	}
	if other, err := claimInstanceSlot(dir, "other-group", "job", "h"); err != nil || other.Slot != 0 {
		t.Errorf("another group's first slot: %v %v, want 0", other, err)
	}
}

// TestInstanceSlotReleasedByKill: the kernel drops the lock of a process
// that is SIGKILLed, so its restart gets its slot back.
func TestInstanceSlotReleasedByKill(t *testing.T) {
	if os.Getenv("MB_TEST_HOLD_SLOT") != "" {
		s, err := claimInstanceSlot(os.Getenv("MB_TEST_HOLD_SLOT"), "g", "job", "h")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("slot", s.Slot)
		select {} // killed by the test
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInstanceSlotReleasedByKill$")
	cmd.Env = append(os.Environ(), "MB_TEST_HOLD_SLOT="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "slot 0") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q", buf[:n])
	}
	if s, err := claimInstanceSlot(dir, "g", "job", "h"); err != nil || s.Slot != 1 {
		t.Fatalf("while the child holds slot 0: got %v %v, want slot 1", s, err)
	} else {
		s.Release(true)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := claimInstanceSlot(dir, "g", "job", "h")
		if err != nil {
			t.Fatal(err)
		}
		if s.Slot == 0 {
			break
		}
		s.Release(true)
		if time.Now().After(deadline) {
			t.Fatal("slot 0 still locked 10s after its holder was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGroupErrorFatalOrRejoin(t *testing.T) {
	cfg := Config{Topic: "t", Group: GroupConfig{ID: "g", InstanceID: "job-h-0", SessionTimeout: time.Second}}
	for _, c := range []struct {
		err  error
		want error // nil: rejoin
	}{
		{sarama.ErrFencedInstancedId, ErrConfig},
		{sarama.ErrInvalidSessionTimeout, ErrConfig},
		{sarama.ErrInconsistentGroupProtocol, ErrConfig},
		{sarama.ErrGroupMaxSizeReached, ErrConfig},
		{sarama.ErrUnknownTopicOrPartition, ErrNoTopic},
		{sarama.ErrGroupAuthorizationFailed, ErrDenied},
		{sarama.ErrSASLAuthenticationFailed, ErrDenied},
		{fmt.Errorf("joining: %w", sarama.ErrRebalanceInProgress), nil},
		{sarama.ErrNotCoordinatorForConsumer, nil},
		{sarama.ErrConsumerCoordinatorNotAvailable, nil},
		{sarama.ErrUnknownMemberId, nil},
		{sarama.ErrIllegalGeneration, nil},
		{sarama.ErrOutOfBrokers, nil},
		{&timeoutErr{}, nil},
		{errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout"), nil},
	} {
		got := groupError(cfg, c.err)
		switch {
		case c.want == nil && got != nil:
			t.Errorf("%v: ends the run with %v, want a rejoin", c.err, got)
		case c.want != nil && !errors.Is(got, c.want):
			t.Errorf("%v: got %v, want %v", c.err, got, c.want)
		}
	}
	if !isTimeout(fmt.Errorf("joining: %w", &timeoutErr{})) || isTimeout(sarama.ErrOutOfBrokers) {
		t.Error("isTimeout")
	}
}

type timeoutErr struct{}

func (*timeoutErr) Error() string   { return "i/o timeout" }
func (*timeoutErr) Timeout() bool   { return true }
func (*timeoutErr) Temporary() bool { return true }

// TestInstanceIDCollision: the default instance ids of two processes with
// the same host name collide when their slot locks are in separate
// directories (containers with their own /tmp, different TMPDIRs) and
// differ when they share one — and the message of the fence that follows
// a collision says so, names the lock directory, and says what to set.
// It used to blame a shared lock directory, the one layout that works.
func TestInstanceIDCollision(t *testing.T) {
	shared, own1, own2 := t.TempDir(), t.TempDir(), t.TempDir()
	claim := func(dir string) *instanceSlot {
		t.Helper()
		s, err := claimInstanceSlot(dir, "g", "job", "host-a")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Release(true) })
		return s
	}
	if a, b := claim(shared), claim(shared); a.ID == b.ID {
		t.Errorf("two processes sharing the lock directory got the same id %q", a.ID)
	}
	if a, b := claim(own1), claim(own2); a.ID != b.ID {
		t.Errorf("two processes with the same host name and separate lock directories got ids %q and %q: the test's premise is wrong", a.ID, b.ID)
	}

	cfg := Config{Topic: "t", Group: GroupConfig{ID: "g", InstanceID: "job-host-a-0", InstanceLockDir: own1}}
	err := groupError(cfg, sarama.ErrFencedInstancedId)
	if !errors.Is(err, ErrConfig) || !errors.Is(err, sarama.ErrFencedInstancedId) {
		t.Fatalf("a fenced instance id = %v, want ErrConfig wrapping the broker's error", err)
	}
	msg := err.Error()
	for _, want := range []string{`"job-host-a-0"`, "same host name", "separate directories", "own /tmp", "TMPDIR", own1, "--instance-id", "MICROBATCH_INSTANCE_ID", "share one TMPDIR"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the fenced-instance message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "share a lock directory") {
		t.Errorf("the fenced-instance message blames a shared lock directory, which gives separate slots:\n%s", msg)
	}
}
