package batch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/microbatch/microbatch/record"
)

// The driver tests run inside synctest bubbles: time is virtual (it moves
// only when every goroutine of the bubble is blocked), so intervals and
// idleness are exact and nothing depends on the speed of the machine, and
// synctest.Test fails if a goroutine started by Run is left blocked.

// coverCase is a log and a stored position for TestDriverCoversEverythingOnce.
type coverCase struct {
	name        string
	start, next map[int32]int64
	end         map[int32]int64
	grow        map[int32]int64 // added to the end on each of the first growFor Bounds calls
	growFor     int
	maxRecords  int64
	parallelism int
	lastBatch   int64
}

var coverCases = []coverCase{
	{
		name: "static backlog, capped", maxRecords: 7,
		start: map[int32]int64{0: 0, 1: 0, 2: 0},
		next:  map[int32]int64{0: 0, 1: 0, 2: 0},
		end:   map[int32]int64{0: 50, 1: 3, 2: 0},
	},
	{
		name: "growing log, capped", maxRecords: 10, growFor: 12, parallelism: 2, lastBatch: 41,
		start: map[int32]int64{0: 0, 1: 100, 2: 5, 3: 0},
		next:  map[int32]int64{0: 0, 1: 100, 2: 20, 3: 0},
		end:   map[int32]int64{0: 0, 1: 150, 2: 20, 3: 0},
		grow:  map[int32]int64{0: 13, 1: 1, 2: 4, 3: 0},
	},
	{
		name: "growing log, uncapped", growFor: 5,
		start: map[int32]int64{0: 0, 1: 0},
		next:  map[int32]int64{0: 0, 1: 0},
		end:   map[int32]int64{0: 0, 1: 10},
		grow:  map[int32]int64{0: 100, 1: 3},
	},
	{
		name: "cap of one record", maxRecords: 1, parallelism: 1,
		start: map[int32]int64{0: 0, 1: 0},
		next:  map[int32]int64{0: 2, 1: 0},
		end:   map[int32]int64{0: 9, 1: 4},
	},
}

// coverRun is what a run of a coverCase left: its summary, the tasks it
// ran, what OnStart and OnProgress saw, and the log's final ends.
type coverRun struct {
	sum         Summary
	calls       []taskCall
	starts      []Info
	startRanges [][]record.Range
	progress    []Progress
	final       map[int32]int64
}

func TestDriverCoversEverythingOnce(t *testing.T) {
	for _, tc := range coverCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				run := runCoverCase(t, tc)
				checkBatchesMatchTasks(t, tc, run)
				checkCoverage(t, tc, run)
			})
		})
	}
}

// runCoverCase runs a driver over tc's (growing) log until it is idle and
// checks the run ended cleanly: no error, no task left running, no read
// outside the source's bounds.
func runCoverCase(t *testing.T, tc coverCase) coverRun {
	t.Helper()
	src := newFakeSource(tc.start, tc.end)
	src.grow = func(call int, end map[int32]int64) {
		if call <= tc.growFor {
			for p, n := range tc.grow {
				end[p] += n
			}
		}
	}
	var log taskLog
	var run coverRun
	d := &Driver{
		Source: src, Task: readingTask(&log, src, 3*time.Millisecond), Topic: "events",
		Next: maps.Clone(tc.next), LastBatch: tc.lastBatch, Epoch: 7,
		Interval: 50 * time.Millisecond, MaxRecords: tc.maxRecords, Parallelism: tc.parallelism,
		UntilIdle: time.Second,
		OnStart: func(b Info, rs []record.Range) {
			run.starts = append(run.starts, b)
			run.startRanges = append(run.startRanges, slices.Clone(rs))
		},
		OnProgress: func(p Progress) { run.progress = append(run.progress, p) },
	}
	sum, err := d.Run(t.Context())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := log.running.Load(); n != 0 {
		t.Fatalf("%d tasks still running after Run returned", n)
	}
	if src.badRds.Load() != 0 {
		t.Fatalf("tasks read ranges outside the source's bounds")
	}
	run.sum, run.calls, run.final = sum, log.calls(), src.ends()
	return run
}

