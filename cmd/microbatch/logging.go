package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/term"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/record"
)

// Log formats of --log-format.
const (
	logText = "text"
	logJSON = "json"
)

// output is where `run` reports: a slog logger for events, and the
// per-batch progress, which goes to the logger as one line per batch — or,
// on a terminal with the text format, to a live status line at the bottom
// that log lines scroll above.
type output struct {
	log  *slog.Logger
	live *liveLine // nil unless stderr is a terminal and the format is text
	last time.Time // of the previous progress
}

// newOutput builds the logger: format text or json, level info or debug,
// quiet = warnings and errors only (no progress at all).
func newOutput(w *os.File, format string, level slog.Level, quiet bool) *output {
	o := &output{}
	if quiet {
		level = slog.LevelWarn
	}
	var dst io.Writer = w
	if format == logText && !quiet && term.IsTerminal(int(w.Fd())) {
		o.live = &liveLine{w: w}
		dst = o.live
	}
	// Log attributes carry errors, and an error may quote a DSN its
	// writer forgot to redact: the last line of defence is here.
	dst = redactWriter{dst}
	opts := &slog.HandlerOptions{Level: level}
	if format == logJSON {
		o.log = slog.New(slog.NewJSONHandler(dst, opts))
	} else {
		o.log = slog.New(slog.NewTextHandler(dst, opts))
	}
	// go-redis logs through a process-wide logger of its own, to stderr
	// ("redis: connection pool: failed to dial after 5 attempts" before
	// the command's one error line): the program's lines go through its
	// logger, at debug level.
	redis.SetLogger(redisLog{o.log})
	return o
}

// redisLog hands go-redis's lines to the program's logger.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "from", "go-redis")
}

// batchStart logs, at debug level, a batch's plan: per partition the
// offset range it reads, [from, to), which is what a replay after a crash
// reads again.
func (o *output) batchStart(b batch.Info, ranges []record.Range) {
	var offs int64
	plan := make([]string, len(ranges))
	for i, r := range ranges {
		offs += r.Len()
		plan[i] = fmt.Sprintf("%d:[%d,%d)", r.Partition, r.From, r.To)
	}
	o.log.Debug("batch started", "batch", b.ID, "epoch", b.Epoch, "partitions", len(ranges), "offsets", offs, "plan", strings.Join(plan, " "))
}

// progress reports a committed batch (or a completed checkpoint). Called
// from one goroutine at a time (the driver's).
func (o *output) progress(p batch.Progress, checkpoint bool) {
	if o.live != nil {
		// The rate the backlog shrinks at: offsets per wall second between
		// two progress reports (the interval's waits included), not the
		// batch's own processing rate.
		now := time.Now()
		rate := p.RecordsPerSec
		if !o.last.IsZero() && now.After(o.last) {
			rate = float64(p.Offsets) / now.Sub(o.last).Seconds()
		}
		o.last = now
		o.live.set(statusText(p, checkpoint, rate))
		return
	}
	if checkpoint {
		o.log.Info("checkpoint completed", "checkpoint", p.BatchID, "records", p.Records, "dead_letters", p.DeadLetters,
			"records_per_sec", int64(p.RecordsPerSec), "lag", p.Lag, "duration", p.Duration.Round(time.Millisecond),
			"save", p.MaxCommit.Round(time.Millisecond))
		return
	}
	o.log.Info("batch committed", "batch", p.BatchID, "partitions", p.Partitions, "records", p.Records,
		"dead_letters", p.DeadLetters, "records_per_sec", int64(p.RecordsPerSec), "lag", p.Lag,
		"duration", p.Duration.Round(time.Millisecond), "commit", p.MaxCommit.Round(time.Millisecond), "retries", p.Retries,
		"fenced", p.Fenced)
}

// done ends the live line, so that what follows starts on a fresh line.
func (o *output) done() {
	if o.live != nil {
		o.live.finish()
	}
}

// statusText is the live line: where the job is and how long catching up
// will take at the current rate.
func statusText(p batch.Progress, checkpoint bool, rate float64) string {
	what := "batch"
	if checkpoint {
		what = "checkpoint"
	}
	eta := "caught up"
	if p.Lag > 0 {
		eta = "ETA —"
		if rate > 0 {
			eta = "ETA " + time.Duration(float64(p.Lag)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	s := fmt.Sprintf("%s %d · %s events/s · lag %s · %s", what, p.BatchID, group(int64(rate)), group(p.Lag), eta)
	if p.DeadLetters > 0 {
		s += fmt.Sprintf(" · %s dead letters", group(p.DeadLetters))
	}
	if p.Fenced > 0 {
		s += fmt.Sprintf(" · %d fenced", p.Fenced)
	}
	return s
}

// group writes n with thousands separators.
func group(n int64) string {
	s := fmt.Sprint(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// liveLine is a status line kept at the bottom of a terminal: log lines
// written through it clear the line, appear, and the status is drawn
// again below them.
type liveLine struct {
	mu     sync.Mutex
	w      io.Writer
	status string
}

const clearLine = "\r\033[K"

func (l *liveLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.status != "" {
		if _, err := io.WriteString(l.w, clearLine); err != nil {
			return 0, err
		}
	}
	n, err := l.w.Write(p)
	if err == nil && l.status != "" {
		_, err = io.WriteString(l.w, l.status)
	}
	return n, err
}

func (l *liveLine) set(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.status = s
	_, _ = io.WriteString(l.w, clearLine+s)
}

func (l *liveLine) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.status != "" {
		_, _ = io.WriteString(l.w, "\n")
		l.status = ""
	}
}

// redactWriter hides the password of any DSN in what is written through it
// (redact.Text). slog writes a record in one Write, so a DSN is never split
// across two.
type redactWriter struct{ w io.Writer }

func (r redactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact.Text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
