package systemtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies"
)

// TestKilledDuringJoin: four processes of a job started together, each
// SIGKILLed in the middle of its join (by the after-join crash point: the
// group assigned it partitions, it claimed none), then one
// `run --until-idle 2s` with default flags. The dead members
// linger in the group; the broker may hold the new member's join for a
// whole rebalance timeout. The run must wait it out (never exit on a group
// wait), take over every partition and exit 0 with the job caught up.
func TestKilledDuringJoin(t *testing.T) {
	t.Parallel()
	for _, c := range restartCases() {
		t.Run(c.name, func(t *testing.T) {
			brokers, sink := c.setup(t)
			topic, job := UniqueName(t, "joinkill"), UniqueName(t, "joinkill-job")
			produced, expAmount := produceGroupInput(t, brokers, topic, 0, 40_000)
			dir := t.TempDir()
			args := defaultArgs(brokers, topic, job, sink)
			var procs []*groupProc
			for i := range 4 {
				procs = append(procs, startGroupProc(t, fmt.Sprintf("p%d", i), dir, Env("MICROBATCH_CRASH_AT="+strategies.CrashAfterJoin+":1"), args))
			}
			for _, p := range procs {
				if ps := p.exit(t, time.Minute); !killedBy(ps, syscall.SIGKILL) || len(p.assignments()) != 0 {
					t.Fatalf("%s: ended %v with %d assignments, want killed at %s", p.name, ps, len(p.assignments()), strategies.CrashAfterJoin)
				}
			}
			started := time.Now()
			final := startGroupProc(t, "until-idle", dir, Env(), append(args, "--until-idle", "2s"))
			if ps := final.exit(t, 5*time.Minute); ps.ExitCode() != 0 {
				t.Fatalf("--until-idle run after the kills: %v, want exit 0; log %s:\n%s", ps, final.logPath, tail(final.snapshot(), 40))
			}
			t.Logf("--until-idle run took %s", time.Since(started).Round(time.Millisecond))
			if lag := finishedLag(t, final); lag != 0 {
				t.Errorf("--until-idle reported lag=%d at exit, want 0", lag)
			}
			gs := openGroupSink(t, string(strategies.StrategyTxn), sink)
			checkGroupSink(t, gs, brokers, topic, job, string(strategies.StrategyTxn), dir, produced, expAmount)
		})
	}
}

// stubbornMember joins group as a microbatch client of job (so the job
// accepts it), takes every partition of topic, and then only heartbeats:
// it never rejoins, so a rebalance waits for it — and holds every other
// member's JoinGroup — for its whole rebalance timeout, until the broker
// drops it. Its connection closes with the test.
func stubbornMember(t *testing.T, brokers, group, job, topic string, rebalance time.Duration) {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("microbatch-"+job))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		<-done
		client.Close()
	})
	heartbeating := false
	defer func() {
		if !heartbeating {
			close(done)
		}
	}()
	meta := &sarama.ConsumerGroupMemberMetadata{Version: 1, Topics: []string{topic}}
	join := &sarama.JoinGroupRequest{Version: 5, GroupId: group, SessionTimeout: 2000, RebalanceTimeout: int32(rebalance / time.Millisecond), ProtocolType: "consumer"}
	if err := join.AddGroupProtocolMetadata("sticky", meta); err != nil {
		t.Fatal(err)
	}
	var b *sarama.Broker
	var jr *sarama.JoinGroupResponse
	for tries := 0; ; tries++ {
		// A new group's coordinator may need a moment (Apache Kafka).
		if b, err = client.Coordinator(group); err != nil {
			t.Fatal(err)
		}
		resp, err := b.JoinGroup(join)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case errors.Is(resp.Err, sarama.ErrMemberIdRequired):
			join.MemberId = resp.MemberId
			continue
		case tries < 50 && (errors.Is(resp.Err, sarama.ErrNotCoordinatorForConsumer) ||
			errors.Is(resp.Err, sarama.ErrConsumerCoordinatorNotAvailable) || errors.Is(resp.Err, sarama.ErrOffsetsLoadInProgress)):
			time.Sleep(100 * time.Millisecond)
			_ = client.RefreshCoordinator(group)
			continue
		case !errors.Is(resp.Err, sarama.ErrNoError):
			t.Fatalf("stubborn member's join: %v", resp.Err)
		}
		jr = resp
		break
	}
	parts := make([]int32, groupPartitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	sync := &sarama.SyncGroupRequest{Version: 3, GroupId: group, GenerationId: jr.GenerationId, MemberId: jr.MemberId}
	if err := sync.AddGroupAssignmentMember(jr.MemberId, &sarama.ConsumerGroupMemberAssignment{Topics: map[string][]int32{topic: parts}}); err != nil {
		t.Fatal(err)
	}
	if sr, err := b.SyncGroup(sync); err != nil || !errors.Is(sr.Err, sarama.ErrNoError) {
		t.Fatalf("stubborn member's sync: %v %v", err, sr)
	}
	heartbeating = true
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			// REBALANCE_IN_PROGRESS is ignored: that is the point.
			_, _ = b.Heartbeat(&sarama.HeartbeatRequest{Version: 1, GroupId: group, GenerationId: jr.GenerationId, MemberId: jr.MemberId})
		}
	}()
}

