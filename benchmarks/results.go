package benchmarks

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/microbatch/microbatch/strategies"
)

// Results is one bench run: written as results.json, and as the table in
// results.md and the chart.
type Results struct {
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	Workload Workload  `json:"workload"`
	Settings Settings  `json:"settings"`

	Raw RawResult `json:"raw_consume"`
	// NoGuarantee is the no-guarantee pipeline, the bar (nil: not run;
	// it runs with the throughput phase).
	NoGuarantee *NoGuaranteeResult `json:"no_guarantee,omitempty"`
	Baseline    *BaselineResult    `json:"baseline,omitempty"` // nil: not run
	Rows        []Row              `json:"strategies"`
	Skipped     []Skip             `json:"skipped,omitempty"`

	// FaultValidity says whether the fault run proved anything: "valid"
	// when every control in the run showed its fault (at-least-once
	// duplicates, at-most-once losses), "invalid" when a control came out
	// clean (the kills missed the windows), "unvalidated" without a control.
	FaultValidity string   `json:"fault_validity"`
	FaultNote     string   `json:"fault_note"`
	Targets       []Target `json:"targets"`
	Errors        []string `json:"errors,omitempty"`
}

// Machine is where the bench ran.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model"`
	OS       string `json:"os"`
	Go       string `json:"go"`
	Broker   string `json:"broker"`
	MySQL    string `json:"mysql,omitempty"`
	Postgres string `json:"postgres,omitempty"`
	Redis    string `json:"redis,omitempty"`
}

// Settings are the bench's knobs besides the workload.
type Settings struct {
	Interval        string   `json:"interval"`
	Phases          []string `json:"phases"` // which runs each strategy got (Phases)
	Crashes         int      `json:"crashes"`
	LatencyRate     float64  `json:"latency_rate"`
	LatencySeconds  float64  `json:"latency_seconds"`
	FeedRate        float64  `json:"fault_feed_rate"`
	FaultInitial    int64    `json:"fault_initial_events"`
	BaselineEvents  int64    `json:"baseline_events"`
	KillSeed        uint64   `json:"kill_seed"`
	KillFrom        string   `json:"kill_from"` // random kills come between these after a run starts
	KillTo          string   `json:"kill_to"`
	ThroughputTimer string   `json:"throughput_timer"`
	LatencyMethod   string   `json:"latency_method"`
	RecoveryMethod  string   `json:"recovery_method"`
}

// RawResult is the raw consume rate (read everything, no processing),
// measured before and after the strategies; EventsPerSec is the best run.
type RawResult struct {
	EventsPerSec   float64     `json:"events_per_sec"`
	Runs           []float64   `json:"runs"`
	Method         string      `json:"method"`
	Settings       RawSettings `json:"settings"`
	BytesPerRecord float64     `json:"bytes_per_record"` // mean value size of the workload's records
}

// NoGuaranteeResult is the no-guarantee pipeline's rate (noguarantee.go),
// measured like the raw consume: before and after the strategies,
// EventsPerSec the best run. Only reads whose fold was exact count.
type NoGuaranteeResult struct {
	EventsPerSec float64   `json:"events_per_sec"`
	Runs         []float64 `json:"runs"`
	// RunsCPU is each run's CPU µs per event (the bench process's, which
	// runs nothing else meanwhile): on a shared machine it moves less
	// than the rate, and compares with a strategy's "CPU µs / event".
	RunsCPU  []float64           `json:"runs_cpu_us_per_event"`
	Method   string              `json:"method"`
	Settings NoGuaranteeSettings `json:"settings"`
	// Exact: every read's per-key totals were the produced ones.
	Exact    bool  `json:"exact"`
	Rejected int64 `json:"rejected"` // records fastjson refused, in the last read (0 on the bench's workloads)
}

// Skip is a strategy the bench did not run, and why.
type Skip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Row is one strategy's results.
type Row struct {
	Name      string   `json:"name"`     // the bench's name (txn, checkpoint-xa, …)
	Strategy  string   `json:"strategy"` // --strategy
	Sink      string   `json:"sink"`     // what it writes to
	Guarantee string   `json:"guarantee"`
	Clean     Clean    `json:"clean"`
	Fault     Fault    `json:"fault"`
	Errors    []string `json:"errors,omitempty"`
}

