package strategies

import (
	"log/slog"
	"sync"

	"github.com/microbatch/microbatch/batch"
)

// deadLetterWatch sees every committed batch (or checkpoint) on its way
// to Config.OnProgress. The first time a batch's records are mostly dead
// letters it logs a warning naming a reason: a query comparing a number
// with a string, or a SUM over a field that holds text, dead-letters
// nearly everything, and per-batch INFO lines don't show it. Once per run:
// a job that is wrong for its input would otherwise warn every batch. It
// also keeps the run's first dead letter's reason for Result.
type deadLetterWatch struct {
	log  *slog.Logger
	job  string
	next func(batch.Progress) // Config.OnProgress, may be nil

	mu     sync.Mutex
	warned bool
	reason string
}

func (w *deadLetterWatch) progress(p batch.Progress) {
	w.mu.Lock()
	if w.reason == "" {
		w.reason = p.DeadLetterReason
	}
	warn := !w.warned && p.MostlyDeadLetters()
	w.warned = w.warned || warn
	w.mu.Unlock()
	if warn {
		w.log.Warn("most of a batch's records were dead-lettered: the job may not fit its input (warned once per run)",
			"job", w.job, "batch", p.BatchID, "records", p.Records, "dead_letters", p.DeadLetters, "reason", p.DeadLetterReason)
	}
	if w.next != nil {
		w.next(p)
	}
}

func (w *deadLetterWatch) firstReason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reason
}
