package benchmarks

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// Workload and settings of the scale-out benchmark (issue #6). Eight
// partitions, so that three processes each get at least two.
const (
	scaleOutPartitions = 8
	scaleOutMaxProcs   = 3
	// Rounds of 1, 2, 3 processes per iteration, interleaved, so that a
	// slow moment of the shared machine hits every N alike; the summary
	// takes the median.
	scaleOutRounds   = 5
	scaleOutInterval = 100 * time.Millisecond
	scaleOutIdle     = time.Second
	scaleOutSession  = 2 * time.Second
	scaleOutTimeout  = 3 * time.Minute // per run, for the last event and for the processes' exit
)

// BenchmarkScaleOut drains the same pre-filled topic (1,000,000 events
// unless MICROBATCH_BENCH_EVENTS says otherwise, 8 partitions, 1,000 keys)
// with 1, 2 and 3 `microbatch run --strategy txn` processes of one fresh
// job each, started together: they join the job's consumer group, split
// the partitions and commit totals and offsets into MariaDB. Per run it
// measures the time from starting the processes until SUM(events) in
// mb_totals reaches the topic's size (polled every 10 ms), the processes'
// CPU time, and each process's group join (start → its first "partitions
// assigned" line); right before each run a bare sarama consumer reads the
// whole topic (consumeAll) as the ceiling. Every run must leave the sink
// exact: each key's events and amount as produced, no dead letters, and
// every partition's stored offset at its end. Each iteration runs 1, 2, 3
// processes in turn, scaleOutRounds times, and the summary reports the
// median of each N, its ratio to N = 1, and the rate once every process
// had its partitions (group formation excluded). Run with -benchtime=1x;
// see README.md. MICROBATCH_BENCH_BINARY runs that microbatch executable
// instead of building ./cmd/microbatch (to compare a change).
func BenchmarkScaleOut(b *testing.B) {
	brokers := []string{testutil.NeedServer(b, testutil.EnvKafka)}
	mysql := testutil.NeedServer(b, testutil.EnvMySQL)
	events := benchEvents(b)
	bin := os.Getenv("MICROBATCH_BENCH_BINARY")
	if bin == "" {
		bin = buildMicrobatch(b)
	}
	w := Workload{Events: events, Keys: benchKeys, Partitions: scaleOutPartitions, Seed: benchSeed, Format: benchFormat(b)}
	topic := fmt.Sprintf("bench-scaleout-%d-p%d-k%d-s%d", w.Events, w.Partitions, w.Keys, w.Seed)
	if w.Format != event.FormatCompact {
		topic += "-" + string(w.Format)
	}
	start := time.Now()
	produced, err := ensureWorkload(context.Background(), w, brokers, topic)
	if err != nil {
		b.Fatal(err)
	}
	if produced {
		fmt.Fprintf(os.Stderr, "scaleout: produced %d events into %s in %v\n", events, topic, time.Since(start).Round(time.Millisecond))
	}
	ends := testutil.EndOffsets(b, brokers, topic)
	want := expectedPerKey(w)
	sink := sinktest.OpenSQL(b, mysql)
	prefix := fmt.Sprintf("scaleout-%d-", time.Now().UnixNano())
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("jobs %s* kept in the sink for inspection", prefix)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, table := range []string{"mb_totals", "mb_offsets", "mb_dead_letters"} {
			_, _ = sink.DB().ExecContext(ctx, `DELETE FROM `+table+` WHERE job LIKE ?`, prefix+"%")
		}
	})
	s := scaleOut{bin: bin, brokers: brokers, mysql: mysql, topic: topic, events: events,
		ends: ends, want: want, sink: sink, logDir: b.TempDir()}

	runs := map[int][]scaleOutRun{}
	b.ResetTimer()
	for i := range b.N {
		for round := range scaleOutRounds {
			for n := 1; n <= scaleOutMaxProcs; n++ {
				rr, err := consumeAll(context.Background(), brokers, topic, DefaultRawSettings)
				if err != nil {
					b.Fatal(err)
				}
				if rr.Records != events {
					b.Fatalf("raw consume read %d records of %s, want %d", rr.Records, topic, events)
				}
				raw := rr.Duration
				job := fmt.Sprintf("%si%d-r%d-n%d", prefix, i, round, n)
				r := s.run(b, job, n)
				r.raw = raw
				runs[n] = append(runs[n], r)
				// To stderr: testing.B keeps only 10 lines of b.Log output,
				// which the summary below needs.
				fmt.Fprintf(os.Stderr, "scaleout: round %d, %s\n", round+1, r.line(events))
			}
		}
	}
	b.StopTimer()

	b.Logf("%d events, %d partitions, %d keys, txn → MariaDB, --interval %s --until-idle %s --session-timeout %s; median of %d rounds:",
		events, w.Partitions, w.Keys, scaleOutInterval, scaleOutIdle, scaleOutSession, len(runs[1]))
	b.Logf("| processes | wall s | ev/s | × 1 process | raw consume ev/s | CPU s | join ms (median, max) | all assigned ms | ev/s once all assigned | × 1 process |")
	b.Logf("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	rate := func(r scaleOutRun) float64 { return float64(r.events) / r.wall.Seconds() }
	settledRate := func(r scaleOutRun) float64 { return r.settledRate }
	var allRaw []float64
	for n := 1; n <= scaleOutMaxProcs; n++ {
		rs := runs[n]
		each := func(f func(scaleOutRun) float64) []float64 {
			var xs []float64
			for _, r := range rs {
				if x := f(r); x > 0 {
					xs = append(xs, x)
				}
			}
			return xs
		}
		// The ratios are paired: N processes against 1 process of the same
		// round, run back to back, so that the machine's drift cancels.
		paired := func(f func(scaleOutRun) float64) []float64 {
			var xs []float64
			for k, r := range rs {
				if x, one := f(r), f(runs[1][k]); x > 0 && one > 0 {
					xs = append(xs, x/one)
				}
			}
			return xs
		}
		raw := each(func(r scaleOutRun) float64 { return float64(r.events) / r.raw.Seconds() })
		allRaw = append(allRaw, raw...)
		ev, ratio := median(each(rate)), median(paired(rate))
		b.Logf("| %d | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f, %.0f | %.0f | %.0f | %.2f |", n,
			median(each(func(r scaleOutRun) float64 { return r.wall.Seconds() })), ev, ratio, median(raw),
			median(each(func(r scaleOutRun) float64 { return r.cpu.Seconds() })),
			median(each(func(r scaleOutRun) float64 { return ms(r.joinMedian()) })),
			median(each(func(r scaleOutRun) float64 { return ms(r.joinMax()) })),
			median(each(func(r scaleOutRun) float64 { return ms(r.settled) })),
			median(each(settledRate)), median(paired(settledRate)))
		b.ReportMetric(ev, fmt.Sprintf("ev/s_%dproc", n))
		if n > 1 {
			b.ReportMetric(ratio, fmt.Sprintf("ratio_%dproc", n))
		}
	}
	b.ReportMetric(median(allRaw), "raw_ev/s")
}