// Clean is the run without faults: throughput on the pre-produced backlog,
// latency under steady production.
type Clean struct {
	Events       int64   `json:"events"`
	Seconds      float64 `json:"seconds"`      // process start → the commit that held the last event
	WallSeconds  float64 `json:"wall_seconds"` // process start → exit (includes --until-idle 1s)
	EventsPerSec float64 `json:"events_per_sec"`
	RatioToRaw   float64 `json:"ratio_to_raw"`
	// RatioToNoGuarantee is EventsPerSec over the no-guarantee pipeline's
	// (0: that reference was not measured).
	RatioToNoGuarantee float64     `json:"ratio_to_no_guarantee"`
	CPUSeconds         float64     `json:"cpu_seconds"`
	PeakRSS            int64       `json:"peak_rss_bytes"`
	Exact              bool        `json:"exact"` // the sink held every event once
	Latency            Percentiles `json:"latency"`
}

// Fault is the run with crashes: random SIGKILLs and the strategy's crash
// points while input keeps arriving, a drain, and verify.
type Fault struct {
	Ran            bool     `json:"ran"`
	Produced       int64    `json:"produced"`
	Kills          int      `json:"kills"`        // random SIGKILLs
	KillsInside    int      `json:"kills_inside"` // of them, landed inside a batch / checkpoint
	Points         []string `json:"points"`       // crash points armed (<point>:2)
	PointsReached  int      `json:"points_reached"`
	Recoveries     int      `json:"recoveries"`       // restarts that reached their first commit
	KilledEarly    int      `json:"killed_early"`     // restarts killed before their first commit
	MeanRecoveryMs float64  `json:"mean_recovery_ms"` // restart → first commit
	MaxRecoveryMs  float64  `json:"max_recovery_ms"`
	Found          int64    `json:"found"`
	Duplicates     int64    `json:"duplicates"`
	Losses         int64    `json:"losses"`
	Verdict        string   `json:"verdict"` // verify's last line
}

// Target is one of the goals, measured in this run.
type Target struct {
	Name   string  `json:"name"`
	Want   string  `json:"want"`
	Value  float64 `json:"value"`
	Shown  string  `json:"shown"`
	Status string  `json:"status"` // met, missed, n/a
}

func (r *Results) row(name string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Name == name {
			return &r.Rows[i]
		}
	}
	return nil
}

// setRatios takes each reference's best run as its rate and every
// strategy's ratio to it.
func (r *Results) setRatios() {
	if raws := r.Raw.Runs; len(raws) > 0 {
		r.Raw.EventsPerSec = slices.Max(raws)
		for i := range r.Rows {
			r.Rows[i].Clean.RatioToRaw = r.Rows[i].Clean.EventsPerSec / r.Raw.EventsPerSec
		}
	}
	if ng := r.NoGuarantee; ng != nil && len(ng.Runs) > 0 {
		ng.EventsPerSec = slices.Max(ng.Runs)
		for i := range r.Rows {
			r.Rows[i].Clean.RatioToNoGuarantee = r.Rows[i].Clean.EventsPerSec / ng.EventsPerSec
		}
	}
}

