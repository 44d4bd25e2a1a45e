package systemtest

// Readers of the file sink: committed and pending files, a watcher that
// checks every committed file as it appears, the outputs of a job.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/writers/filesink"
)

// fileInspect: a transaction with records is a file in .pending (created
// by its first write; until the pre-commit flushes it, the records may
// still be in the writer's buffer, so the file can be empty on disk). It
// also checks that every committed file that appeared since the last call
// is whole: lines of output JSON, ending in a newline.
func fileInspect(t *testing.T, dir string, checked map[string]bool) func() (bool, string) {
	return func() (bool, string) {
		checkCommittedFiles(t, dir, checked)
		entries, err := os.ReadDir(filepath.Join(dir, ".pending"))
		if err != nil {
			t.Fatal(err)
		}
		var files, bytes int64
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			files++
			bytes += info.Size()
		}
		return files > 0, fmt.Sprintf("(.pending: %d files, %d bytes on disk)", files, bytes)
	}
}

func checkCommittedFiles(t *testing.T, dir string, checked map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".jsonl") || checked[name] {
			continue
		}
		checked[name] = true
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Errorf("committed file %s is empty or does not end in a newline: partial", name)
			continue
		}
		for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var o event.Output
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Errorf("committed file %s line %d: %q: %v", name, i+1, line, err)
				break
			}
		}
	}
}

// fileWatcher reads the file sink's directory while the job is killed and
// restarted, as a downstream reader would: every committed file it finds
// must be whole (JSON lines ending in a newline) and stay as it was, and no
// id may be in two of them.
type fileWatcher struct {
	dir         string
	stopc, done chan struct{}

	files                          map[string]int64 // name → size when first read
	ids                            map[int64]bool
	polls, records, dups           int64
	partial, changed               int64
	firstDup, firstPartial, change string
}

func startFileWatcher(dir string) *fileWatcher {
	w := &fileWatcher{dir: dir, stopc: make(chan struct{}), done: make(chan struct{}), files: map[string]int64{}, ids: map[int64]bool{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll()
			select {
			case <-w.stopc:
				w.poll()
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *fileWatcher) poll() {
	w.polls++
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return // not made yet
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".jsonl") {
			continue
		}
		path := filepath.Join(w.dir, name)
		if size, seen := w.files[name]; seen {
			if info, err := os.Stat(path); err != nil || info.Size() != size {
				if w.changed++; w.changed == 1 {
					w.change = fmt.Sprintf("%s: %d bytes when first read, now %v (err %v)", name, size, info, err)
				}
			}
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if w.changed++; w.changed == 1 {
				w.change = fmt.Sprintf("%s: listed, then unreadable: %v", name, err)
			}
			continue
		}
		w.files[name] = int64(len(b))
		bad := func(why string) {
			if w.partial++; w.partial == 1 {
				w.firstPartial = name + ": " + why
			}
		}
		if len(b) == 0 || b[len(b)-1] != '\n' {
			bad(fmt.Sprintf("%d bytes, not ending in a newline", len(b)))
		}
		for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
			var o event.Output
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				bad(fmt.Sprintf("line %q: %v", line, err))
				break
			}
			w.records++
			if w.ids[o.ID] {
				if w.dups++; w.dups == 1 {
					w.firstDup = fmt.Sprintf("id %d again in %s", o.ID, name)
				}
			}
			w.ids[o.ID] = true
		}
	}
}

// stop ends the watcher after a last poll.
func (w *fileWatcher) stop() {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	<-w.done
}

func readFileOutputs(t *testing.T, dir, job string) []event.Output {
	t.Helper()
	var outs []event.Output
	err := filesink.Read(dir, job, func(line []byte) error {
		var o event.Output
		if err := json.Unmarshal(line, &o); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		outs = append(outs, o)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return outs
}
