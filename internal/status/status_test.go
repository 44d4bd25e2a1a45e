package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

func progress(id int64, positions map[int32]batch.PartitionPosition) batch.Progress {
	p := batch.Progress{
		BatchID: id, Partitions: len(positions), Records: 100, DeadLetters: 2, Offsets: 102,
		Duration: 250 * time.Millisecond, MaxCommit: 12 * time.Millisecond, RecordsPerSec: 408, Retries: 1, Epoch: 7,
		Positions: positions,
	}
	for _, pos := range positions {
		p.Lag += pos.End - pos.Next
	}
	return p
}

// metricValue reads one sample of the text exposition: name{labels} value.
func metricValue(t *testing.T, body, series string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no sample %s in /metrics:\n%s", series, body)
	}
	return m[1]
}

func TestMetrics(t *testing.T) {
	r := NewRecorder(Info{Job: "j1", Strategy: "txn", Group: "g1", Topic: "events", Sink: "sqlite://x.db"}, 0)
	h := r.Handler()
	// Before any batch: every family is there (counters at 0), no lag yet.
	res, body := get(t, h, "/metrics")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	for _, name := range []string{
		"microbatch_batches_total", "microbatch_records_total", "microbatch_dead_letters_total", "microbatch_dead_letter_batches_total",
		"microbatch_retries_total", "microbatch_fenced_commits_total", "microbatch_checkpoint_failures_total",
		"microbatch_recoveries_total", "microbatch_batch_duration_seconds_bucket", "microbatch_commit_duration_seconds_count",
		"microbatch_checkpoint_duration_seconds_count", "microbatch_info", "go_goroutines", "process_start_time_seconds",
	} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("/metrics has no %s before the first batch", name)
		}
	}
	if strings.Contains(body, "microbatch_consumer_lag{") {
		t.Errorf("/metrics has a lag before the first batch")
	}
	if v := metricValue(t, body, `microbatch_info{group="g1",job="j1",strategy="txn"}`); v != "1" {
		t.Errorf("microbatch_info = %s, want 1", v)
	}

	r.Progress(progress(1, map[int32]batch.PartitionPosition{0: {Next: 50, End: 80}, 1: {Next: 10, End: 10}}))
	r.Progress(progress(2, map[int32]batch.PartitionPosition{0: {Next: 70, End: 80}, 2: {Next: 5, End: 9}}))
	// More than half dead letters: counted as such; exactly half is not.
	mostlyDead := progress(3, nil)
	mostlyDead.Records, mostlyDead.DeadLetters = 1, 2
	r.Progress(mostlyDead)
	half := progress(4, nil)
	half.Records, half.DeadLetters = 2, 2
	r.Progress(half)
	r.CheckpointFailed(errors.New("boom"))
	r.Recovered()
	_, body = get(t, h, "/metrics")
	l := `{job="j1",strategy="txn"}`
	for series, want := range map[string]string{
		"microbatch_batches_total" + l:                 "4",
		"microbatch_records_total" + l:                 "203",
		"microbatch_dead_letters_total" + l:            "8",
		"microbatch_dead_letter_batches_total" + l:     "1",
		"microbatch_retries_total" + l:                 "4",
		"microbatch_fenced_commits_total" + l:          "0",
		"microbatch_checkpoint_failures_total" + l:     "1",
		"microbatch_recoveries_total" + l:              "1",
		"microbatch_batch_duration_seconds_count" + l:  "4",
		"microbatch_batch_duration_seconds_sum" + l:    "1",
		"microbatch_commit_duration_seconds_count" + l: "4",
		// Not checkpoint mode: no checkpoints timed.
		"microbatch_checkpoint_duration_seconds_count" + l:               "0",
		`microbatch_consumer_lag{job="j1",partition="0",strategy="txn"}`: "10",
		`microbatch_consumer_lag{job="j1",partition="2",strategy="txn"}`: "4",
	} {
		if got := metricValue(t, body, series); got != want {
			t.Errorf("%s = %s, want %s", series, got, want)
		}
	}
	// Partition 1 went to another process: its lag is not ours to report.
	if strings.Contains(body, `partition="1"`) {
		t.Errorf("/metrics still reports the lag of partition 1, which the last batch no longer had")
	}
}