// median of xs (the upper one of an even count); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// scaleOut is what every run of the benchmark shares.
type scaleOut struct {
	bin     string
	brokers []string
	mysql   string
	topic   string
	events  int64
	ends    map[int32]int64
	want    map[string]event.Expected
	sink    *sqlsink.Writer
	logDir  string
}

// countSample is the sink's visible event count at a time.
type countSample struct {
	at time.Time
	n  int64
}

// scaleOutRun is one run of n processes.
type scaleOutRun struct {
	n       int
	events  int64
	wall    time.Duration   // start of the processes → the last event visible in the sink
	raw     time.Duration   // consumeAll of the same topic, right before
	cpu     time.Duration   // user + system time of all processes
	join    []time.Duration // per process: its start → its first "partitions assigned"
	settled time.Duration   // start → every process assigned in one generation (0: never)
	// From settled to the last event visible (0: settled after that, or
	// never).
	settledRate float64
	settledLeft int64    // events not yet visible at settled
	gens        int      // generations the processes saw
	records     []int64  // per process, from "run finished"
	assigned    []string // per process, its first assignment
}

func (r scaleOutRun) joinMedian() time.Duration {
	j := slices.Clone(r.join)
	slices.Sort(j)
	return j[len(j)/2]
}

func (r scaleOutRun) joinMax() time.Duration { return slices.Max(r.join) }

