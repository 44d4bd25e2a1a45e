package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/microbatch/microbatch/internal/fsutil"
)

// Checkpoint is one complete snapshot of a checkpoint-mode job: where each
// source partition resumes, and Data, which the job owns (operator state,
// the sink transactions to commit). A checkpoint is complete once Save
// returned; an incomplete one is never visible to Latest.
type Checkpoint struct {
	Job     string          `json:"job"`
	ID      int64           `json:"id"`
	Time    time.Time       `json:"time"`
	Topic   string          `json:"topic"`
	Offsets map[int32]int64 `json:"offsets"` // next offset per partition
	Data    json.RawMessage `json:"data"`
}

// CheckpointStore keeps a job's complete checkpoints (the "state backend").
type CheckpointStore interface {
	// Save stores c atomically: after it returns, Latest finds c whole;
	// after a crash during Save, Latest finds the previous checkpoint.
	Save(ctx context.Context, c *Checkpoint) error
	// Latest returns the job's newest complete checkpoint, nil if none.
	Latest(ctx context.Context, job string) (*Checkpoint, error)
	// Durable says whether checkpoints survive the process.
	Durable() bool
}

// DefaultCheckpointsKept is how many checkpoints a FileCheckpoints keeps
// per job: the latest is the one recovery uses, the others are for people.
const DefaultCheckpointsKept = 3

// FileCheckpoints keeps checkpoints as files dir/<job>/chk-<id>.json,
// written to a temporary file, fsynced and renamed into place (then the
// directory fsynced), so a reader sees a checkpoint whole or not at all.
type FileCheckpoints struct {
	dir  string
	keep int
}

// NewFileCheckpoints stores checkpoints under dir (created if missing),
// keeping the newest keep (0: DefaultCheckpointsKept) per job.
func NewFileCheckpoints(dir string, keep int) (*FileCheckpoints, error) {
	if keep <= 0 {
		keep = DefaultCheckpointsKept
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &FileCheckpoints{dir: dir, keep: keep}, nil
}

func (f *FileCheckpoints) String() string { return f.dir }

// Durable: files survive the process.
func (f *FileCheckpoints) Durable() bool { return true }

const chkPrefix, chkSuffix = "chk-", ".json"

func chkName(id int64) string { return fmt.Sprintf("%s%012d%s", chkPrefix, id, chkSuffix) }

// Save writes c and then removes the job's checkpoints older than the
// newest f.keep.
func (f *FileCheckpoints) Save(_ context.Context, c *Checkpoint) error {
	dir := filepath.Join(f.dir, c.Job)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	final := filepath.Join(dir, chkName(c.ID))
	tmp, err := os.CreateTemp(dir, ".tmp-"+chkName(c.ID)+"-*")
	if err != nil {
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("saving checkpoint %d: %w", c.ID, err)
	}
	ids, err := f.ids(c.Job)
	if err != nil {
		return nil // saved; tidying up can wait for the next one
	}
	for _, id := range ids[min(f.keep, len(ids)):] {
		_ = os.Remove(filepath.Join(dir, chkName(id)))
	}
	return nil
}

// ids lists the job's checkpoint ids, newest first.
func (f *FileCheckpoints) ids(job string) ([]int64, error) {
	entries, err := os.ReadDir(filepath.Join(f.dir, job))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, chkPrefix) || !strings.HasSuffix(name, chkSuffix) {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, chkPrefix), chkSuffix), 10, 64)
		if err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids, nil
}

// Latest reads the newest checkpoint. One that can't be read is an error,
// not a reason to fall back to an older one: the sink transactions of the
// newer checkpoint may have been committed, so resuming from an older
// position would write their records twice.
func (f *FileCheckpoints) Latest(_ context.Context, job string) (*Checkpoint, error) {
	ids, err := f.ids(job)
	if err != nil {
		return nil, fmt.Errorf("reading state dir: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	path := filepath.Join(f.dir, job, chkName(ids[0]))
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint: %w", err)
	}
	var c Checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("checkpoint %s is unreadable (%v): fix or remove it by hand; falling back to an older one could duplicate output", path, err)
	}
	if c.Job != job || c.ID != ids[0] {
		return nil, fmt.Errorf("checkpoint %s holds job %q id %d, not job %q id %d", path, c.Job, c.ID, job, ids[0])
	}
	return &c, nil
}

// MemoryCheckpoints keeps checkpoints in memory only: a process that dies
// loses them, and with them the job's position and state. It exists to
// show that loss (benchmarks, docs), and for tests.
type MemoryCheckpoints struct {
	mu     sync.Mutex
	latest map[string]*Checkpoint
}

// NewMemoryCheckpoints returns an empty in-memory store.
func NewMemoryCheckpoints() *MemoryCheckpoints {
	return &MemoryCheckpoints{latest: map[string]*Checkpoint{}}
}

func (m *MemoryCheckpoints) String() string { return "memory" }

// Durable: no.
func (m *MemoryCheckpoints) Durable() bool { return false }

// Save keeps a copy of c.
func (m *MemoryCheckpoints) Save(_ context.Context, c *Checkpoint) error {
	cp := *c
	cp.Offsets = maps.Clone(c.Offsets)
	cp.Data = slices.Clone(c.Data)
	m.mu.Lock()
	m.latest[c.Job] = &cp
	m.mu.Unlock()
	return nil
}

// Latest returns the newest saved checkpoint, nil if none.
func (m *MemoryCheckpoints) Latest(_ context.Context, job string) (*Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.latest[job]
	if c == nil {
		return nil, nil
	}
	cp := *c
	cp.Offsets = maps.Clone(c.Offsets)
	cp.Data = slices.Clone(c.Data)
	return &cp, nil
}