func TestCheckpointModeMetrics(t *testing.T) {
	r := NewRecorder(Info{Job: "j", Strategy: "checkpoint", Checkpoint: true}, 0)
	r.Progress(progress(1700000000001, map[int32]batch.PartitionPosition{0: {Next: 1, End: 2}}))
	_, body := get(t, r.Handler(), "/metrics")
	l := `{job="j",strategy="checkpoint"}`
	if got := metricValue(t, body, "microbatch_checkpoint_duration_seconds_count"+l); got != "1" {
		t.Errorf("checkpoint durations: %s, want 1", got)
	}
	if got := metricValue(t, body, "microbatch_batch_duration_seconds_count"+l); got != "0" {
		t.Errorf("batch durations in checkpoint mode: %s, want 0", got)
	}
}

func TestAPIProgress(t *testing.T) {
	r := NewRecorder(Info{Job: "j1", Strategy: "single", Group: "g1", Topic: "events", Sink: "mysql://app:xxxxx@db:3306/a"}, 3)
	h := r.Handler()
	res, body := get(t, h, "/api/progress")
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	// Empty lists, not null: the page iterates them.
	if !strings.Contains(body, `"batches":[]`) || !strings.Contains(body, `"partitions":[]`) {
		t.Errorf("before the first batch: want empty lists, got %s", body)
	}

	for id := int64(1); id <= 5; id++ {
		r.Progress(progress(id, map[int32]batch.PartitionPosition{2: {Next: 9, End: 12}, 0: {Next: 30, End: 30}}))
	}
	_, body = get(t, h, "/api/progress")
	// The shape the page reads, field by field.
	var raw struct {
		Job        map[string]any   `json:"job"`
		Totals     map[string]any   `json:"totals"`
		Partitions []map[string]any `json:"partitions"`
		Batches    []map[string]any `json:"batches"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"job", "strategy", "group", "topic", "sink", "checkpoint", "epoch", "started", "uptime_seconds"} {
		if _, ok := raw.Job[k]; !ok {
			t.Errorf("job has no %q: %v", k, raw.Job)
		}
	}
	for _, k := range []string{"batches", "records", "dead_letters", "retries", "fenced", "checkpoint_failures", "recoveries"} {
		if _, ok := raw.Totals[k]; !ok {
			t.Errorf("totals has no %q: %v", k, raw.Totals)
		}
	}
	if len(raw.Batches) != 3 {
		t.Fatalf("%d batches kept, want the last 3", len(raw.Batches))
	}
	for _, k := range []string{"id", "partitions", "records", "dead_letters", "offsets", "records_per_sec", "input_per_sec", "lag", "duration_ms", "commit_ms", "retries", "fenced", "epoch", "time"} {
		if _, ok := raw.Batches[0][k]; !ok {
			t.Errorf("batch has no %q: %v", k, raw.Batches[0])
		}
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if ids := [3]int64{s.Batches[0].ID, s.Batches[1].ID, s.Batches[2].ID}; ids != [3]int64{3, 4, 5} {
		t.Errorf("batch ids %v, want 3 4 5 (oldest first)", ids)
	}
	b := s.Batches[2]
	if b.Records != 100 || b.DeadLetters != 2 || b.DurationMS != 250 || b.CommitMS != 12 || b.Retries != 1 || b.Lag != 3 || b.Epoch != 7 {
		t.Errorf("last batch %+v", b)
	}
	want := []Partition{{0, 30, 30, 0}, {2, 9, 12, 3}}
	if len(s.Partitions) != 2 || s.Partitions[0] != want[0] || s.Partitions[1] != want[1] {
		t.Errorf("partitions %+v, want %+v (sorted)", s.Partitions, want)
	}
	if s.Job.Epoch != 7 || s.Job.Job != "j1" || s.Job.Group != "g1" || s.Job.Sink != "mysql://app:xxxxx@db:3306/a" {
		t.Errorf("job %+v", s.Job)
	}
	if s.Totals.Batches != 5 || s.Totals.Records != 500 {
		t.Errorf("totals %+v", s.Totals)
	}
}

func TestPage(t *testing.T) {
	h := NewRecorder(Info{Job: "j"}, 0).Handler()
	res, body := get(t, h, "/")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %s %s", res.Status, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{`id="batches"`, `id="partitions"`, `fetch("api/progress"`, "<svg"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// Self-contained: nothing loaded from elsewhere.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(body); m != "" {
		t.Errorf("page loads an external resource: %s", m)
	}
	if res, _ := get(t, h, "/nothing"); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing: %s, want 404", res.Status)
	}
}

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9464":          "127.0.0.1:9464",
		"0.0.0.0:9464":   "0.0.0.0:9464",
		"localhost:1":    "localhost:1",
		"[::1]:9464":     "[::1]:9464",
		"9464":           "",
		"":               "",
		"127.0.0.1":      "",
		"127.0.0.1:":     "",
		"a:b:c":          "",
		"[::1]:9464/xyz": "",
	} {
		got, err := ListenAddr(in)
		if want == "" {
			if !errors.Is(err, ErrAddr) {
				t.Errorf("ListenAddr(%q) = %q, %v; want ErrAddr", in, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestServer: a real listener on loopback serves the handler and Close
// ends it (the goroutine leak check is -race's and the test's end).
func TestServer(t *testing.T) {
	r := NewRecorder(Info{Job: "j"}, 0)
	s, err := Listen(":0", r.Handler())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Listen(:0) bound %s, want loopback", s.Addr())
	}
	res, err := http.Get("http://" + s.Addr() + "/api/progress")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET /api/progress: %s", res.Status)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a bound for a busy machine
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/"); err == nil {
		t.Errorf("still serving after Close")
	}
}

// TestOutageMetrics: while the job waits for its sink, microbatch_sink_up
// is 0, the outage's seconds count in microbatch_outage_seconds_total, and
// /api/progress (the page's "waiting for …") names the server; when it is
// back, 1 again and the seconds stay counted. Two servers lost at once
// count once: the metric is the job's time spent waiting.
func TestOutageMetrics(t *testing.T) {
	r := NewRecorder(Info{Job: "j", Strategy: "txn"}, 0)
	h := r.Handler()
	l := `{job="j",strategy="txn"}`
	sample := func(name string) string {
		_, body := get(t, h, "/metrics")
		return metricValue(t, body, name+l)
	}
	waiting := func() []Waiting {
		_, body := get(t, h, "/api/progress")
		var s Snapshot
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		return s.Waiting
	}
	if got := sample("microbatch_sink_up"); got != "1" {
		t.Errorf("sink_up before an outage: %s, want 1", got)
	}
	if got := sample("microbatch_outage_seconds_total"); got != "0" {
		t.Errorf("outage seconds before an outage: %s, want 0", got)
	}
	since := time.Now().Add(-10 * time.Second)
	r.Outage("mysql://db:3306/x", true, true, since)
	r.Outage("Kafka k:9092", false, true, since)
	if got := sample("microbatch_sink_up"); got != "0" {
		t.Errorf("sink_up during an outage: %s, want 0", got)
	}
	if w := waiting(); len(w) != 2 || w[1].Server != "mysql://db:3306/x" || !w[1].Sink || !w[1].Since.Equal(since) {
		t.Errorf("waiting during the outage: %+v", w)
	}
	r.Outage("Kafka k:9092", false, false, since)
	r.Outage("mysql://db:3306/x", true, false, since)
	if got := sample("microbatch_sink_up"); got != "1" {
		t.Errorf("sink_up after the outage: %s, want 1", got)
	}
	if w := waiting(); len(w) != 0 {
		t.Errorf("still waiting after the outage: %+v", w)
	}
	secs := func() float64 {
		var secs float64
		if _, err := fmt.Sscan(sample("microbatch_outage_seconds_total"), &secs); err != nil {
			t.Fatal(err)
		}
		return secs
	}
	if s := secs(); s < 10 || s >= 15 {
		t.Errorf("outage seconds after two outages of 10 s at the same time: %v, want 10 (not one count per server)", s)
	}
	// A later outage of one server adds its own length.
	r.Outage("Kafka k:9092", false, true, time.Now().Add(-5*time.Second))
	r.Outage("Kafka k:9092", false, false, time.Time{})
	if s := secs(); s < 15 || s >= 20 {
		t.Errorf("outage seconds after another outage of 5 s: %v, want 15", s)
	}
	_, page := get(t, h, "/")
	if !strings.Contains(page, `"waiting for "`) {
		t.Errorf("the status page does not show what it waits for")
	}
}