// judge fills FaultValidity and Targets.
func (r *Results) judge() {
	var controls, clean []string
	faults := false
	for _, row := range r.Rows {
		if !row.Fault.Ran {
			continue
		}
		faults = true
		switch strategies.Guarantee(row.Guarantee) {
		case strategies.AtLeastOnce:
			controls = append(controls, row.Name)
			if row.Fault.Duplicates == 0 {
				clean = append(clean, row.Name+" (no duplicates)")
			}
		case strategies.AtMostOnce:
			controls = append(controls, row.Name)
			if row.Fault.Losses == 0 {
				clean = append(clean, row.Name+" (no losses)")
			}
		}
	}
	switch {
	case !faults && len(r.Settings.Phases) > 0 && !slices.Contains(r.Settings.Phases, PhaseFaults):
		r.FaultValidity = "not run"
		r.FaultNote = "the fault phase was not asked for (--phases " + strings.Join(r.Settings.Phases, ",") + ")"
	case len(controls) == 0:
		r.FaultValidity = "unvalidated"
		r.FaultNote = "no control (at-least-once, at-most-once) in this run, so nothing shows that the kills hit the windows where a strategy can go wrong"
	case len(clean) > 0:
		r.FaultValidity = "invalid"
		r.FaultNote = fmt.Sprintf("the controls came out clean: %v; the kills missed the windows, so the exactly-once rows' 0/0 proves nothing", clean)
	default:
		r.FaultValidity = "valid"
		r.FaultNote = fmt.Sprintf("the controls (%v) showed their faults, so the kills hit the windows where a strategy can go wrong", controls)
	}

	r.Targets = nil
	ratio := func(name, want string, min float64, a, b *float64) {
		t := Target{Name: name, Want: want, Status: "n/a"}
		if a != nil && b != nil && *b > 0 {
			t.Value = *a / *b
			t.Shown = fmt.Sprintf("%.2f", t.Value)
			t.Status = status(t.Value >= min)
		}
		r.Targets = append(r.Targets, t)
	}
	rate := func(name string) *float64 {
		if row := r.row(name); row != nil && row.Clean.EventsPerSec > 0 {
			return &row.Clean.EventsPerSec
		}
		return nil
	}
	var baseline, raw *float64
	if r.Baseline != nil && r.Baseline.EventsPerSec > 0 {
		baseline = &r.Baseline.EventsPerSec
	}
	if r.Raw.EventsPerSec > 0 {
		raw = &r.Raw.EventsPerSec
	}
	ratio("txn / at-least-once events/s (same interval)", "≥ 0.95", 0.95, rate("txn"), rate("at-least-once"))
	ratio("txn / per-record baseline events/s", "≥ 10", 10, rate("txn"), baseline)
	ratio("txn / raw consume events/s", "≥ 0.50", 0.5, rate("txn"), raw)
	var bar *float64
	if r.NoGuarantee != nil && r.NoGuarantee.EventsPerSec > 0 {
		bar = &r.NoGuarantee.EventsPerSec
	}
	ratio("txn / no-guarantee pipeline events/s", "≥ 1.00", 1, rate("txn"), bar)
	ratio("checkpoint → Kafka / txn events/s", "≥ 0.80", 0.8, rate("checkpoint-kafka"), rate("txn"))
	// The raw consume is a ceiling only if nothing beats it: a strategy
	// faster than a reader that decodes nothing means the reference is
	// wrong, and every "× raw consume" of the run with it.
	ceil := Target{Name: "raw consume is the ceiling: no strategy faster", Want: "≤ 1.00", Status: "n/a"}
	if raw != nil {
		var fastest string
		for _, row := range r.Rows {
			if x := row.Clean.EventsPerSec / *raw; row.Clean.EventsPerSec > 0 && x > ceil.Value {
				ceil.Value, fastest = x, row.Name
			}
		}
		if fastest != "" {
			ceil.Shown = fmt.Sprintf("%.2f (%s)", ceil.Value, fastest)
			ceil.Status = status(ceil.Value <= 1)
		}
	}
	r.Targets = append(r.Targets, ceil)
	control := func(name, what string, get func(Fault) int64) {
		t := Target{Name: name + " shows " + what + " in the fault run", Want: "> 0", Status: "n/a"}
		if row := r.row(name); row != nil && row.Fault.Ran {
			t.Value = float64(get(row.Fault))
			t.Shown = fmt.Sprint(get(row.Fault))
			t.Status = status(t.Value > 0)
		}
		r.Targets = append(r.Targets, t)
	}
	control("at-least-once", "duplicates", func(f Fault) int64 { return f.Duplicates })
	control("at-most-once", "losses", func(f Fault) int64 { return f.Losses })
	// PostgreSQL's targets, when the run had a pg-* row (--postgres).
	if slices.ContainsFunc(r.Rows, func(row Row) bool { return strings.HasPrefix(row.Name, pgPrefix) }) {
		ratio("pg-txn / pg-at-least-once events/s (PostgreSQL, same interval)", "≥ 0.90", 0.9, rate("pg-txn"), rate("pg-at-least-once"))
		control("pg-at-least-once", "duplicates", func(f Fault) int64 { return f.Duplicates })
		control("pg-at-most-once", "losses", func(f Fault) int64 { return f.Losses })
	}
	eo := Target{Name: "every exactly-once strategy: 0 duplicates, 0 losses", Want: "0 / 0", Status: "n/a"}
	var bad []string
	n := 0
	for _, row := range r.Rows {
		if strategies.Guarantee(row.Guarantee) != strategies.ExactlyOnce {
			continue
		}
		if !row.Fault.Ran {
			if len(row.Errors) > 0 {
				bad = append(bad, row.Name+" (failed)")
			}
			continue
		}
		n++
		if row.Fault.Duplicates != 0 || row.Fault.Losses != 0 || row.Fault.Verdict != "OK: exactly once" {
			bad = append(bad, fmt.Sprintf("%s (%d/%d)", row.Name, row.Fault.Duplicates, row.Fault.Losses))
		}
	}
	if n > 0 || len(bad) > 0 {
		eo.Status = status(len(bad) == 0)
		eo.Shown = fmt.Sprintf("%d of %d clean", n-len(bad), n)
		if len(bad) > 0 {
			eo.Shown += fmt.Sprintf("; not: %v", bad)
		}
		eo.Value = float64(len(bad))
	}
	r.Targets = append(r.Targets, eo)
}

func status(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