func (r scaleOutRun) line(events int64) string {
	var joins []string
	for _, j := range r.join {
		joins = append(joins, strconv.FormatInt(j.Milliseconds(), 10))
	}
	var recs []string
	for _, n := range r.records {
		recs = append(recs, strconv.FormatInt(n, 10))
	}
	after := "after the last event"
	if r.settledRate > 0 {
		after = fmt.Sprintf("%d events still to go, then %.0f ev/s", r.settledLeft, r.settledRate)
	}
	return fmt.Sprintf("%d process(es): last event visible after %v: %.0f ev/s (raw consume %v, %.0f ev/s: %.2f of raw); "+
		"CPU %v (%.2f µs/event); join %s ms; all assigned at %d ms (%s), %d generation(s); first assignments %s; records per process %s; sink exact",
		r.n, r.wall.Round(time.Millisecond), float64(events)/r.wall.Seconds(), r.raw.Round(time.Millisecond),
		float64(events)/r.raw.Seconds(), r.raw.Seconds()/r.wall.Seconds(),
		r.cpu.Round(time.Millisecond), r.cpu.Seconds()/float64(events)*1e6,
		strings.Join(joins, "/"), r.settled.Milliseconds(), after, r.gens, strings.Join(r.assigned, " "), strings.Join(recs, "/"))
}

// run starts n processes of job together and waits until the last event
// is visible and every process has exited; it fails b unless all exited 0
// and the sink is exact.
func (s scaleOut) run(b *testing.B, job string, n int) scaleOutRun {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scaleOutTimeout)
	defer cancel()
	// The poller is running before the first process starts.
	type seen struct {
		at      time.Time
		err     error
		samples []countSample
	}
	visible := make(chan seen, 1)
	count := sqlCounter(s.sink, job)
	go func() {
		var samples []countSample
		for {
			got, err := count(ctx)
			now := time.Now()
			samples = append(samples, countSample{now, got})
			if err != nil || got >= s.events {
				visible <- seen{now, err, samples}
				return
			}
			select {
			case <-ctx.Done():
				visible <- seen{err: fmt.Errorf("%d of %d events visible: %w", got, s.events, ctx.Err())}
				return
			case <-time.After(pollEvery):
			}
		}
	}()
	args := []string{"run", "--strategy", "txn", "--brokers", strings.Join(s.brokers, ","), "--topic", s.topic,
		"--job", job, "--sink", s.mysql, "--interval", scaleOutInterval.String(),
		"--until-idle", scaleOutIdle.String(), "--session-timeout", scaleOutSession.String()}
	children := make([]*child, 0, n)
	defer func() {
		for _, c := range children {
			c.kill() // no-op for a process that exited
		}
	}()
	start := time.Now()
	for i := range n {
		c, err := startChild(s.bin, args, nil, filepath.Join(s.logDir, fmt.Sprintf("%s-%d.log", job, i)), 0)
		if err != nil {
			b.Fatal(err)
		}
		children = append(children, c)
	}
	v := <-visible
	if v.err != nil {
		b.Fatalf("job %s with %d process(es): %v (logs %s)", job, n, v.err, s.logDir)
	}
	r := scaleOutRun{n: n, events: s.events, wall: v.at.Sub(start)}
	type proc struct {
		start   time.Time
		assigns []assignLine
	}
	procs := make([]proc, n)
	for i, c := range children {
		ps, err := c.wait(scaleOutTimeout)
		if err != nil {
			b.Fatalf("job %s, process %d: %v", job, i, err)
		}
		if !ps.Success() {
			b.Fatalf("job %s, process %d: %v (log %s)", job, i, ps, c.logPath)
		}
		r.cpu += usageOf(ps).CPU
		lg, err := readScaleOutLog(c.logPath)
		if err != nil {
			b.Fatal(err)
		}
		if len(lg.assigns) == 0 {
			b.Fatalf("job %s, process %d: no partitions assigned line (log %s)", job, i, c.logPath)
		}
		procs[i] = proc{start: c.start, assigns: lg.assigns}
		r.join = append(r.join, lg.assigns[0].at.Sub(c.start))
		r.assigned = append(r.assigned, lg.assigns[0].parts)
		r.records = append(r.records, lg.finished)
	}
	// Settled: the first generation in which every process was assigned
	// partitions, at its last process's line.
	byGen := map[int][]time.Time{}
	for _, p := range procs {
		for _, a := range p.assigns {
			byGen[a.generation] = append(byGen[a.generation], a.at)
		}
	}
	r.gens = len(byGen)
	for _, g := range slices.Sorted(maps.Keys(byGen)) {
		if len(byGen[g]) == n {
			r.settled = slices.MaxFunc(byGen[g], time.Time.Compare).Sub(start)
			break
		}
	}
	// The rate once every process had its partitions: what was still
	// invisible then, over the rest of the wall time.
	if r.settled > 0 && r.settled < r.wall {
		var before int64
		for _, x := range v.samples {
			if x.at.Sub(start) <= r.settled {
				before = x.n
			}
		}
		r.settledRate = float64(s.events-before) / (r.wall - r.settled).Seconds()
		r.settledLeft = s.events - before
	}
	s.check(b, job)
	return r
}

