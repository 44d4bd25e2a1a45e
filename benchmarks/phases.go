package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies"
)

// clean drains the pre-produced workload with a fresh job and measures
// throughput, CPU time and peak RSS; the sink must then hold every event
// exactly once.
func (b *bench) clean(s spec, row *Row) error {
	w := b.o.Workload
	job := b.job(s, "tp")
	sink := b.sinkFor(s, job)
	b.prog.printf("%s: clean run, draining %s events into %s", s.name, group(w.Events), row.Sink)
	c, err := startChild(b.o.Binary, b.runArgs(s, b.input, job, "--until-idle", "1s"), nil, b.logPath(job, "run"), w.Events)
	if err != nil {
		return err
	}
	if s.sink == "kafka" {
		b.topics = append(b.topics, job+"-out")
	}
	// Progress while it runs.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-c.exited():
				return
			case <-t.C:
				l := c.snapshot()
				b.prog.printf("%s: clean run, %s of %s events committed", s.name, group(l.records), group(w.Events))
			}
		}
	}()
	timeout := 10*time.Minute + time.Duration(float64(w.Events)/10_000*float64(time.Second))
	ps, err := c.wait(timeout)
	if err != nil {
		return err
	}
	l := c.snapshot()
	if ps.ExitCode() != 0 {
		return fmt.Errorf("run exited with %v (log %s)", ps, c.logPath)
	}
	if l.reachedAt.IsZero() {
		return fmt.Errorf("the run's commits held %d of %d events (log %s)", l.records, w.Events, c.logPath)
	}
	u := c.usage()
	cl := &row.Clean
	cl.Events = w.Events
	cl.Seconds = l.reachedAt.Sub(c.start).Seconds()
	cl.WallSeconds = c.end.Sub(c.start).Seconds()
	cl.EventsPerSec = float64(w.Events) / cl.Seconds
	cl.CPUSeconds = u.CPU.Seconds()
	cl.PeakRSS = u.PeakRSS
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	got, _, err := strategies.ReadTotals(ctx, sink, job)
	if err != nil {
		return fmt.Errorf("reading the sink: %w", err)
	}
	want := expectedOf(w, w.Events)
	cl.Exact = got.Events == want.Events && got.AmountIs(want.Amount)
	b.prog.printf("%s: clean run: %s events/s (%.2fs to the last commit), %.1f CPU s, peak RSS %d MiB", s.name,
		group(int64(cl.EventsPerSec)), cl.Seconds, cl.CPUSeconds, cl.PeakRSS>>20)
	if !cl.Exact {
		return fmt.Errorf("after a run without faults the sink holds %d events (amount %d), want %d (%d)", got.Events, got.Amount, want.Events, want.Amount)
	}
	return nil
}

// latency runs a fresh job on an empty topic, produces at a steady rate
// and measures when each event becomes visible in the sink.
func (b *bench) latency(s spec, row *Row) error {
	o := b.o
	job := b.job(s, "lat")
	topic := job + "-in"
	if err := kafkautil.EnsureTopic(b.brokers, topic, o.Workload.Partitions); err != nil {
		return err
	}
	b.topics = append(b.topics, topic)
	sink := b.sinkFor(s, job)
	if s.sink == "kafka" {
		// The reader below needs the output topic before the job makes it.
		if err := kafkautil.EnsureTopic(b.brokers, job+"-out", o.Workload.Partitions); err != nil {
			return err
		}
		b.topics = append(b.topics, job+"-out")
	}
	total := int64(o.LatencyRate * o.LatencyDuration.Seconds())
	b.prog.printf("%s: latency run, %.0f events/s for %s", s.name, o.LatencyRate, o.LatencyDuration)
	c, err := startChild(o.Binary, b.runArgs(s, topic, job), nil, b.logPath(job, "run"), 0)
	if err != nil {
		return err
	}
	defer c.kill() // no-op once it exited
	deadline := time.Now().Add(time.Minute)
	for c.snapshot().started.IsZero() {
		select {
		case <-c.exited():
			ps, _ := c.wait(time.Minute)
			return fmt.Errorf("run exited with %v before it started (log %s)", ps, c.logPath)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run did not start within a minute (log %s)", c.logPath)
		}
	}
	time.Sleep(500 * time.Millisecond) // past the first (empty) batch or barrier

	ctx, cancel := context.WithTimeout(b.ctx, o.LatencyDuration+time.Minute)
	defer cancel()
	type result struct {
		lat []time.Duration
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var r result
		switch s.sink {
		case "kafka":
			r.lat, r.err = topicLatencies(ctx, b.brokers, job+"-out", total)
		case "file":
			r.lat, r.err = fileLatencies(ctx, strings.TrimPrefix(sink, "file://"), job, total)
		case "redis":
			r.lat, r.err = countLatencies(ctx, redisCounter(b.redis, job), total, o.LatencyRate, func() time.Time { return start })
		default:
			r.lat, r.err = countLatencies(ctx, sqlCounter(b.sqlOf(s), job), total, o.LatencyRate, func() time.Time { return start })
		}
		done <- r
	}()
	_, perr := kafkautil.Produce(ctx, kafkautil.ProduceOptions{Brokers: b.brokers, Topic: topic, Count: total,
		Keys: o.Workload.Keys, Seed: o.Workload.Seed, Format: o.Workload.Format, Rate: o.LatencyRate})
	if perr != nil {
		cancel()
	}
	r := <-done
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	ps, werr := c.wait(time.Minute)
	switch {
	case perr != nil:
		return fmt.Errorf("producing: %w", perr)
	case r.err != nil:
		return fmt.Errorf("%w (log %s)", r.err, c.logPath)
	case werr != nil:
		return fmt.Errorf("stopping the run with SIGTERM: %w", werr)
	case ps.ExitCode() != 0:
		return fmt.Errorf("run exited with %v after SIGTERM (log %s)", ps, c.logPath)
	}
	row.Clean.Latency = percentiles(r.lat)
	p := row.Clean.Latency
	b.prog.printf("%s: latency p50 %.0f ms, p95 %.0f ms, p99 %.0f ms (%d events)", s.name, p.P50, p.P95, p.P99, p.Samples)
	return nil
}

