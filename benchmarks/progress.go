package benchmarks

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress prints what the bench is doing to stderr, one line at a time
// (it may go to a file), with an ETA: every step of the plan has an
// estimated duration, and the remaining estimate is scaled by how long the
// finished steps actually took against their estimates.
type progress struct {
	w     io.Writer
	start time.Time

	mu          sync.Mutex
	total, done float64 // estimated seconds: of the whole plan, of the finished steps
	doneActual  time.Duration
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, start: time.Now()}
}

// plan adds est seconds to the plan.
func (p *progress) plan(est float64) {
	p.mu.Lock()
	p.total += est
	p.mu.Unlock()
}

// finished marks a step of est seconds as done.
func (p *progress) finished(est float64) {
	p.mu.Lock()
	p.done += est
	p.doneActual = time.Since(p.start)
	p.mu.Unlock()
}

// eta estimates the time left.
func (p *progress) eta() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	left := max(p.total-p.done, 0)
	scale := 1.0
	if p.done > 5 {
		scale = p.doneActual.Seconds() / p.done
	}
	return time.Duration(left * scale * float64(time.Second)).Round(time.Second)
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	pct := 0.0
	if p.total > 0 {
		pct = 100 * min(p.done/p.total, 1)
	}
	p.mu.Unlock()
	fmt.Fprintf(p.w, "bench [%s, %3.0f%%, ETA %s] %s\n", time.Since(p.start).Round(time.Second), pct, p.eta(), fmt.Sprintf(format, args...))
}
