package status

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/microbatch/microbatch/batch"
)

// DefaultHistory is how many batches (or checkpoints) the page and
// /api/progress keep.
const DefaultHistory = 50

// Info describes the job, for the page and the info metric.
type Info struct {
	Job      string `json:"job"`
	Strategy string `json:"strategy"`
	Group    string `json:"group"`
	Topic    string `json:"topic"`
	Sink     string `json:"sink"` // display form: never with a password
	// Checkpoint is set in checkpoint mode: progress reports are
	// checkpoints, and MaxCommit is the checkpoint's save time.
	Checkpoint bool `json:"checkpoint"`
}

// Record is one committed batch or completed checkpoint, as the progress
// lines print it.
type Record struct {
	ID            int64   `json:"id"`
	Partitions    int     `json:"partitions"`
	Records       int64   `json:"records"`
	DeadLetters   int64   `json:"dead_letters"`
	Offsets       int64   `json:"offsets"`
	RecordsPerSec float64 `json:"records_per_sec"`
	// InputPerSec is the records (and dead letters) of this report over
	// the time since the previous one: how fast input arrives, where
	// RecordsPerSec of a batch is how fast it was processed.
	InputPerSec float64   `json:"input_per_sec"`
	Lag         int64     `json:"lag"`
	DurationMS  float64   `json:"duration_ms"`
	CommitMS    float64   `json:"commit_ms"` // checkpoint mode: save time
	Retries     int       `json:"retries"`
	Fenced      int       `json:"fenced"`
	Epoch       int64     `json:"epoch"`
	Time        time.Time `json:"time"` // when it was reported
}