// fault kills runs of a fresh job at random and at each of its crash
// points while input keeps arriving, drains, and judges the sink.
func (b *bench) fault(s spec, row *Row) error {
	o := b.o
	job := b.job(s, "fault")
	topic := job + "-in"
	f := &row.Fault
	f.Points = s.points
	if err := kafkautil.EnsureTopic(b.brokers, topic, o.Workload.Partitions); err != nil {
		return err
	}
	b.topics = append(b.topics, topic)
	if s.sink == "kafka" {
		b.topics = append(b.topics, job+"-out")
	}
	exp, err := kafkautil.Produce(b.ctx, kafkautil.ProduceOptions{Brokers: b.brokers, Topic: topic, Count: o.FaultInitial,
		Keys: o.Workload.Keys, Seed: o.Workload.Seed, Format: o.Workload.Format})
	if err != nil {
		return fmt.Errorf("producing the input: %w", err)
	}
	feed := startFeeder(o.Workload, b.brokers, topic, o.FeedRate, exp.Events, exp.Amount)
	fed := false
	defer func() {
		if !fed {
			_, _, _ = feed.finish()
		}
	}()
	args := b.runArgs(s, topic, job, "--log-level", "debug")
	iv := o.Interval
	var recov []time.Duration
	restart := func(c *child, after bool) {
		if !after {
			return
		}
		if l := c.snapshot(); !l.firstCommit.IsZero() {
			recov = append(recov, l.firstCommit.Sub(c.start))
		} else {
			f.KilledEarly++
		}
	}
	runs := 0
	for i := range max(o.Crashes, 0) {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		delay := killMinDelay + time.Duration(b.rng.Int64N(int64(killSpan(iv))+1))
		align := i%4 != 3 // three of four wait for a batch / checkpoint to open
		runs++
		b.prog.printf("%s: fault run, kill %d/%d after %s%s", s.name, i+1, o.Crashes, delay.Round(time.Millisecond),
			map[bool]string{true: " + the next batch start / checkpoint trigger", false: ""}[align])
		c, err := startChild(o.Binary, args, nil, b.logPath(job, fmt.Sprintf("run%02d-kill", runs)), 0)
		if err != nil {
			return err
		}
		select {
		case <-c.exited():
			ps, _ := c.wait(time.Minute)
			return fmt.Errorf("run exited with %v before it was killed (log %s)", ps, c.logPath)
		case <-time.After(delay):
		}
		if align && c.waitMark(2*iv+time.Second) {
			time.Sleep(time.Duration(b.rng.Int64N(int64(15*time.Millisecond) + 1)))
		}
		ps := c.kill()
		if !killedBySIGKILL(ps) {
			return fmt.Errorf("run ended with %v, not by the bench's SIGKILL (log %s)", ps, c.logPath)
		}
		f.Kills++
		b.prog.finished(b.estKill())
		b.faultDone += b.estKill()
		if c.snapshot().open() {
			f.KillsInside++
		}
		restart(c, i > 0)
	}
	for _, p := range s.points {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		runs++
		b.prog.printf("%s: fault run, crash point %s:2", s.name, p)
		c, err := startChild(o.Binary, args, []string{"MICROBATCH_CRASH_AT=" + p + ":2"}, b.logPath(job, fmt.Sprintf("run%02d-%s", runs, p)), 0)
		if err != nil {
			return err
		}
		ps, err := c.wait(30*time.Second + 10*iv)
		switch {
		case err != nil:
			b.fail(row, "%s fault run: crash point %s:2 was never reached: %v", s.name, p, err)
		case !killedBySIGKILL(ps):
			return fmt.Errorf("run armed with %s:2 ended with %v (log %s)", p, ps, c.logPath)
		default:
			f.PointsReached++
		}
		b.prog.finished(b.estPoint())
		b.faultDone += b.estPoint()
		restart(c, runs > 1)
	}
	events, amount, err := feed.finish()
	fed = true
	if err != nil {
		return err
	}
	f.Produced = events
	b.prog.printf("%s: fault run, drain (%s events produced)", s.name, group(events))
	c, err := startChild(o.Binary, slices.Concat(args, []string{"--until-idle", "1s"}), nil, b.logPath(job, fmt.Sprintf("run%02d-drain", runs+1)), 0)
	if err != nil {
		return err
	}
	ps, err := c.wait(10 * time.Minute)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if ps.ExitCode() != 0 {
		return fmt.Errorf("drain exited with %v (log %s)", ps, c.logPath)
	}
	restart(c, runs > 0)
	f.Recoveries = len(recov)
	if len(recov) > 0 {
		var sum, mx time.Duration
		for _, d := range recov {
			sum += d
			mx = max(mx, d)
		}
		f.MeanRecoveryMs = float64(sum/time.Duration(len(recov))) / float64(time.Millisecond)
		f.MaxRecoveryMs = float64(mx) / float64(time.Millisecond)
	}
	if err := b.verify(s, job, events, amount, f); err != nil {
		return err
	}
	f.Ran = true
	b.prog.printf("%s: fault run: %d kills (%d inside a batch/checkpoint) + %d of %d crash points; %d duplicates, %d losses; %d recoveries, mean %.0f ms; %s",
		s.name, f.Kills, f.KillsInside, f.PointsReached, len(f.Points), f.Duplicates, f.Losses, f.Recoveries, f.MeanRecoveryMs, f.Verdict)
	return nil
}

