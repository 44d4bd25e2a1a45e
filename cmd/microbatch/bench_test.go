package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/benchmarks"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestBenchTiny runs `microbatch bench` on a tiny configuration — its own
// dev broker, wide events (the compact default is what every other test
// produces), txn and the at-least-once control, one random kill plus the
// crash points — and checks that the table, the JSON and the chart are
// written and say what they must: the control duplicated (so the fault run
// is valid) and txn stayed exact. It uses MariaDB when
// MICROBATCH_TEST_MYSQL is set, SQLite otherwise.
func TestBenchTiny(t *testing.T) {
	t.Parallel()
	systemtest.Binary(t)
	sink := os.Getenv(testutil.EnvMySQL)
	if sink == "" {
		sink = "sqlite://" + filepath.Join(t.TempDir(), "sink.db")
	}
	out := filepath.Join(t.TempDir(), "results")
	start := time.Now()
	r := systemtest.Run(t, t.TempDir(), nil, 5*time.Minute, "bench", "--strategies", "txn,at-least-once", "--events", "5000",
		"--crashes", "1", "--interval", "200ms", "--latency-rate", "2000", "--latency-duration", "2s",
		"--baseline-events", "1000", "--mysql", sink, "--out", out, "--format", "wide")
	t.Logf("bench took %s", time.Since(start).Round(time.Millisecond))
	if r.Code != 0 {
		t.Fatalf("microbatch bench: %s", r)
	}
	for _, f := range []string{"results.md", "results.json", "chart.svg"} {
		if info, err := os.Stat(filepath.Join(out, f)); err != nil || info.Size() == 0 {
			t.Fatalf("%s missing or empty (%v)", f, err)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(out, "chart.svg"))
	if !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "at-least-once") {
		t.Errorf("chart.svg is not an SVG naming the strategies")
	}

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res benchmarks.Results
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if res.Machine.CPUs < 1 || res.Machine.Go == "" || !strings.Contains(res.Machine.Broker, "kfake") {
		t.Errorf("machine not recorded: %+v", res.Machine)
	}
	if res.Raw.EventsPerSec <= 0 || res.Baseline == nil || res.Baseline.EventsPerSec <= 0 {
		t.Errorf("references missing: raw %+v, baseline %+v", res.Raw, res.Baseline)
	}
	if ng := res.NoGuarantee; ng == nil || len(ng.Runs) != 3 || len(ng.RunsCPU) != 3 || ng.RunsCPU[0] <= 0 || !ng.Exact || ng.EventsPerSec <= 0 {
		t.Errorf("the no-guarantee pipeline: want three exact reads, got %+v", ng)
	}
	if md, _ := os.ReadFile(filepath.Join(out, "results.md")); !strings.Contains(string(md), "| no-guarantee pipeline (the bar)³ |") || !strings.Contains(string(md), "× no-guarantee") {
		t.Errorf("results.md has no no-guarantee row and column:\n%s", md)
	}
	if res.Workload.Format != event.FormatWide || res.Raw.BytesPerRecord < 500 || res.Raw.Settings.FetchBytes <= 0 {
		t.Errorf("want the wide workload (~600 bytes a record) and the raw reader's settings recorded: format %q, raw %+v", res.Workload.Format, res.Raw)
	}
	if len(res.Rows) != 2 || len(res.Errors) != 0 {
		t.Fatalf("want 2 rows and no errors, got %d rows, errors %v", len(res.Rows), res.Errors)
	}
	for _, row := range res.Rows {
		c, f := row.Clean, row.Fault
		if c.EventsPerSec <= 0 || !c.Exact || c.CPUSeconds <= 0 || c.PeakRSS <= 0 || c.RatioToNoGuarantee <= 0 {
			t.Errorf("%s: clean run %+v", row.Name, c)
		}
		if c.Latency.Samples != 4000 || c.Latency.P50 <= 0 || c.Latency.P99 < c.Latency.P50 {
			t.Errorf("%s: latency %+v", row.Name, c.Latency)
		}
		if !f.Ran || f.Kills != 1 || f.PointsReached != len(f.Points) || f.Produced <= 20_000 {
			t.Errorf("%s: fault run %+v", row.Name, f)
		}
		switch row.Name {
		case "txn":
			if f.Duplicates != 0 || f.Losses != 0 || f.Verdict != "OK: exactly once" {
				t.Errorf("txn after crashes: %d duplicates, %d losses, %q", f.Duplicates, f.Losses, f.Verdict)
			}
		case "at-least-once":
			if f.Duplicates == 0 || f.Losses != 0 {
				t.Errorf("the control came out with %d duplicates, %d losses: the kills missed", f.Duplicates, f.Losses)
			}
		}
	}
	if res.FaultValidity != "valid" {
		t.Errorf("fault run %s: %s", res.FaultValidity, res.FaultNote)
	}
	md, _ := os.ReadFile(filepath.Join(out, "results.md"))
	for _, want := range []string{"| strategy | sink | guarantee promised | events/s |", "| txn |", "| at-least-once |", "raw consume", "per-record baseline", "chart.svg", "Fault run: valid", "format wide", "The reader: direct FetchRequests"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if !strings.Contains(r.Stdout, "| txn |") || !strings.Contains(r.Stderr, "ETA") {
		t.Errorf("want the table on stdout and progress with an ETA on stderr\n%s", r)
	}
}

// TestBenchConfigErrors: bad bench settings exit 2 with one line, before
// anything starts.
func TestBenchConfigErrors(t *testing.T) {
	systemtest.Binary(t)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown strategy", []string{"--strategies", "txn,nope"}, []string{`"nope"`, "strategies"}},
		{"malformed crashes", []string{"--crashes", "many"}, []string{"many", "crashes"}},
		{"zero events", []string{"--events", "0"}, []string{"events"}},
		{"bad mysql DSN", []string{"--mysql", "oracle://x"}, []string{"mysql", "oracle"}},
		{"postgres DSN as mysql", []string{"--mysql", "postgres://u:pw@db/app"}, []string{"mysql", "PostgreSQL"}},
		{"bad interval", []string{"--interval", "soon"}, []string{"soon", "interval"}},
		{"unknown format", []string{"--format", "jsonl"}, []string{`"jsonl"`, "format"}},
		{"unknown phase", []string{"--phases", "throughput,speed"}, []string{`"speed"`, "phases"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := systemtest.Run(t, dir, nil, time.Minute, append([]string{"bench", "--out", filepath.Join(dir, "out")}, c.args...)...)
			checkConfigError(t, r, c.want...)
			if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
				t.Errorf("a bench refused for its configuration created its output directory")
			}
		})
	}
}
