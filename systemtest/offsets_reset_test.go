package systemtest

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
)

// TestOffsets: a job run to idle, `offsets show` (lag 0), `offsets reset`
// to earliest (a second run counts everything again: exactly 2×), to a
// time and to latest, and a reset refused while a run is in the group —
// for SQLite (txn, on the dev broker) and Redis (idempotent, on Apache
// Kafka when MICROBATCH_TEST_KAFKA is set).
func TestOffsets(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		b := StartBroker(t)
		testOffsets(t, b.Addr, "sqlite://"+t.TempDir()+"/offsets.db", "txn")
	})
	t.Run("at-least-once", func(t *testing.T) {
		// The controls keep their offsets in the Kafka consumer group.
		t.Parallel()
		b := StartBroker(t)
		testOffsets(t, b.Addr, "sqlite://"+t.TempDir()+"/offsets.db", "at-least-once")
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		sink := testutil.NeedServer(t, testutil.EnvRedis)
		brokers := os.Getenv(testutil.EnvKafka)
		if brokers == "" || testing.Short() {
			brokers = StartBroker(t).Addr
		}
		testOffsets(t, brokers, sink, "idempotent")
	})
}

type showJSON struct {
	Partitions []struct {
		Partition  int32  `json:"partition"`
		NextOffset *int64 `json:"next_offset"`
		Epoch      *int64 `json:"epoch"`
		LogEnd     int64  `json:"log_end"`
		Lag        *int64 `json:"lag"`
	} `json:"partitions"`
	Lag int64 `json:"lag"`
}

func testOffsets(t *testing.T, brokers, sink, strategy string) {
	topic, job := UniqueName(t, "t"), UniqueName(t, "j")
	o := &offsetsJob{t: t, dir: t.TempDir(), sink: sink, strategy: strategy, job: job,
		common: []string{"--brokers", brokers, "--topic", topic, "--job", job, "--sink", sink, "--strategy", strategy}}

	events, amount := Produce(t, brokers, topic, 7, 0, 2000)
	o.runIdle()
	ends := o.checkCaughtUp(events)

	// Rewind: the next run reads everything again, so the totals double.
	out := o.mustOK("offsets", "reset", "--to", "earliest")
	for p, end := range ends {
		if line := fmt.Sprintf("  %d: %d → 0\n", p, end); !strings.Contains(out, line) {
			t.Fatalf("offsets reset --to earliest printed:\n%s\nwant the line %q", out, line)
		}
	}
	if s := o.show(); s.Lag != events {
		t.Fatalf("lag after reset = %d, want %d", s.Lag, events)
	}
	o.runIdle()
	o.verify(2*events, 2*amount)

	// A time: records produced after it are where the partitions go.
	time.Sleep(20 * time.Millisecond)
	mark := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)
	more, moreAmount := Produce(t, brokers, topic, 7, 2000, 500)
	o.mustOK("offsets", "reset", "--to", mark.Format(time.RFC3339Nano))
	s := o.show()
	for i, p := range s.Partitions {
		if *p.NextOffset != ends[i] {
			t.Fatalf("after reset --to %s, partition %d is at %d, want %d (its end before the second produce)", mark.Format(time.RFC3339Nano), i, *p.NextOffset, ends[i])
		}
	}
	if s.Lag != more {
		t.Fatalf("lag after reset to the time = %d, want %d", s.Lag, more)
	}
	o.runIdle()
	o.verify(2*events+more, 2*amount+moreAmount)

	o.resetPartitions()
	o.resetRefusedWhileRunning()
}

// offsetsJob is testOffsets' job: the commands it runs on it.
type offsetsJob struct {
	t                   *testing.T
	dir                 string
	sink, strategy, job string
	common              []string // the flags that name the job
}

func (o *offsetsJob) cmd(args ...string) Result {
	o.t.Helper()
	return Run(o.t, o.dir, nil, time.Minute, append(args, o.common...)...)
}

func (o *offsetsJob) mustOK(args ...string) string {
	o.t.Helper()
	r := o.cmd(args...)
	if r.Code != 0 {
		o.t.Fatalf("microbatch %s: %s", strings.Join(args, " "), r)
	}
	return r.Stdout
}

func (o *offsetsJob) show() showJSON {
	o.t.Helper()
	var s showJSON
	if err := json.Unmarshal([]byte(o.mustOK("offsets", "show", "--json")), &s); err != nil {
		o.t.Fatalf("offsets show --json: %v", err)
	}
	if len(s.Partitions) != 4 {
		o.t.Fatalf("offsets show: %d partitions, want 4", len(s.Partitions))
	}
	return s
}