// Partition is one partition's position after the latest report.
type Partition struct {
	Partition int32 `json:"partition"`
	Next      int64 `json:"next"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
}

// Totals count since the process started.
type Totals struct {
	Batches            int64 `json:"batches"`
	Records            int64 `json:"records"`
	DeadLetters        int64 `json:"dead_letters"`
	Retries            int64 `json:"retries"`
	Fenced             int64 `json:"fenced"`
	CheckpointFailures int64 `json:"checkpoint_failures"`
	Recoveries         int64 `json:"recoveries"`
}

// Snapshot is the body of /api/progress.
type Snapshot struct {
	Job struct {
		Info
		Epoch         int64     `json:"epoch"` // of the latest report; 0 before one, and in checkpoint mode
		Started       time.Time `json:"started"`
		UptimeSeconds float64   `json:"uptime_seconds"`
	} `json:"job"`
	Totals     Totals      `json:"totals"`
	Partitions []Partition `json:"partitions"` // by partition
	Batches    []Record    `json:"batches"`    // oldest first
	// Waiting lists the servers the job has lost and is waiting for (an
	// outage it rides out), by name; empty while all answer.
	Waiting []Waiting `json:"waiting"`
}

// Waiting is a server the job is waiting for, since when.
type Waiting struct {
	Server string    `json:"server"`
	Sink   bool      `json:"sink"`
	Since  time.Time `json:"since"`
}

// Recorder keeps the metrics and recent history of one job. Its methods
// are safe for concurrent use.
type Recorder struct {
	info    Info
	keep    int
	started time.Time
	reg     *prometheus.Registry
	m       metrics

	mu        sync.Mutex
	history   []Record
	positions map[int32]batch.PartitionPosition
	epoch     int64
	totals    Totals
	waiting   map[string]Waiting
	// outages is the time spent waiting in the outages that ended; while
	// one lasts, waitingSince is when the job began waiting (outages of
	// two servers at once count once: it is the job's waiting time).
	outages      time.Duration
	waitingSince time.Time
}

type metrics struct {
	batches, records, deadLetters, retries, fenced prometheus.Counter
	deadBatches                                    prometheus.Counter
	ckptFailures, recoveries                       prometheus.Counter
	batchDur, commitDur, ckptDur                   prometheus.Histogram
	lag                                            *prometheus.GaugeVec
}

// NewRecorder makes a Recorder keeping the last keep reports
// (DefaultHistory if keep ≤ 0), with its own registry: the Go runtime and
// process collectors plus the microbatch_* metrics, which carry the job
// and strategy as constant labels.
func NewRecorder(info Info, keep int) *Recorder {
	if keep <= 0 {
		keep = DefaultHistory
	}
	r := &Recorder{info: info, keep: keep, started: time.Now(), reg: prometheus.NewRegistry()}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"job": info.Job, "strategy": info.Strategy}, r.reg)
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	// 1 ms .. ~33 s (commits), 5 ms .. ~82 s (batches, checkpoints).
	commitBuckets := prometheus.ExponentialBuckets(0.001, 2, 16)
	batchBuckets := prometheus.ExponentialBuckets(0.005, 2, 15)
	r.m = metrics{
		batches:      counter("microbatch_batches_total", "Committed batches (checkpoint mode: completed checkpoints)."),
		records:      counter("microbatch_records_total", "Records committed into results."),
		deadLetters:  counter("microbatch_dead_letters_total", "Records committed as dead letters."),
		deadBatches:  counter("microbatch_dead_letter_batches_total", "Batches (checkpoint mode: checkpoints) more than half of whose records were dead letters."),
		retries:      counter("microbatch_retries_total", "Commit attempts repeated after a retryable error."),
		fenced:       counter("microbatch_fenced_commits_total", "Partition commits refused because another instance owns the partition now."),
		ckptFailures: counter("microbatch_checkpoint_failures_total", "Checkpoint attempts that failed; the job restarts from the latest complete checkpoint."),
		recoveries:   counter("microbatch_recoveries_total", "Restores from the latest complete checkpoint after a failure."),
		batchDur:     histogram("microbatch_batch_duration_seconds", "Time from a batch's start to its last commit.", batchBuckets),
		commitDur:    histogram("microbatch_commit_duration_seconds", "Slowest partition commit of a batch (checkpoint mode: checkpoint save time).", commitBuckets),
		ckptDur:      histogram("microbatch_checkpoint_duration_seconds", "Time from a checkpoint's barriers to its saved state.", batchBuckets),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "microbatch_consumer_lag",
			Help: "Offsets of a partition not yet committed, after the latest batch or checkpoint.",
		}, []string{"partition"}),
	}
	reg.MustRegister(r.m.lag)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "microbatch_sink_up",
		Help: "1 while the sink answers, 0 while the job waits for it (an outage it rides out, up to --outage-timeout).",
	}, r.sinkUp))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "microbatch_outage_seconds_total",
		Help: "Seconds the job spent waiting for a lost server (the sink or Kafka; both lost at once count once), the outage in progress included.",
	}, r.outageSeconds))
	info1 := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "microbatch_info", Help: "The job this process runs (always 1).",
		ConstLabels: prometheus.Labels{"group": info.Group},
	})
	info1.Set(1)
	reg.MustRegister(info1)
	return r
}

// Registry is the registry /metrics serves.
func (r *Recorder) Registry() *prometheus.Registry { return r.reg }

// Progress records a committed batch or completed checkpoint.
func (r *Recorder) Progress(p batch.Progress) {
	r.m.batches.Inc()
	r.m.records.Add(float64(p.Records))
	r.m.deadLetters.Add(float64(p.DeadLetters))
	if p.MostlyDeadLetters() {
		r.m.deadBatches.Inc()
	}
	r.m.retries.Add(float64(p.Retries))
	r.m.fenced.Add(float64(p.Fenced))
	r.m.commitDur.Observe(p.MaxCommit.Seconds())
	if r.info.Checkpoint {
		r.m.ckptDur.Observe(p.Duration.Seconds())
	} else {
		r.m.batchDur.Observe(p.Duration.Seconds())
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Positions != nil {
		for part := range r.positions {
			if _, ok := p.Positions[part]; !ok {
				// Assigned to another process now.
				r.m.lag.DeleteLabelValues(partLabel(part))
			}
		}
		for part, pos := range p.Positions {
			r.m.lag.WithLabelValues(partLabel(part)).Set(float64(pos.End - pos.Next))
		}
		r.positions = maps.Clone(p.Positions)
	}
	r.epoch = p.Epoch
	r.totals.Batches++
	r.totals.Records += p.Records
	r.totals.DeadLetters += p.DeadLetters
	r.totals.Retries += int64(p.Retries)
	r.totals.Fenced += int64(p.Fenced)
	rec := Record{
		ID: p.BatchID, Partitions: p.Partitions, Records: p.Records, DeadLetters: p.DeadLetters, Offsets: p.Offsets,
		RecordsPerSec: p.RecordsPerSec, InputPerSec: p.RecordsPerSec, Lag: p.Lag, DurationMS: ms(p.Duration),
		CommitMS: ms(p.MaxCommit), Retries: p.Retries, Fenced: p.Fenced, Epoch: p.Epoch, Time: time.Now(),
	}
	if n := len(r.history); n > 0 {
		if since := rec.Time.Sub(r.history[n-1].Time).Seconds(); since > 0 {
			rec.InputPerSec = float64(p.Records+p.DeadLetters) / since
		}
	}
	if len(r.history) == r.keep {
		r.history = slices.Delete(r.history, 0, 1)
	}
	r.history = append(r.history, rec)
}

// CheckpointFailed records a failed checkpoint attempt.
func (r *Recorder) CheckpointFailed(error) {
	r.m.ckptFailures.Inc()
	r.mu.Lock()
	r.totals.CheckpointFailures++
	r.mu.Unlock()
}

// Recovered records a restore from the latest complete checkpoint.
func (r *Recorder) Recovered() {
	r.m.recoveries.Inc()
	r.mu.Lock()
	r.totals.Recoveries++
	r.mu.Unlock()
}

// Outage records a server lost (down, since when) or back.
func (r *Recorder) Outage(server string, sink, down bool, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting == nil {
		r.waiting = map[string]Waiting{}
	}
	if down {
		if len(r.waiting) == 0 || since.Before(r.waitingSince) {
			r.waitingSince = since
		}
		r.waiting[server] = Waiting{Server: server, Sink: sink, Since: since}
		return
	}
	if _, ok := r.waiting[server]; ok {
		delete(r.waiting, server)
		if len(r.waiting) == 0 {
			r.outages += time.Since(r.waitingSince)
		}
	}
}

func (r *Recorder) sinkUp() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.waiting {
		if w.Sink {
			return 0
		}
	}
	return 1
}

func (r *Recorder) outageSeconds() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.outages
	if len(r.waiting) > 0 {
		d += time.Since(r.waitingSince)
	}
	return d.Seconds()
}

// Snapshot returns what /api/progress serves.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s Snapshot
	s.Job.Info = r.info
	s.Job.Epoch = r.epoch
	s.Job.Started = r.started
	s.Job.UptimeSeconds = time.Since(r.started).Seconds()
	s.Totals = r.totals
	s.Partitions = make([]Partition, 0, len(r.positions))
	for part, pos := range r.positions {
		s.Partitions = append(s.Partitions, Partition{Partition: part, Next: pos.Next, End: pos.End, Lag: pos.End - pos.Next})
	}
	slices.SortFunc(s.Partitions, func(a, b Partition) int { return cmp.Compare(a.Partition, b.Partition) })
	s.Waiting = make([]Waiting, 0, len(r.waiting))
	for _, w := range r.waiting {
		s.Waiting = append(s.Waiting, w)
	}
	slices.SortFunc(s.Waiting, func(a, b Waiting) int { return cmp.Compare(a.Server, b.Server) })
	s.Batches = slices.Clone(r.history)
	if s.Batches == nil {
		s.Batches = []Record{}
	}
	return s
}

func partLabel(p int32) string { return strconv.FormatInt(int64(p), 10) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
