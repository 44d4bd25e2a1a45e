package strategies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// A process's identity in its consumer group.
//
// Every member is static (KIP-345) unless the platform can't lock files:
// a member that dies stays in the group until its session times out, and
// a dynamic restart would have to wait for that (the dead member holds
// its partitions; 8.5 s with the default session timeout), while a static
// restart with the same group.instance.id simply takes the dead member's
// place and gets its partitions back at once.
//
// Without --instance-id the id is <job>-<host>-<slot>. A slot is taken by
// flocking its lock file (LockDir/<group>.<slot>.lock): the kernel drops
// the lock of a process that dies, even by SIGKILL, so a restart on the
// same host can take the same slot — and the same id — while processes of
// one job running side by side each hold their own slot and get distinct
// ids. Which free slot: a process marks its slot (<group>.<slot>.held)
// while it holds it and removes the mark when it stops on purpose (after
// leaving the group), so a free slot that is still marked is a crashed
// process's, whose member is still in the group with partitions; a new
// process takes the lowest such slot first, else the lowest free one.
// Two processes must never share an id: the broker fences the older one
// (FENCED_INSTANCE_ID), which is why the lock directory is per host (the
// temp dir), not per working directory.

// DefaultInstanceLockDirName is the directory under os.TempDir() holding
// the slot locks when Config.Group.InstanceLockDir is empty.
const DefaultInstanceLockDirName = "microbatch-members"

// maxInstanceSlots bounds the slot search: more processes of one group on
// one host than this is a mistake, not a deployment.
const maxInstanceSlots = 1024

// instanceIDUnsafe matches what a group.instance.id may not contain here.
var instanceIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// errNoLocks means this platform or directory can't hold slot locks; the
// member then joins with a dynamic id.
var errNoLocks = errors.New("instance slot locks unavailable")

// instanceSlot is a claimed slot.
type instanceSlot struct {
	ID   string
	Slot int
	Path string // the lock file
	held string // the mark
	f    *os.File
}

// Release drops the slot's lock. Safe to call twice. graceful removes the
// slot's mark first: its member left the group, so a restart has nothing
// to take over there. After a fatal error the mark stays — the member may
// still be in the group.
func (s *instanceSlot) Release(graceful bool) {
	if s == nil || s.f == nil {
		return
	}
	if graceful {
		_ = os.Remove(s.held)
	}
	_ = s.f.Close() // closing the descriptor drops the flock
	s.f = nil
}

// defaultInstanceID builds <job>-<host>-<slot>, clipped to the 249
// characters a group.instance.id may have here.
func defaultInstanceID(job, host string, slot int) string {
	host = instanceIDUnsafe.ReplaceAllString(host, "-")
	if host == "" {
		host = "host"
	}
	suffix := "-" + strconv.Itoa(slot)
	id := job + "-" + host
	if n := 249 - len(suffix); len(id) > n {
		id = id[:n]
	}
	return id + suffix
}

// claimInstanceSlot takes a free slot of group in dir — the lowest one a
// crashed process left, else the lowest — and returns it with its
// instance id.
func claimInstanceSlot(dir, group, job, host string) (*instanceSlot, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoLocks, err)
	}
	// Every user of the host shares the directory (sticky, like /tmp):
	// processes of one group started by different users must not take the
	// same slot.
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm() != 0o777 {
		_ = os.Chmod(dir, 0o777|os.ModeSticky)
	}
	path := func(slot int, ext string) string {
		return filepath.Join(dir, fmt.Sprintf("%s.%d.%s", group, slot, ext))
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	// Slots are used from 0 up: past the first that never existed, none did.
	var crashed []int
	for slot := 0; slot < maxInstanceSlots && exists(path(slot, "lock")); slot++ {
		if exists(path(slot, "held")) {
			crashed = append(crashed, slot)
		}
	}
	try := func(slot int) (*instanceSlot, error) {
		f, err := openLockFile(path(slot, "lock"))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errNoLocks, err)
		}
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %s: %v", errNoLocks, f.Name(), err)
		}
		if !ok {
			f.Close()
			return nil, nil
		}
		held := path(slot, "held")
		if h, err := os.OpenFile(held, os.O_RDONLY|os.O_CREATE, 0o666); err == nil {
			h.Close()
		}
		return &instanceSlot{ID: defaultInstanceID(job, host, slot), Slot: slot, Path: f.Name(), held: held, f: f}, nil
	}
	for _, slot := range crashed {
		if s, err := try(slot); s != nil || err != nil {
			return s, err
		}
	}
	for slot := 0; slot < maxInstanceSlots; slot++ {
		if s, err := try(slot); s != nil || err != nil {
			return s, err
		}
	}
	return nil, fmt.Errorf("%w: all %d slots of group %q in %s are taken", errNoLocks, maxInstanceSlots, group, dir)
}

// openLockFile opens (creating it if needed) a lock file that any user may
// lock: flock needs no write access, so an existing file of another user
// is opened read-only.
func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err == nil {
		_ = f.Chmod(0o666) // the umask may have narrowed it
	}
	return f, err
}
