package benchmarks

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func row(name, guarantee string, rate float64, dups, losses int64, verdict string) Row {
	return Row{Name: name, Strategy: name, Guarantee: guarantee, Clean: Clean{Events: 1000, EventsPerSec: rate, Exact: true},
		Fault: Fault{Ran: true, Duplicates: dups, Losses: losses, Verdict: verdict}}
}

// TestJudge: the fault run is valid only when every control in it showed
// its fault, and the targets compare the right rows.
func TestJudge(t *testing.T) {
	const exact = "OK: exactly once"
	for _, c := range []struct {
		name     string
		rows     []Row
		validity string
		targets  map[string]string // target name prefix → status
	}{
		{
			name: "controls fired",
			rows: []Row{
				row("txn", "exactly-once", 960, 0, 0, exact),
				row("at-least-once", "at-least-once", 1000, 12, 0, "OK for at-least-once"),
				row("at-most-once", "at-most-once", 1000, 0, 7, "OK for at-most-once"),
				row("checkpoint-kafka", "exactly-once", 700, 0, 0, exact),
			},
			validity: "valid",
			targets: map[string]string{"txn / at-least-once": "met", "txn / per-record": "met", "txn / raw": "met", "checkpoint → Kafka / txn": "missed",
				"at-least-once shows": "met", "at-most-once shows": "met", "every exactly-once": "met", "raw consume is the ceiling": "met"},
		},
		{
			name: "a control came out clean",
			rows: []Row{
				row("txn", "exactly-once", 700, 0, 0, exact),
				row("at-least-once", "at-least-once", 1000, 0, 0, exact),
			},
			validity: "invalid",
			targets:  map[string]string{"txn / at-least-once": "missed", "at-least-once shows": "missed", "at-most-once shows": "n/a"},
		},
		{
			name:     "no control",
			rows:     []Row{row("txn", "exactly-once", 900, 1, 0, "FAIL")},
			validity: "unvalidated",
			targets:  map[string]string{"txn / at-least-once": "n/a", "every exactly-once": "missed"},
		},
		{
			name: "PostgreSQL rows",
			rows: []Row{
				row("pg-txn", "exactly-once", 880, 0, 0, exact),
				row("pg-at-least-once", "at-least-once", 1000, 5, 0, "OK for at-least-once"),
				row("pg-at-most-once", "at-most-once", 1000, 0, 0, exact),
			},
			validity: "invalid",
			targets: map[string]string{"pg-txn / pg-at-least-once": "missed", "pg-at-least-once shows": "met", "pg-at-most-once shows": "missed",
				"txn / at-least-once": "n/a"},
		},
		{
			name: "a strategy beats the raw consume",
			rows: []Row{
				row("txn", "exactly-once", 900, 0, 0, exact),
				row("at-least-once", "at-least-once", 1100, 3, 0, "OK for at-least-once"),
			},
			validity: "valid",
			targets:  map[string]string{"raw consume is the ceiling": "missed", "txn / raw": "met"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Results{Rows: c.rows, Raw: RawResult{EventsPerSec: 1000}, Baseline: &BaselineResult{EventsPerSec: 50}}
			r.judge()
			if r.FaultValidity != c.validity {
				t.Errorf("validity %q (%s), want %q", r.FaultValidity, r.FaultNote, c.validity)
			}
			for prefix, want := range c.targets {
				found := false
				for _, tg := range r.Targets {
					if strings.HasPrefix(tg.Name, prefix) {
						found = true
						if tg.Status != want {
							t.Errorf("target %q: %s (%s), want %s", tg.Name, tg.Status, tg.Shown, want)
						}
					}
				}
				if !found {
					t.Errorf("no target %q", prefix)
				}
			}
			md := Markdown(r, "chart.svg")
			if c.validity == "invalid" && !strings.Contains(md, "Fault run: INVALID") {
				t.Errorf("results.md does not mark the fault run invalid:\n%s", md)
			}
			var svg bytes.Buffer
			if err := WriteChart(&svg, r, "svg"); err != nil || !strings.Contains(svg.String(), "<svg") {
				t.Errorf("chart: %v", err)
			}
		})
	}
}

func TestParseLine(t *testing.T) {
	const (
		started = `time=2026-01-01T00:00:00.000Z level=INFO msg="job started" job=j strategy=txn` + "\n"
		open1   = `time=2026-01-01T00:00:00.001Z level=DEBUG msg="batch started" batch=11 partitions=4 offsets=20000`
		commit1 = `time=2026-01-01T00:00:00.030Z level=INFO msg="batch committed" batch=11 partitions=4 records=20000 dead_letters=0`
		trig    = `time=2026-01-01T00:00:00.200Z level=DEBUG msg="checkpoint triggered" checkpoint=42`
		done    = `time=2026-01-01T00:00:00.230Z level=INFO msg="checkpoint completed" checkpoint=42 records=977 dead_letters=0`
		fin     = `time=2026-01-01T00:00:01.000Z level=INFO msg="run finished" job=j records=20977`
	)
	var l runLog
	for _, line := range []string{started, open1} {
		l.parseLine(line, at(0), 20500)
	}
	if !l.open() || l.commits != 0 || l.started.IsZero() {
		t.Fatalf("after a batch start: %+v", l)
	}
	l.parseLine(commit1, at(1), 20500)
	if l.open() || l.records != 20000 || !l.reachedAt.IsZero() || !l.firstCommit.Equal(at(1)) {
		t.Fatalf("after its commit: %+v", l)
	}
	l.parseLine(trig, at(2), 20500)
	l.parseLine(done, at(3), 20500)
	l.parseLine(fin, at(4), 20500) // not a commit: records unchanged
	if l.open() || l.records != 20977 || !l.reachedAt.Equal(at(3)) || l.commits != 2 {
		t.Fatalf("after a checkpoint: %+v", l)
	}
}