// TestGroupJoinHeldPastReadTimeout: the broker holds the process's
// JoinGroup longer than the group client's read timeout (a member of the
// group never rejoins, so the rebalance waits out its rebalance timeout).
// The process must log the error, rejoin and finish its job — not exit 1
// with "i/o timeout". A stop during such a held join must end the process
// at once, without waiting for the read timeout.
func TestGroupJoinHeldPastReadTimeout(t *testing.T) {
	t.Parallel()
	// Timeouts a user may set: they make the read timeout 8 s instead of
	// 70; the stubborn member holds the join 12 s.
	const hold = 12 * time.Second
	timeouts := []string{"--session-timeout", "1s", "--rebalance-timeout", "3s"}
	for _, c := range restartCases() {
		t.Run(c.name, func(t *testing.T) {
			brokers, sink := c.setup(t)
			topic := UniqueName(t, "held")
			produceGroupInput(t, brokers, topic, 0, 5_000)
			heldJob := func() (job string, args []string) {
				job = UniqueName(t, "held-job")
				stubbornMember(t, brokers, job, job, topic, hold)
				return job, append(defaultArgs(brokers, topic, job, sink), timeouts...)
			}

			// A stop while the join is held ends the process at once.
			_, args := heldJob()
			p := startGroupProc(t, "stopped", t.TempDir(), Env(), args)
			time.Sleep(2 * time.Second)
			if len(p.assignments()) != 0 {
				t.Fatalf("the join was not held: %s", tail(p.snapshot(), 10))
			}
			p.signal(t, syscall.SIGTERM)
			began := time.Now()
			ps := p.exit(t, 30*time.Second)
			if took := time.Since(began); took > 5*time.Second || ps.ExitCode() != 0 {
				t.Errorf("SIGTERM during a held join: %v after %s, want exit 0 at once; log %s:\n%s",
					ps, took.Round(time.Millisecond), p.logPath, tail(p.snapshot(), 20))
			}

			// Held past the read timeout: the process says so, rejoins, and
			// does its job once the stubborn member is dropped.
			_, args = heldJob()
			r := startGroupProc(t, "rejoins", t.TempDir(), Env(), append(args, "--until-idle", "1s"))
			r.waitLine(t, 0, time.Minute, "a group error and a rejoin", func(l string) bool {
				return strings.Contains(l, `msg="consumer group error: rejoining"`) && strings.Contains(l, "timeout")
			})
			if ps := r.exit(t, 2*time.Minute); ps.ExitCode() != 0 {
				t.Fatalf("run: %v, want exit 0 once the group settles; log %s:\n%s", ps, r.logPath, tail(r.snapshot(), 40))
			}
			if lag := finishedLag(t, r); lag != 0 {
				t.Errorf("run finished with lag=%d, want 0", lag)
			}
		})
	}
}

// groupInstances lists the static instance ids of the group's members.
func groupInstances(t *testing.T, brokers, group string) []string {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("restart-test-describe"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	members, err := strategies.GroupMembers(client, group)
	if err != nil {
		t.Fatalf("describing group %s: %v", group, err)
	}
	var ids []string
	for _, m := range members {
		if m.GroupInstanceId != nil {
			ids = append(ids, *m.GroupInstanceId)
		}
	}
	slices.Sort(ids)
	return ids
}
