package strategies

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/batch"
)

// TestDeadLetterWatch: the first batch whose records are mostly dead
// letters is logged once as a WARN with its reason; a batch with half or
// fewer is not; every batch still reaches OnProgress; the run's first
// reason is kept for Result.
func TestDeadLetterWatch(t *testing.T) {
	var logs bytes.Buffer
	var seen int
	w := &deadLetterWatch{log: slog.New(slog.NewTextHandler(&logs, nil)), job: "j", next: func(batch.Progress) { seen++ }}
	w.progress(batch.Progress{BatchID: 1, Records: 5, DeadLetters: 5, DeadLetterReason: "half"})
	if logs.Len() != 0 {
		t.Errorf("half dead letters logged: %s", logs.String())
	}
	w.progress(batch.Progress{BatchID: 2, Records: 1, DeadLetters: 9, DeadLetterReason: "compares a number"})
	w.progress(batch.Progress{BatchID: 3, Records: 0, DeadLetters: 9, DeadLetterReason: "again"})
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "batch=2") || !strings.Contains(out, `reason="compares a number"`) {
		t.Errorf("want one WARN for batch 2 with its reason, got:\n%s", out)
	}
	if seen != 3 {
		t.Errorf("OnProgress saw %d batches, want 3", seen)
	}
	if r := w.firstReason(); r != "half" {
		t.Errorf("first reason %q, want the run's first, \"half\"", r)
	}
	if !(Result{Summary: batch.Summary{DeadLetters: 1}}).AllDeadLetters() || (Result{Summary: batch.Summary{Records: 1, DeadLetters: 9}}).AllDeadLetters() || (Result{}).AllDeadLetters() {
		t.Error("AllDeadLetters: want true only for records read and none accepted")
	}
}
