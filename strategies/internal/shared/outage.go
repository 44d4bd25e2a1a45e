package shared

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/microbatch/microbatch/batch"
)

// ErrUnreachable means a server did not answer: at start within the
// connect timeout, or later for longer than the outage timeout. The
// message names the server and how long it was gone. strategies.ErrUnreachable
// is this error.
var ErrUnreachable = errors.New("unreachable")

// The outage policy's bounds.
const (
	// DefaultOutageTimeout is how long a run waits out a server that
	// stopped answering before it gives up (--outage-timeout).
	DefaultOutageTimeout = 15 * time.Minute
	// OutageReportInterval is how often an outage that lasts is logged
	// again.
	OutageReportInterval = 30 * time.Second
)

// OutageChange is a server lost (Down) or back, for metrics and status
// pages. Since is when the outage began; Sink says the server is the
// job's sink (not Kafka).
type OutageChange struct {
	Server string
	Sink   bool
	Down   bool
	Since  time.Time
}

// Outages is a run's one retry policy: a step that fails with a retryable
// error is tried again with capped exponential backoff (BackoffInitial
// doubling to BackoffMax) for as long as its server has been failing for
// less than Timeout — counted from the first failure of the outage,
// whichever step or partition met it — and then fails with ErrUnreachable.
// It also keeps the log to one line per outage: a WARN when a server is
// first lost, one every OutageReportInterval while it lasts, an INFO when
// it answers again. Safe for concurrent use; the zero value waits forever
// and logs nothing.
type Outages struct {
	// Timeout: how long a server may fail before the run gives up; 0 or
	// less waits forever.
	Timeout time.Duration
	Log     *slog.Logger
	// Sink is the sink's server name (OutageChange.Sink).
	Sink string
	// OnChange, when set, is told when a server is lost and when it is back.
	OnChange func(OutageChange)

	mu   sync.Mutex
	down map[string]*outage
}

type outage struct {
	since, reported time.Time
	attempts        int
}

// Classifier says which server an error of a step came from and whether
// another attempt may cure it.
type Classifier func(err error) (server string, retryable bool)

// Retry runs attempt until it succeeds, fails with an error classify says
// is not retryable, or the server of its error has been failing longer
// than the timeout; it backs off between attempts. uses names the
// servers a successful attempt talked to: they are back, if they were
// lost. A stop request (batch.StopRequested, or ctx ending) during the
// backoff ends it with batch.ErrStopped wrapping the last error. It
// returns how many attempts it made.
func (o *Outages) Retry(ctx context.Context, what string, uses []string, classify Classifier, attempt func() error) (int, error) {
	for n := 1; ; n++ {
		err := attempt()
		if err == nil {
			for _, s := range uses {
				o.Up(s)
			}
			return n, nil
		}
		server, retry := classify(err)
		if !retry {
			return n, err
		}
		left, ferr := o.Failed(server, what, err)
		if ferr != nil {
			return n, ferr
		}
		o.log().Debug("retrying", "what", what, "attempt", n, "err", err)
		if serr := Sleep(ctx, min(Backoff(n), left)); serr != nil {
			return n, fmt.Errorf("%w (%s: %v)", serr, what, err)
		}
	}
}

// Backoff is the wait before try attempt+1: BackoffInitial doubling up to
// BackoffMax.
func Backoff(attempt int) time.Duration {
	d := BackoffInitial << min(attempt-1, 16)
	if d > BackoffMax || d <= 0 {
		d = BackoffMax
	}
	return d
}

// Sleep waits d, or until ctx ends or a stop is requested.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting to retry: %w", ctx.Err())
	case <-batch.StopRequested(ctx):
		return batch.ErrStopped
	case <-t.C:
		return nil
	}
}

// Failed counts a failure of server against its outage, logging the
// outage's first one and then every OutageReportInterval. It returns how
// long the outage may still last (a large value without a timeout), or
// ErrUnreachable once it lasted past the timeout.
func (o *Outages) Failed(server, what string, err error) (time.Duration, error) {
	now := time.Now()
	o.mu.Lock()
	if o.down == nil {
		o.down = map[string]*outage{}
	}
	out := o.down[server]
	first := out == nil
	if first {
		out = &outage{since: now, reported: now}
		o.down[server] = out
	}
	out.attempts++
	since, attempts, report := out.since, out.attempts, !first && now.Sub(out.reported) >= OutageReportInterval
	if report {
		out.reported = now
	}
	o.mu.Unlock()

	downFor := now.Sub(since)
	switch {
	case first:
		o.log().Warn("server unreachable: retrying until it answers", "server", server, "since", since.Format(time.RFC3339),
			"outage_timeout", o.timeoutText(), "what", what, "err", err)
		o.notify(OutageChange{Server: server, Sink: server == o.Sink, Down: true, Since: since})
	case report:
		o.log().Warn("still waiting for server", "server", server, "down_for", downFor.Round(time.Second), "attempts", attempts,
			"outage_timeout", o.timeoutText(), "err", err)
	}
	if o.Timeout <= 0 {
		return time.Hour, nil
	}
	if downFor >= o.Timeout {
		return 0, fmt.Errorf("%w: %s has not answered for %s (--outage-timeout %s; 0 waits forever): %w",
			ErrUnreachable, server, downFor.Round(100*time.Millisecond), o.Timeout, err)
	}
	return o.Timeout - downFor, nil
}

// Up notes that server answered: an outage of it is over.
func (o *Outages) Up(server string) {
	o.mu.Lock()
	out := o.down[server]
	delete(o.down, server)
	o.mu.Unlock()
	if out == nil {
		return
	}
	o.log().Info("server is back", "server", server, "down_for", time.Since(out.since).Round(100*time.Millisecond), "attempts", out.attempts)
	o.notify(OutageChange{Server: server, Sink: server == o.Sink, Since: out.since})
}

func (o *Outages) timeoutText() string {
	if o.Timeout <= 0 {
		return "none"
	}
	return o.Timeout.String()
}

func (o *Outages) notify(c OutageChange) {
	if o.OnChange != nil {
		o.OnChange(c)
	}
}

func (o *Outages) log() *slog.Logger {
	if o == nil || o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}