func (o *offsetsJob) runIdle() {
	o.t.Helper()
	o.mustOK("run", "--interval", "200ms", "--until-idle", "1s")
}

func (o *offsetsJob) verify(events, amount int64) {
	o.t.Helper()
	args := []string{"verify", "--job", o.job, "--sink", o.sink, "--strategy", o.strategy,
		"--expect-events", fmt.Sprint(events), "--expect-amount", fmt.Sprint(amount)}
	if r := Run(o.t, o.dir, nil, time.Minute, args...); r.Code != 0 {
		o.t.Fatalf("microbatch %s: %s", strings.Join(args, " "), r)
	}
}

// checkCaughtUp checks what offsets show says after a run to idle over
// all events: every partition at its log end, lag 0. It returns the log
// ends.
func (o *offsetsJob) checkCaughtUp(events int64) (ends []int64) {
	t := o.t
	t.Helper()
	s := o.show()
	var sum int64
	for _, p := range s.Partitions {
		// Group offsets (the controls) have no epoch of ours.
		if p.NextOffset == nil || *p.NextOffset != p.LogEnd || p.Lag == nil || *p.Lag != 0 || (p.Epoch == nil) != (o.strategy == "at-least-once") {
			t.Fatalf("after the run, partition %+v: want next offset = log end, lag 0, an epoch (but for group offsets)", p)
		}
		ends = append(ends, p.LogEnd)
		sum += p.LogEnd
	}
	if s.Lag != 0 || sum != events {
		t.Fatalf("offsets show: lag %d, log ends sum to %d; want 0 and %d", s.Lag, sum, events)
	}
	table := o.mustOK("offsets", "show")
	if !strings.Contains(table, "next offset") || !strings.Contains(table, "total lag 0") {
		t.Fatalf("offsets show printed:\n%s", table)
	}
	return ends
}

// resetPartitions resets to latest on one partition and to an offset on
// another, and refuses an offset past the end.
func (o *offsetsJob) resetPartitions() {
	t := o.t
	t.Helper()
	o.mustOK("offsets", "reset", "--to", "earliest", "--partitions", "1,2")
	out := o.mustOK("offsets", "reset", "--to", "latest", "--partitions", "1")
	if !strings.Contains(out, "  1: 0 → ") || strings.Contains(out, "  2: ") {
		t.Fatalf("offsets reset --to latest --partitions 1 printed:\n%s", out)
	}
	o.mustOK("offsets", "reset", "--to", "3", "--partitions", "2")
	s := o.show()
	if p := s.Partitions[1]; *p.Lag != 0 {
		t.Fatalf("partition 1 after reset to latest: lag %d, want 0", *p.Lag)
	}
	if p := s.Partitions[2]; *p.NextOffset != 3 {
		t.Fatalf("partition 2 after reset to offset 3: at %d", *p.NextOffset)
	}
	if r := o.cmd("offsets", "reset", "--to", "99999999"); r.Code != 2 || !strings.Contains(r.Stderr, "outside partition") {
		t.Fatalf("reset to an offset past the end: %s\nwant exit 2 naming the partition's log", r)
	}
}

// resetRefusedWhileRunning: a reset is refused while a run is in the
// group; nothing changes.
func (o *offsetsJob) resetRefusedWhileRunning() {
	t := o.t
	t.Helper()
	p := startGroupProc(t, "run", o.dir, Env(), append([]string{"run", "--interval", "200ms"}, o.common...))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.text(), "job started") {
		p.requireRunning(t)
		if time.Now().After(deadline) {
			t.Fatalf("run did not start within 30s:\n%s", p.text())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Let it catch up, so that its own progress does not change the
	// positions compared below.
	for o.show().Lag != 0 {
		p.requireRunning(t)
		if time.Now().After(deadline) {
			t.Fatalf("run did not catch up within 30s:\n%s", p.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := o.show()
	r := o.cmd("offsets", "reset", "--to", "earliest")
	if r.Code == 0 || !strings.Contains(r.Stderr, "live members: microbatch-"+o.job+" (member ") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
		t.Fatalf("reset while running: %s\nwant a non-zero exit and one line naming the live member", r)
	}
	if after := o.show(); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused reset changed the positions: %+v, before %+v", after, before)
	}
	p.signal(t, syscall.SIGTERM)
	if st := p.exit(t, 30*time.Second); st.ExitCode() != 0 {
		t.Fatalf("run ended %v:\n%s", st, p.text())
	}
}