// checkBatchesMatchTasks: batches are numbered on from LastBatch, carry
// the epoch, OnStart saw exactly the ranges the tasks got, and each
// batch's progress report counts its ranges.
func checkBatchesMatchTasks(t *testing.T, tc coverCase, run coverRun) {
	t.Helper()
	starts, startRanges, progress := run.starts, run.startRanges, run.progress
	if int64(len(starts)) != run.sum.Batches || len(progress) != len(starts) {
		t.Fatalf("%d OnStart, %d OnProgress, Summary.Batches %d", len(starts), len(progress), run.sum.Batches)
	}
	byBatch := make(map[int64][]record.Range)
	for _, c := range run.calls {
		if c.batch.Epoch != 7 {
			t.Errorf("task got epoch %d, want 7", c.batch.Epoch)
		}
		byBatch[c.batch.ID] = append(byBatch[c.batch.ID], c.r)
	}
	for i, b := range starts {
		if b.ID != tc.lastBatch+int64(i)+1 {
			t.Fatalf("batch %d has id %d, want %d", i, b.ID, tc.lastBatch+int64(i)+1)
		}
		got := byBatch[b.ID]
		slices.SortFunc(got, func(x, y record.Range) int { return int(x.Partition - y.Partition) })
		if !slices.Equal(got, startRanges[i]) {
			t.Errorf("batch %d: tasks got %v, OnStart %v", b.ID, got, startRanges[i])
		}
		if len(startRanges[i]) == 0 {
			t.Errorf("batch %d has no ranges", b.ID)
		}
		p := progress[i]
		var offs int64
		for _, r := range startRanges[i] {
			offs += r.Len()
		}
		if p.BatchID != b.ID || p.Partitions != len(startRanges[i]) || p.Offsets != offs || p.Records != offs {
			t.Errorf("progress %+v for batch %d with ranges %v", p, b.ID, startRanges[i])
		}
	}
	if len(run.calls) != len(byBatchRanges(startRanges)) {
		t.Errorf("%d tasks ran, %d ranges were planned", len(run.calls), len(byBatchRanges(startRanges)))
	}
}

// checkCoverage: per partition, the batches' ranges are contiguous, start
// at the stored offset, end at the log's final end, and each is capped;
// the summary counts every offset once and no lag.
func checkCoverage(t *testing.T, tc coverCase, run coverRun) {
	t.Helper()
	sum, final := run.sum, run.final
	var wantOffsets int64
	for p, n := range tc.next {
		wantOffsets += final[p] - n
	}
	perPart := make(map[int32][]record.Range)
	for _, rs := range run.startRanges {
		for _, r := range rs {
			perPart[r.Partition] = append(perPart[r.Partition], r)
		}
	}
	for p, n := range tc.next {
		at := n
		for _, r := range perPart[p] {
			if r.From != at {
				t.Fatalf("partition %d: range %s does not start where the previous ended (%d); all: %v", p, r, at, perPart[p])
			}
			if r.Len() <= 0 || (tc.maxRecords > 0 && r.Len() > tc.maxRecords) {
				t.Fatalf("partition %d: range %s has bad length (cap %d)", p, r, tc.maxRecords)
			}
			at = r.To
		}
		if at != final[p] {
			t.Errorf("partition %d: covered up to %d, log ends at %d", p, at, final[p])
		}
		if sum.Next[p] != final[p] {
			t.Errorf("Summary.Next[%d] = %d, want %d", p, sum.Next[p], final[p])
		}
	}
	if sum.Records != wantOffsets {
		t.Errorf("Summary.Records = %d, want %d", sum.Records, wantOffsets)
	}
	if sum.Lag != 0 {
		t.Errorf("Summary.Lag = %d after draining", sum.Lag)
	}
	if wantOffsets == 0 {
		t.Fatal("test case has nothing to read")
	}
}

func TestDriverParallelism(t *testing.T) {
	tests := []struct {
		parallelism int
		partitions  int
		wantMax     int64
	}{
		{1, 6, 1},
		{2, 6, 2},
		{3, 6, 3},
		{0, 6, 6},  // one per partition
		{10, 4, 4}, // never more than there are ranges
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("parallelism=%d/partitions=%d", tc.parallelism, tc.partitions), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start, end := map[int32]int64{}, map[int32]int64{}
				for p := range int32(tc.partitions) {
					start[p], end[p] = 0, 12
				}
				src := newFakeSource(start, end)
				var log taskLog
				d := &Driver{
					Source: src, Task: readingTask(&log, src, 10*time.Millisecond), Topic: "events",
					Next: maps.Clone(start), Interval: time.Millisecond, MaxRecords: 4,
					Parallelism: tc.parallelism, UntilIdle: 100 * time.Millisecond,
				}
				sum, err := d.Run(t.Context())
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if sum.Batches != 3 {
					t.Errorf("%d batches, want 3 (12 records, 4 per batch)", sum.Batches)
				}
				if n := log.doubleTasks.Load(); n != 0 {
					t.Errorf("a partition had two tasks in flight %d times", n)
				}
				if got := log.maxRunning.Load(); got != tc.wantMax {
					t.Errorf("at most %d tasks ran at once, want %d", got, tc.wantMax)
				}
				if n := log.running.Load(); n != 0 {
					t.Errorf("%d tasks still running after Run returned", n)
				}
			})
		})
	}
}

