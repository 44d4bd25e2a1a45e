package main_test

// The status page in a real browser: a `microbatch run --metrics-addr`
// process over a dev broker, its page loaded by headless Chromium, whose
// DOM must show the batches and partitions the page fetched from
// /api/progress.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// screenshotEnv, when set, names a file the test copies its screenshot of
// the page to (how docs/status-page.png is made).
const screenshotEnv = "MICROBATCH_STATUS_SCREENSHOT"

// chromium finds a headless-capable Chromium. Missing, it fails the test
// where the browser is part of the suite — CI, or the servers' test run
// (scripts/services.sh installs it) — and skips it elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium in PATH (apt-get install chromium; scripts/services.sh start installs it)"
	if testutil.ServersRequired() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browse runs headless Chromium on url with extra arguments (--dump-dom,
// --screenshot=…) and returns its stdout. Virtual time lets the page's
// timers run for budget without the test waiting that long in real time.
func browse(t *testing.T, bin, url string, budget time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a bound for a busy machine
	defer cancel()
	args = append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--user-data-dir=" + t.TempDir(),
		fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds()),
	}, append(args, url)...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, res.Status, err)
	}
	return string(body)
}

func TestStatusPageInBrowser(t *testing.T) {
	bin := systemtest.Binary(t)
	browser := chromium(t)
	b := systemtest.StartBroker(t)
	topic, job := systemtest.UniqueName(t, "topic"), systemtest.UniqueName(t, "job")
	systemtest.Produce(t, b.Addr, topic, 1, 0, 20000)

	addr := freeAddr(t)
	dir := t.TempDir()
	run := exec.Command(bin, "run", "--brokers", b.Addr, "--topic", topic, "--job", job,
		"--sink", "sqlite://"+filepath.Join(dir, "sink.db"), "--interval", "100ms", "--max-batch-records", "400",
		"--metrics-addr", addr)
	run.Dir, run.Env = dir, systemtest.Env()
	var stderr bytes.Buffer
	run.Stdout, run.Stderr = io.Discard, &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = run.Process.Kill()
			<-exited
		}
	}()
	// Input keeps arriving while the page is looked at.
	prodCtx, stopProducing := context.WithCancel(t.Context())
	defer stopProducing()
	producer := exec.CommandContext(prodCtx, bin, "produce", "--brokers", b.Addr, "--topic", topic,
		"--keys", "1000", "--seed", "1", "--skip", "20000", "--count", "1000000", "--rate", "5000")
	producer.Env = systemtest.Env()
	if err := producer.Start(); err != nil {
		t.Fatal(err)
	}
	defer producer.Wait()
	defer stopProducing()

	// Wait for the job to have committed a few batches.
	base := "http://" + addr
	var snap struct {
		Job        struct{ Job, Strategy, Group, Sink string }
		Partitions []struct{ Partition int32 }
		Batches    []struct{ ID int64 }
	}
	const batchesWait = 2 * time.Minute // a bound for a busy machine; 1 s when idle
	deadline := time.Now().Add(batchesWait)
	for len(snap.Batches) < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 8 batches in /api/progress after %s: %+v\nrun stderr:\n%s", batchesWait, snap, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
		res, err := http.Get(base + "/api/progress")
		if err != nil {
			continue // not listening yet
		}
		err = json.NewDecoder(res.Body).Decode(&snap)
		res.Body.Close()
		if err != nil {
			t.Fatalf("decoding /api/progress: %v", err)
		}
	}
	if snap.Job.Job != job || snap.Job.Strategy != "txn" || snap.Job.Group != job || !strings.HasPrefix(snap.Job.Sink, "sqlite://") {
		t.Errorf("/api/progress job = %+v", snap.Job)
	}

	// The browser: the page's script must have fetched the progress and
	// filled both tables.
	dom := browse(t, browser, base+"/", 2500*time.Millisecond, "--dump-dom")
	var ids []int64
	for _, m := range regexp.MustCompile(`<tr data-batch="(\d+)"`).FindAllStringSubmatch(dom, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		ids = append(ids, id)
	}
	if len(ids) < 8 || slices.Min(ids) < 1 {
		t.Errorf("page shows batches %v, want at least 8 rows with ids > 0\nDOM:\n%s", ids, dom)
	}
	if !slices.IsSortedFunc(ids, func(a, b int64) int { return int(b - a) }) {
		t.Errorf("page shows batches %v, want newest first", ids)
	}
	var parts []string
	for _, m := range regexp.MustCompile(`<tr data-partition="(\d+)"`).FindAllStringSubmatch(dom, -1) {
		parts = append(parts, m[1])
	}
	if want := []string{"0", "1", "2", "3"}; !slices.Equal(parts, want) {
		t.Errorf("page shows partitions %v, want %v", parts, want)
	}
	if !strings.Contains(dom, `<b id="job">`+job+`</b>`) {
		t.Errorf("page does not name the job %s", job)
	}
	if n := strings.Count(dom, "<rect "); n < 3*8 {
		t.Errorf("the timeline charts have %d bars, want at least 24 (8 batches × 3 charts)", n)
	}

	shot := filepath.Join(t.TempDir(), "status.png")
	browse(t, browser, base+"/", 2500*time.Millisecond, "--window-size=1200,900", "--screenshot="+shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("no screenshot of the page: %v", err)
	}
	if dst := os.Getenv(screenshotEnv); dst != "" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	metrics := httpGet(t, base+"/metrics")
	m := regexp.MustCompile(`(?m)^microbatch_records_total\{job="` + regexp.QuoteMeta(job) + `",strategy="txn"\} (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("/metrics has no microbatch_records_total of job %s:\n%s", job, metrics)
	}
	if n, _ := strconv.ParseFloat(m[1], 64); n <= 0 {
		t.Errorf("microbatch_records_total = %s, want > 0", m[1])
	}
	for p := range 4 {
		if !strings.Contains(metrics, fmt.Sprintf(`microbatch_consumer_lag{job=%q,partition="%d",strategy="txn"}`, job, p)) {
			t.Errorf("/metrics has no lag of partition %d", p)
		}
	}

	// A graceful stop shuts the server down with the job.
	stopProducing()
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("run after SIGTERM: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("run did not stop within a minute of SIGTERM\nstderr:\n%s", stderr.String())
	}
	if _, err := http.Get(base + "/api/progress"); err == nil {
		t.Errorf("status server still answering after the run ended")
	}
}

// TestStatusBadAddr: a malformed --metrics-addr is a configuration error
// (exit 2) named after the setting, found before anything starts.
func TestStatusBadAddr(t *testing.T) {
	r := systemtest.Run(t, t.TempDir(), nil, time.Minute, "run", "--metrics-addr", "9464")
	if r.Code != 2 || !strings.Contains(r.Stderr, "metrics-addr") {
		t.Fatalf("run --metrics-addr 9464: want exit 2 naming metrics-addr\n%s", r)
	}
}
