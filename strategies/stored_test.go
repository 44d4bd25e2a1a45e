package strategies

import (
	"path/filepath"
	"testing"

	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestStoredPositionsStrict: during a run the job's positions are read
// strictly — the run created mb_offsets, so a failure to read it is an
// error (it decides --until-idle and the final lag), never "no positions";
// only the dry run, which may meet a sink the job never ran against, reads
// a missing table as none.
func TestStoredPositionsStrict(t *testing.T) {
	w, err := sqlsink.Open(t.Context(), "sqlite://"+filepath.Join(t.TempDir(), "sink.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := &sqlStrategy{runEnv: newRunEnv(Config{Job: "j", Topic: "events"}), w: w}
	if next, err := s.stored(t.Context()); err == nil {
		t.Fatalf("stored without mb_offsets: %v, no error", next)
	}
	if next, err := s.storedIfAny(t.Context()); err != nil || len(next) != 0 {
		t.Fatalf("storedIfAny without mb_offsets: %v, %v; want none and no error", next, err)
	}
	if err := w.CreateTables(t.Context()); err != nil {
		t.Fatal(err)
	}
	if next, err := s.stored(t.Context()); err != nil || len(next) != 0 {
		t.Fatalf("stored with an empty mb_offsets: %v, %v", next, err)
	}
}
