package benchmarks

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeResults writes results.json, results.md and chart.svg into dir.
func writeResults(dir string, r *Results) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(Markdown(r, "chart.svg")), 0o644); err != nil {
		return err
	}
	return writeChart(filepath.Join(dir, "chart.svg"), r)
}

// Markdown renders the results as results.md; chart is the chart's path
// relative to the document ("" for none).
func Markdown(r *Results, chart string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m, w, s := r.Machine, r.Workload, r.Settings
	p("# microbatch bench: the guarantee matrix\n\n")
	p("%s, `%s`, %s.\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Command, (time.Duration(r.Seconds) * time.Second).String())
	p("- **Machine:** %d CPUs (%s), %s, %s\n", m.CPUs, orDash(m.CPUModel), m.OS, m.Go)
	p("- **Servers:** Kafka: %s; SQL: %s; PostgreSQL: %s; Redis: %s\n", m.Broker, orDash(m.MySQL), orDash(m.Postgres), orDash(m.Redis))
	p("- **Workload:** %s events, %s keys, %d partitions, seed %d, format %s; `--interval` %s (also the checkpoint interval)\n",
		group(w.Events), group(int64(w.Keys)), w.Partitions, w.Seed, orDash(string(w.Format)), s.Interval)
	p("- **Faults:** per strategy %d random SIGKILLs + each crash point it reaches (`MICROBATCH_CRASH_AT=<point>:2`), input fed at %.0f events/s meanwhile, then a drain and `microbatch verify`\n\n",
		s.Crashes, s.FeedRate)

	mark := ""
	switch r.FaultValidity {
	case "not run":
		p("**Fault run: not run** — %s.\n\n", r.FaultNote)
	case "valid":
		p("**Fault run: valid** — %s.\n\n", r.FaultNote)
	case "invalid":
		mark = " ✗"
		p("**Fault run: INVALID** (columns marked ✗) — %s.\n\n", r.FaultNote)
	default:
		mark = " ?"
		p("**Fault run: unvalidated** (columns marked ?) — %s.\n\n", r.FaultNote)
	}
	var bar float64 // the no-guarantee pipeline's rate, 0 if not measured
	if r.NoGuarantee != nil {
		bar = r.NoGuarantee.EventsPerSec
	}
	p("| strategy | sink | guarantee promised | events/s | × raw consume | × no-guarantee | latency p50 / p99 | duplicates%s | losses%s | recovery (mean) |\n", mark, mark)
	p("|---|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	if r.Raw.EventsPerSec > 0 {
		p("| raw consume (ceiling)² | — | — | %s | 1.00 | %s | — | — | — | — |\n", group(int64(r.Raw.EventsPerSec)), ratio(r.Raw.EventsPerSec, bar))
	}
	if ng := r.NoGuarantee; ng != nil {
		rate := "—"
		if ng.EventsPerSec > 0 {
			rate = group(int64(ng.EventsPerSec))
		}
		p("| no-guarantee pipeline (the bar)³ | — (in memory) | none | %s | %s | %s | — | — | — | — |\n",
			rate, ratio(ng.EventsPerSec, r.Raw.EventsPerSec), ratio(ng.EventsPerSec, bar))
	}
	if bl := r.Baseline; bl != nil {
		p("| per-record baseline¹ | %s | at-least-once (hand-written) | %s | %s | %s | — | — | — | — |\n",
			sqlLabel(m.MySQL), group(int64(bl.EventsPerSec)), ratio(bl.EventsPerSec, r.Raw.EventsPerSec), ratio(bl.EventsPerSec, bar))
	}
	for _, row := range r.Rows {
		c, f := row.Clean, row.Fault
		rate, lat, dups, losses, rec := "—", "—", "—", "—", "—"
		if c.EventsPerSec > 0 {
			rate = group(int64(c.EventsPerSec))
		}
		if c.Latency.Samples > 0 {
			lat = fmt.Sprintf("%s / %s ms", group(int64(c.Latency.P50)), group(int64(c.Latency.P99)))
		}
		if f.Ran {
			dups, losses = group(f.Duplicates), group(f.Losses)
			rec = fmt.Sprintf("%s ms (%d)", group(int64(f.MeanRecoveryMs)), f.Recoveries)
			if f.Recoveries == 0 {
				rec = "— (0)"
			}
		}
		name := row.Name
		if len(row.Errors) > 0 {
			name += " ⚠"
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, row.Sink, row.Guarantee, rate, ratio(c.EventsPerSec, r.Raw.EventsPerSec),
			ratio(c.EventsPerSec, bar), lat, dups, losses, rec)
	}
	p("\n")
	if bl := r.Baseline; bl != nil {
		p("¹ A sarama consumer group whose handler upserts each record with its own autocommitted `INSERT … ON DUPLICATE KEY UPDATE` and marks it (offsets auto-committed every second) — what people write by hand. Slow, so measured on a bounded slice: %s, timed from the first record received to the last upserted (the group join not counted). Not run under faults.\n\n", bl.Method)
	}
	if len(r.Raw.Runs) > 0 {
		runs := make([]string, len(r.Raw.Runs))
		for i, x := range r.Raw.Runs {
			runs[i] = group(int64(x))
		}
		p("² Best of %d raw reads of the whole topic (events/s: %s; %.0f bytes a record). The reader: %s.\n\n",
			len(runs), strings.Join(runs, ", "), r.Raw.BytesPerRecord, r.Raw.Settings)
	}
	if ng := r.NoGuarantee; ng != nil {
		runs := make([]string, len(ng.Runs))
		for i, x := range ng.Runs {
			runs[i] = group(int64(x))
			if i < len(ng.RunsCPU) {
				runs[i] += fmt.Sprintf(" at %.2f CPU µs / event", ng.RunsCPU[i])
			}
		}
		exact := "every read's per-key totals were the produced ones"
		if !ng.Exact {
			exact = "**a read's per-key totals were NOT the produced ones** (see Errors; that read is not counted)"
		}
		p("³ The bar: what exactly-once should cost nothing next to. Franz-go reading, fastjson parsing, per-key totals folded in memory; nothing written, nothing committed, no guarantee. Best of %d reads of the whole topic (events/s: %s); %s. The pipeline: %s.\n\n",
			len(runs), orDash(strings.Join(runs, ", ")), exact, ng.Settings)
	}
	p("Recovery: mean time from a restart to its first commit, over the restarts that got that far (their number in parentheses). ⚠: the strategy failed a step (see Errors).\n\n")
	if chart != "" {
		p("![throughput, duplicates/losses and latency per strategy](%s)\n\n", chart)
	}

	p("## Targets\n\n| target | want | measured | |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		p("| %s | %s | %s | %s |\n", t.Name, t.Want, orDash(t.Shown), t.Status)
	}
	p("\n## Details\n\nClean run (throughput on the backlog, latency under %.0f events/s):\n\n", s.LatencyRate)
	p("| strategy | to the last commit | wall (exit) | CPU s | CPU µs / event | peak RSS | latency p50 / p95 / p99 / max | sink exact |\n|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, row := range r.Rows {
		c := row.Clean
		if c.EventsPerSec == 0 {
			p("| %s | — | — | — | — | — | %s | — |\n", row.Name, latencyCell(c.Latency))
			continue
		}
		p("| %s | %.2f s | %.2f s | %.1f | %.2f | %d MiB | %s | %s |\n", row.Name, c.Seconds, c.WallSeconds, c.CPUSeconds,
			c.CPUSeconds/float64(c.Events)*1e6, c.PeakRSS>>20, latencyCell(c.Latency), yesNo(c.Exact))
	}
	p("\nFault run:\n\n| strategy | events produced | random kills (inside a batch / checkpoint) | crash points reached | restarts killed before their first commit | recovery mean / max | found | verify |\n|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, row := range r.Rows {
		f := row.Fault
		if !f.Ran {
			p("| %s | — | — | — | — | — | — | not judged |\n", row.Name)
			continue
		}
		p("| %s | %s | %d (%d) | %d of %d | %d | %s / %s ms | %s | %s |\n", row.Name, group(f.Produced), f.Kills, f.KillsInside,
			f.PointsReached, len(f.Points), f.KilledEarly, group(int64(f.MeanRecoveryMs)), group(int64(f.MaxRecoveryMs)), group(f.Found), f.Verdict)
	}
	p("\n## Method\n\n")
	p("- **Throughput:** each strategy drains the same pre-produced topic with a fresh job, as a `microbatch run` subprocess; timed from %s. CPU seconds (user + system, rusage) and peak RSS (VmHWM, sampled every 20 ms from /proc: rusage's maxrss would be the bench's own) are the subprocess's own.\n", s.ThroughputTimer)
	p("- **Raw consume:** %s.\n", r.Raw.Method)
	if ng := r.NoGuarantee; ng != nil {
		p("- **No-guarantee pipeline:** %s.\n", ng.Method)
	}
	p("- **Latency:** %s.\n", s.LatencyMethod)
	p("- **Faults:** a fresh job on a fresh topic (%s events, then %.0f events/s more while runs are killed). Each random kill comes %s to %s after the start (at random); three of four then wait for the next batch start / checkpoint trigger and a few ms more, so they land in open work. Then each crash point the strategy reaches is armed once (`<point>:2`), the input stops, a run with `--until-idle 1s` drains, and `microbatch verify --strategy <promise>` compares the sink's totals with what was produced (duplicates = events over, losses = events short). Recovery: %s. Kill timing seed %d.\n",
		group(s.FaultInitial), s.FeedRate, s.KillFrom, s.KillTo, s.RecoveryMethod, s.KillSeed)
	if len(r.Skipped) > 0 {
		p("\n## Skipped\n\n")
		for _, sk := range r.Skipped {
			p("- %s: %s\n", sk.Name, sk.Reason)
		}
	}
	if len(r.Errors) > 0 {
		p("\n## Errors\n\n")
		for _, e := range r.Errors {
			p("- %s\n", e)
		}
	}
	return b.String()
}

func latencyCell(l Percentiles) string {
	if l.Samples == 0 {
		return "—"
	}
	return fmt.Sprintf("%s / %s / %s / %s ms", group(int64(l.P50)), group(int64(l.P95)), group(int64(l.P99)), group(int64(l.Max)))
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	if a/b < 0.1 {
		return fmt.Sprintf("%.3f", a/b)
	}
	return fmt.Sprintf("%.2f", a/b)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func sqlLabel(version string) string {
	if strings.HasPrefix(version, "SQLite") {
		return "SQLite"
	}
	return "MySQL"
}