func TestDriverUntilIdle(t *testing.T) {
	trickle := make([]int, 20)
	for i := range trickle {
		trickle[i] = i + 1
	}
	tests := []struct {
		name      string
		end       int64 // records in the single partition
		arrive    []int // Bounds calls at which one more record has arrived
		untilIdle time.Duration
		interval  time.Duration
	}{
		{"empty topic", 0, nil, time.Second, 100 * time.Millisecond},
		{"backlog then idle", 30, nil, time.Second, 100 * time.Millisecond},
		{"trickle then idle", 0, trickle, 500 * time.Millisecond, 100 * time.Millisecond},
		// Idle gaps shorter than UntilIdle don't add up.
		{"gaps shorter than until-idle", 0, []int{1, 5, 9, 13}, 500 * time.Millisecond, 100 * time.Millisecond},
		{"idle shorter than interval", 5, nil, 10 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := newFakeSource(map[int32]int64{0: 0}, map[int32]int64{0: tc.end})
				var lastData time.Time
				src.grow = func(call int, end map[int32]int64) {
					if slices.Contains(tc.arrive, call) {
						end[0]++
					}
				}
				var log taskLog
				d := &Driver{
					Source: src, Task: readingTask(&log, src, 0), Topic: "events",
					Next: map[int32]int64{0: 0}, Interval: tc.interval, MaxRecords: 10, UntilIdle: tc.untilIdle,
					OnStart: func(Info, []record.Range) { lastData = time.Now() },
				}
				began := time.Now()
				sum, err := d.Run(t.Context())
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if want := tc.end + int64(len(tc.arrive)); sum.Next[0] != want {
					t.Errorf("Summary.Next[0] = %d, want %d", sum.Next[0], want)
				}
				if lastData.IsZero() {
					lastData = began
				}
				idle := time.Since(lastData)
				if idle < tc.untilIdle {
					t.Errorf("Run returned after %v of idleness, want at least %v", idle, tc.untilIdle)
				}
				if idle > tc.untilIdle+2*tc.interval {
					t.Errorf("Run returned after %v of idleness, want about %v", idle, tc.untilIdle)
				}
				if sum.Elapsed != time.Since(began) {
					t.Errorf("Summary.Elapsed = %v, virtual time passed %v", sum.Elapsed, time.Since(began))
				}
			})
		})
	}
}

// TestDriverRunsUntilStoppedWithoutUntilIdle: UntilIdle 0 means "never stop
// for idleness"; only the context ends Run.
func TestDriverRunsUntilStoppedWithoutUntilIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newFakeSource(map[int32]int64{0: 0}, map[int32]int64{0: 0})
		var log taskLog
		d := &Driver{Source: src, Task: readingTask(&log, src, 0), Topic: "events",
			Next: map[int32]int64{0: 0}, Interval: time.Second}
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		began := time.Now()
		sum, err := d.Run(ctx)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if el := time.Since(began); el != time.Hour {
			t.Errorf("Run returned after %v, want when the context ended (1h)", el)
		}
		if sum.Batches != 0 {
			t.Errorf("Summary.Batches = %d on an empty topic", sum.Batches)
		}
		// One Bounds call per interval, not a busy loop.
		if n := src.boundsCalls(); n < 3000 || n > 3601 {
			t.Errorf("Bounds called %d times in 1h at a 1s interval", n)
		}
	})
}