// Random kills come killMinDelay plus up to killSpan after a run starts,
// so that most runs get past start-up and do some work before they die.
const killMinDelay = 300 * time.Millisecond

func killSpan(interval time.Duration) time.Duration { return max(3*interval, 1500*time.Millisecond) }

var (
	verifyFoundRE = regexp.MustCompile(`(?m)^\s+events\s+(\d+)\s+(\d+)$`)
	verifyDupsRE  = regexp.MustCompile(`(?m)^\s+duplicates\s+(\d+)$`)
	verifyLossRE  = regexp.MustCompile(`(?m)^\s+losses\s+(\d+)$`)
)

// verify runs `microbatch verify` on the job's sink with the strategy's
// promise and reads duplicates, losses and the verdict from its output.
func (b *bench) verify(s spec, job string, events, amount int64, f *Fault) error {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.o.Binary, "verify", "--strategy", string(s.strategy), "--sink", b.sinkFor(s, job), "--job", job,
		"--expect-events", strconv.FormatInt(events, 10), "--expect-amount", strconv.FormatInt(amount, 10))
	cmd.Env = childEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run() // exit 1 when the promise is broken: read on
	text := out.String()
	m, d, l := verifyFoundRE.FindStringSubmatch(text), verifyDupsRE.FindStringSubmatch(text), verifyLossRE.FindStringSubmatch(text)
	if m == nil || d == nil || l == nil {
		return fmt.Errorf("verify printed no comparison (%v): %s %s", cmd.ProcessState, strings.TrimSpace(text), strings.TrimSpace(errb.String()))
	}
	f.Found, _ = strconv.ParseInt(m[1], 10, 64)
	f.Duplicates, _ = strconv.ParseInt(d[1], 10, 64)
	f.Losses, _ = strconv.ParseInt(l[1], 10, 64)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	f.Verdict = strings.TrimSpace(lines[len(lines)-1])
	return nil
}
