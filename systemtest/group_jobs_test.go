package systemtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// TestGroupJobsIsolated runs two jobs on one topic at the same time: each
// is its own consumer group (--group defaults to --job), so each must be
// assigned every partition and count every event, unaffected by the other.
func TestGroupJobsIsolated(t *testing.T) {
	t.Parallel()
	brokers := testutil.NeedServer(t, testutil.EnvKafka)
	sink := testutil.NeedServer(t, testutil.EnvMySQL)
	began := time.Now()
	topic := UniqueName(t, "iso")
	produced, expAmount := produceGroupInput(t, brokers, topic, 0, 40_000)
	logDir := t.TempDir()
	jobs := []string{UniqueName(t, "iso-a"), UniqueName(t, "iso-b")}
	var procs []*groupProc
	for i, job := range jobs {
		args := append(groupArgs(brokers, topic, job, sink, string(strategies.StrategyTxn)), "--until-idle", "2s")
		procs = append(procs, startGroupProc(t, fmt.Sprintf("job-%c", 'a'+i), logDir, Env(), args))
	}
	gs := openGroupSink(t, string(strategies.StrategyTxn), sink)
	for i, p := range procs {
		ps := p.exit(t, 2*time.Minute)
		log := p.text()
		if ps.ExitCode() != 0 {
			t.Fatalf("job %s: run exited %v\n%s", jobs[i], ps, log)
		}
		as := p.assignments()
		if len(as) == 0 {
			t.Fatalf("job %s: no partitions assigned line\n%s", jobs[i], log)
		}
		for _, a := range as {
			if a.group != jobs[i] || !slices.Equal(a.parts, allPartitions()) {
				t.Errorf("job %s: assigned %v in group %q generation %d, want all %d partitions in group %q",
					jobs[i], a.parts, a.group, a.generation, groupPartitions, jobs[i])
			}
		}
		got := checkGroupSink(t, gs, brokers, topic, jobs[i], string(strategies.StrategyTxn), logDir, produced, expAmount)
		t.Logf("job %s: %d sessions, generations %v; sink holds %d events (amount %d), %d keys",
			jobs[i], len(as), generationsOf(as), got.Events, got.Amount, got.Keys)
	}
	t.Logf("two jobs on one topic: %d events (amount %d) each, exact; %s", produced, expAmount, time.Since(began).Round(time.Millisecond))
}