func at(s int) time.Time { return time.Unix(1_700_000_000+int64(s), 0) }

// A bench asked for the throughput phase only says its fault run was not
// run, instead of calling it unvalidated.
func TestJudgeThroughputOnly(t *testing.T) {
	r := &Results{Settings: Settings{Phases: []string{PhaseThroughput}}, Rows: []Row{{Name: "checkpoint-xa", Guarantee: "exactly-once"}}}
	r.judge()
	if r.FaultValidity != "not run" || !strings.Contains(r.FaultNote, "--phases throughput") {
		t.Fatalf("validity %q (%s), want not run, naming --phases", r.FaultValidity, r.FaultNote)
	}
	if md := Markdown(r, ""); !strings.Contains(md, "**Fault run: not run**") {
		t.Fatalf("results.md does not say the fault run was not run:\n%s", md)
	}
	o := Options{Binary: "microbatch", Phases: []string{"throughput", "speed"}}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `"speed"`) {
		t.Fatalf("Validate with an unknown phase: %v, want an error naming it", err)
	}
}

// TestNoGuaranteeColumn: the no-guarantee pipeline is a row of the table
// next to the raw ceiling, every strategy has its ratio to it in the table
// ("× no-guarantee") and in results.json (ratio_to_no_guarantee), the
// chart draws it, and txn is judged against it.
func TestNoGuaranteeColumn(t *testing.T) {
	r := &Results{
		Raw:         RawResult{Runs: []float64{3000, 4000}},
		NoGuarantee: &NoGuaranteeResult{Runs: []float64{1900, 2000, 1500}, RunsCPU: []float64{1.5, 1.25, 2}, Exact: true, Settings: DefaultNoGuaranteeSettings},
		Rows: []Row{
			row("txn", "exactly-once", 1800, 0, 0, "OK: exactly once"),
			row("at-least-once", "at-least-once", 1000, 3, 0, "OK for at-least-once"),
		},
	}
	r.setRatios()
	r.judge()
	if r.NoGuarantee.EventsPerSec != 2000 || r.Raw.EventsPerSec != 4000 {
		t.Fatalf("references: no-guarantee %v, raw %v; want the best runs 2000, 4000", r.NoGuarantee.EventsPerSec, r.Raw.EventsPerSec)
	}
	if got := r.Rows[0].Clean.RatioToNoGuarantee; got != 0.9 {
		t.Errorf("txn's ratio to the no-guarantee pipeline %v, want 0.9", got)
	}
	md := Markdown(r, "")
	for _, want := range []string{
		"| events/s | × raw consume | × no-guarantee | latency p50 / p99 |",
		"| raw consume (ceiling)² | — | — | 4,000 | 1.00 | 2.00 |",
		"| no-guarantee pipeline (the bar)³ | — (in memory) | none | 2,000 | 0.50 | 1.00 |",
		"| txn |  | exactly-once | 1,800 | 0.45 | 0.90 |",
		"| at-least-once |  | at-least-once | 1,000 | 0.25 | 0.50 |",
		"³ The bar",
		"events/s: 1,900 at 1.50 CPU µs / event, 2,000 at 1.25 CPU µs / event, 1,500 at 2.00 CPU µs / event",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	var found bool
	for _, tg := range r.Targets {
		if strings.HasPrefix(tg.Name, "txn / no-guarantee") {
			found = true
			if tg.Status != "missed" || tg.Shown != "0.90" {
				t.Errorf("target %q: %s %s, want missed 0.90", tg.Name, tg.Status, tg.Shown)
			}
		}
	}
	if !found {
		t.Error("no target txn / no-guarantee")
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"ratio_to_no_guarantee":0.9`, `"no_guarantee":{"events_per_sec":2000`, `"exact":true`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("results.json lacks %s: %s", want, js)
		}
	}
	var svg bytes.Buffer
	if err := WriteChart(&svg, r, "svg"); err != nil || !strings.Contains(svg.String(), "no-guarantee pipeline") {
		t.Errorf("chart without the no-guarantee row: %v", err)
	}
	// A run without it (no throughput phase) has no such row and no ratio.
	r2 := &Results{Raw: RawResult{Runs: []float64{4000}}, Rows: []Row{row("txn", "exactly-once", 1800, 0, 0, "OK: exactly once")}}
	r2.setRatios()
	if md := Markdown(r2, ""); strings.Contains(md, "the bar)³") || !strings.Contains(md, "| txn |  | exactly-once | 1,800 | 0.45 | — |") {
		t.Errorf("without the pipeline:\n%s", md)
	}
}
