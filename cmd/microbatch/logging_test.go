package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
)

// TestLiveLine: log lines written while a status line is shown clear it,
// appear on their own line, and the status is drawn again below them.
func TestLiveLine(t *testing.T) {
	var buf bytes.Buffer
	l := &liveLine{w: &buf}
	l.Write([]byte("before any status\n"))
	l.set("batch 1")
	l.set("batch 2")
	l.Write([]byte("level=WARN msg=retrying\n"))
	l.finish()
	l.finish()
	want := "before any status\n" + clearLine + "batch 1" + clearLine + "batch 2" +
		clearLine + "level=WARN msg=retrying\n" + "batch 2" + "\n"
	if got := buf.String(); got != want {
		t.Errorf("terminal got %q\nwant %q", got, want)
	}
}

func TestStatusText(t *testing.T) {
	p := batch.Progress{BatchID: 42, Lag: 1_234_567, RecordsPerSec: 10, DeadLetters: 3, Fenced: 1}
	got := statusText(p, false, 100_000)
	for _, want := range []string{"batch 42", "100,000 events/s", "lag 1,234,567", "ETA 12s", "3 dead letters", "1 fenced"} {
		if !strings.Contains(got, want) {
			t.Errorf("status %q lacks %q", got, want)
		}
	}
	if got := statusText(batch.Progress{BatchID: 7}, true, 5); !strings.Contains(got, "checkpoint 7") || !strings.Contains(got, "caught up") {
		t.Errorf("caught-up checkpoint status = %q", got)
	}
	if got := group(-1234); got != "-1,234" {
		t.Errorf("group(-1234) = %q", got)
	}
}

// TestOutputFormats: json gives one JSON object per line; quiet drops
// progress and info; a file (not a terminal) gets one line per batch.
func TestOutputFormats(t *testing.T) {
	p := batch.Progress{BatchID: 3, Partitions: 2, Records: 10, Duration: time.Millisecond}
	for _, tc := range []struct {
		format string
		quiet  bool
		check  func(t *testing.T, out string)
	}{
		{logJSON, false, func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 {
				t.Fatalf("%d lines, want 2: %q", len(lines), out)
			}
			for _, l := range lines {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("line %q is not JSON: %v", l, err)
				}
			}
			if !strings.Contains(lines[0], `"msg":"batch committed"`) || !strings.Contains(lines[0], `"batch":3`) {
				t.Errorf("progress line %q", lines[0])
			}
		}},
		{logText, false, func(t *testing.T, out string) {
			if !strings.Contains(out, `msg="batch committed" batch=3 partitions=2 records=10`) || strings.Contains(out, clearLine) {
				t.Errorf("text output to a file %q", out)
			}
		}},
		{logText, true, func(t *testing.T, out string) {
			if strings.Contains(out, "batch committed") || strings.Contains(out, "info line") || !strings.Contains(out, "a warning") {
				t.Errorf("quiet output %q: want the warning only", out)
			}
		}},
	} {
		f, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutput(f, tc.format, slog.LevelInfo, tc.quiet)
		if o.live != nil {
			t.Fatal("a file got a live status line")
		}
		o.progress(p, false)
		o.log.Info("info line")
		if tc.quiet {
			o.log.Warn("a warning")
		}
		o.done()
		f.Close()
		out, _ := os.ReadFile(f.Name())
		tc.check(t, string(out))
	}
}

// TestLogsHideDSNPasswords: whatever a log record carries — an error
// quoting a DSN nobody redacted, an attribute holding one — the log on
// stderr shows the DSN with its password hidden and its user kept, in
// both formats.
func TestLogsHideDSNPasswords(t *testing.T) {
	const secret = "S3CRETPW"
	leak := errors.New("opening sink mysql://mb:" + secret + "@db:3306/app: refused; also redis://:" + secret + "@cache:6379/0 and mb:" + secret + "@tcp(db:3306)/app")
	for _, format := range []string{logText, logJSON} {
		f, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutput(f, format, slog.LevelInfo, false)
		o.log.Error("retrying", "err", leak, "sink", "kafka://u:"+secret+"@k1:9092/out")
		o.done()
		f.Close()
		out, _ := os.ReadFile(f.Name())
		if strings.Contains(string(out), secret) {
			t.Errorf("%s log shows the password: %s", format, out)
		}
		for _, want := range []string{"mysql://mb:xxxxx@db:3306/app", "redis://:xxxxx@cache:6379/0", "mb:xxxxx@tcp(db:3306)/app", "kafka://u:xxxxx@k1:9092/out"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s log lacks %q: %s", format, want, out)
			}
		}
	}
}