// check fails b unless job's totals are exactly the workload's, per key,
// with no dead letters and every partition's offset at its end.
func (s scaleOut) check(b *testing.B, job string) {
	b.Helper()
	ctx := context.Background()
	rows, err := s.sink.DB().QueryContext(ctx, `SELECT k, events, amount FROM mb_totals WHERE job = ?`, job)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	got := map[string]event.Expected{}
	for rows.Next() {
		var k string
		var e event.Expected
		if err := rows.Scan(&k, &e.Events, &e.Amount); err != nil {
			b.Fatal(err)
		}
		got[k] = e
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	var wrong []string
	for k, e := range s.want {
		if got[k] != e {
			wrong = append(wrong, fmt.Sprintf("%s: %+v, want %+v", k, got[k], e))
		}
	}
	for k := range got {
		if _, ok := s.want[k]; !ok {
			wrong = append(wrong, "unexpected key "+k)
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		b.Fatalf("job %s: %d key(s) not exact, e.g. %s", job, len(wrong), strings.Join(wrong[:min(5, len(wrong))], "; "))
	}
	var dl int64
	if err := s.sink.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM mb_dead_letters WHERE job = ?`, job).Scan(&dl); err != nil {
		b.Fatal(err)
	}
	if dl != 0 {
		b.Fatalf("job %s: %d dead letters, want 0", job, dl)
	}
	stored := sinktest.StoredOffsets(b, s.sink.DB(), job, s.topic)
	for p, end := range s.ends {
		if stored[p] != end {
			b.Fatalf("job %s: partition %d stored offset %d, want its end %d (all: %v)", job, p, stored[p], end, stored)
		}
	}
}

// buildMicrobatch builds ./cmd/microbatch into a temporary directory.
func buildMicrobatch(b *testing.B) string {
	b.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		b.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(b.TempDir(), "microbatch")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/microbatch")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/microbatch: %v\n%s", err, out)
	}
	return bin
}

// assignLine is one "partitions assigned" line, at the time slog stamped
// it (milliseconds).
type assignLine struct {
	at         time.Time
	generation int
	parts      string
}

type scaleOutLog struct {
	assigns  []assignLine
	finished int64 // records of "run finished"
}

var (
	assignTimeRE = regexp.MustCompile(`^time=(\S+) .*msg="partitions assigned" .*\bgeneration=(\d+) .*\bpartitions="?(\[[0-9 ]*\])"?`)
	finishedRE   = regexp.MustCompile(`msg="run finished" .*\brecords=(\d+)`)
)

// readScaleOutLog reads what the benchmark needs from a process's log.
func readScaleOutLog(path string) (scaleOutLog, error) {
	var l scaleOutLog
	f, err := os.Open(path)
	if err != nil {
		return l, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := assignTimeRE.FindStringSubmatch(line); m != nil {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				return l, fmt.Errorf("%s: time of %q: %w", path, line, err)
			}
			gen, _ := strconv.Atoi(m[2])
			l.assigns = append(l.assigns, assignLine{at: at, generation: gen, parts: m[3]})
		} else if m := finishedRE.FindStringSubmatch(line); m != nil {
			l.finished, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	return l, sc.Err()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
