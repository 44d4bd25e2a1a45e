package offsets_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/offsets"
)

func TestFileCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := offsets.NewFileCheckpoints(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Latest(ctx, "j"); c != nil || err != nil {
		t.Fatalf("empty store: Latest = %v, %v; want nil, nil", c, err)
	}
	for id := int64(1); id <= 5; id++ {
		c := &offsets.Checkpoint{Job: "j", ID: id, Topic: "t", Offsets: map[int32]int64{0: id * 10, 1: id}, Data: json.RawMessage(`{"n":1}`)}
		if err := s.Save(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// Another job's checkpoints are its own.
	if err := s.Save(ctx, &offsets.Checkpoint{Job: "other", ID: 9, Offsets: map[int32]int64{}}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Latest(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != 5 || c.Offsets[0] != 50 || c.Offsets[1] != 5 || c.Topic != "t" || string(c.Data) != `{"n":1}` {
		t.Fatalf("Latest = %+v", c)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "j"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 3 || !strings.HasSuffix(names[0], "03.json") {
		t.Fatalf("kept %v, want the newest 3 and no temporary files", names)
	}

	// A crash during Save leaves a temporary file; Latest ignores it.
	if err := os.WriteFile(filepath.Join(dir, "j", ".tmp-chk-000000000006.json-123"), []byte(`{"job":"j","id":6`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Latest(ctx, "j"); err != nil || c.ID != 5 {
		t.Fatalf("with a torn temporary file: Latest = %v, %v; want checkpoint 5", c, err)
	}
	// A damaged newest checkpoint is an error, not a silent fallback.
	if err := os.WriteFile(filepath.Join(dir, "j", "chk-000000000007.json"), []byte(`{"job":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Latest(ctx, "j"); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("damaged checkpoint: err = %v, want 'unreadable'", err)
	}
}

func TestMemoryCheckpoints(t *testing.T) {
	ctx := context.Background()
	s := offsets.NewMemoryCheckpoints()
	if s.Durable() {
		t.Fatal("memory store says it is durable")
	}
	offs := map[int32]int64{0: 1}
	if err := s.Save(ctx, &offsets.Checkpoint{Job: "j", ID: 1, Offsets: offs}); err != nil {
		t.Fatal(err)
	}
	offs[0] = 99 // the caller's map is not the stored one
	c, err := s.Latest(ctx, "j")
	if err != nil || c.ID != 1 || c.Offsets[0] != 1 {
		t.Fatalf("Latest = %+v, %v", c, err)
	}
	if c, _ := s.Latest(ctx, "other"); c != nil {
		t.Fatalf("other job: %+v", c)
	}
}