// TestDriverOverrunStartsNextBatchAtOnce: a batch shorter than the interval
// is followed by a wait for the rest of it; a batch that overran is followed
// at once by the next, with no wait in between.
func TestDriverOverrunStartsNextBatchAtOnce(t *testing.T) {
	const interval = 100 * time.Millisecond
	tests := []struct {
		name  string
		works []time.Duration // task time of batches 1..3
		want  []string
	}{
		{
			name:  "within interval",
			works: []time.Duration{30 * time.Millisecond, 99 * time.Millisecond, 0},
			want: []string{"batch 1", "wait 70ms", "batch 2", "wait 1ms", "batch 3", "wait 100ms",
				"idle", "wait 100ms", "idle", "wait 100ms", "idle"},
		},
		{
			name:  "overruns",
			works: []time.Duration{250 * time.Millisecond, 100 * time.Millisecond, 30 * time.Millisecond},
			want:  []string{"batch 1", "batch 2", "batch 3", "wait 70ms", "idle", "wait 100ms", "idle", "wait 100ms", "idle"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &manualClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
			src := newFakeSource(map[int32]int64{0: 0}, map[int32]int64{0: 30})
			task := func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
				clock.log(fmt.Sprintf("batch %d", b.ID))
				clock.advance(tc.works[b.ID-1])
				return TaskResult{Records: r.Len()}, nil
			}
			var progress []Progress
			calls := 0
			src.grow = func(int, map[int32]int64) {
				calls++
				if calls > 3 {
					clock.log("idle")
				}
			}
			d := &Driver{
				Source: src, Task: task, Topic: "events", Next: map[int32]int64{0: 0},
				Interval: interval, MaxRecords: 10, UntilIdle: 150 * time.Millisecond, Clock: clock,
				OnProgress: func(p Progress) { progress = append(progress, p) },
			}
			sum, err := d.Run(t.Context())
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !slices.Equal(clock.events, tc.want) {
				t.Fatalf("events:\n got %q\nwant %q", clock.events, tc.want)
			}
			if len(progress) != 3 {
				t.Fatalf("%d progress reports, want 3", len(progress))
			}
			var total time.Duration
			for i, p := range progress {
				total += tc.works[i]
				if p.Duration != tc.works[i] {
					t.Errorf("batch %d Duration = %v, want %v (by the driver's clock)", i+1, p.Duration, tc.works[i])
				}
				if want := int64(20 - 10*i); p.Lag != want {
					t.Errorf("batch %d Lag = %d, want %d", i+1, p.Lag, want)
				}
				if tc.works[i] > 0 {
					if want := 10 / tc.works[i].Seconds(); p.RecordsPerSec != want {
						t.Errorf("batch %d RecordsPerSec = %v, want %v", i+1, p.RecordsPerSec, want)
					}
				}
			}
			if sum.Elapsed < total {
				t.Errorf("Summary.Elapsed = %v, less than the batches' %v", sum.Elapsed, total)
			}
		})
	}
}

// TestDriverUntilIdleWaitsForTheJob: with JobLag, a run whose own
// partitions are idle ends only once the whole job is caught up (other
// partitions, held by other processes, lag for a while), stays so for
// UntilIdle, and reports the job's lag.
func TestDriverUntilIdleWaitsForTheJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Partition 0 is ours and caught up; partition 1 is someone else's
		// and catches up after 10 s.
		src := newFakeSource(map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 0, 1: 500})
		began := time.Now()
		var asked int
		jobLag := func(_ context.Context, b map[int32]Bounds) (int64, error) {
			asked++
			if len(b) != 2 {
				t.Errorf("JobLag got bounds of %d partitions, want the whole topic's", len(b))
			}
			if time.Since(began) < 10*time.Second {
				return b[1].End - 100, nil
			}
			return 0, nil
		}
		var log taskLog
		d := &Driver{Source: src, Task: readingTask(&log, src, 0), Topic: "events",
			Next: map[int32]int64{0: 0}, Interval: time.Second, UntilIdle: 2 * time.Second, JobLag: jobLag}
		sum, err := d.Run(t.Context())
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if el := time.Since(began); el < 12*time.Second || el > 13*time.Second {
			t.Errorf("Run returned after %v, want once the job was caught up (10s) plus until-idle (2s)", el)
		}
		if sum.Lag != 0 || asked < 10 {
			t.Errorf("Summary.Lag = %d after %d JobLag calls, want 0 after one per interval", sum.Lag, asked)
		}

		// Stopped while the job lags: the summary says how much.
		d.JobLag = func(context.Context, map[int32]Bounds) (int64, error) { return 400, nil }
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if sum, err = d.Run(ctx); err != nil || sum.Lag != 400 {
			t.Errorf("stopped run: lag %d, err %v; want 400, nil", sum.Lag, err)
		}

		// A job lag that can't be read is an error, not "caught up".
		d.JobLag = func(context.Context, map[int32]Bounds) (int64, error) { return 0, errors.New("sink down") }
		if _, err = d.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "sink down") {
			t.Errorf("Run with a failing JobLag: %v, want its error", err)
		}
	})
}
