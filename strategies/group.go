package strategies

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
)

// maxFencedSessions is how many sessions in a row may end with fenced
// commits before the member gives up: a healthy member is fenced at most
// once per stall, while two processes of one job in different groups (the
// same --job with another --group) fence each other forever.
const maxFencedSessions = 3

// session is one generation of the group, as far as this member is
// concerned.
type session struct {
	Partitions []int32 // assigned to this member, sorted
	All        []int32 // every partition of the topic
	Generation int32
	MemberID   string
}

// sessionStart claims a session's partitions in the sink and returns the
// driver that processes them and the epoch it commits with.
type sessionStart func(ctx context.Context, s session) (*batch.Driver, int64, error)

// isFenced is the driver's Drop rule: the sink refused a commit because a
// newer epoch owns the partition.
func isFenced(err error) bool { return errors.Is(err, offsets.ErrFenced) }

// groupConfig is the sarama configuration of the membership client.
func groupConfig(cfg Config) *sarama.Config {
	c := kafkautil.Config(clientIDPrefix + cfg.Job)
	_ = cfg.Kafka.Apply(c) // openSource applied the same settings first and stopped on an error
	g := &c.Consumer.Group
	g.Session.Timeout = cfg.Group.SessionTimeout
	g.Heartbeat.Interval = max(cfg.Group.SessionTimeout/4, 10*time.Millisecond)
	g.Rebalance.Timeout = cfg.Group.RebalanceTimeout
	g.InstanceId = cfg.Group.InstanceID
	// Processes started together keep running into each other's joins
	// ("rebalance in progress"): sarama's 2 s default backoff made the
	// whole group wait seconds for its last member (the scale-out
	// benchmark measured joins of 2–7 s; 73–381 ms with these).
	g.Rebalance.Retry.Backoff = 200 * time.Millisecond
	g.Rebalance.Retry.Max = 20
	// A JoinGroup is answered only when every member rejoined, which may
	// take a member's whole batch in flight: up to the rebalance timeout
	// (and a SyncGroup waits for the leader's, as long). Only this client
	// makes those calls. Rebalances that follow one another can hold a
	// join longer still; runGroup rejoins after such a timeout.
	c.Net.ReadTimeout = cfg.Group.RebalanceTimeout + max(cfg.Group.SessionTimeout, 5*time.Second)
	switch cfg.Group.Assignment {
	case AssignRange:
		g.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	case AssignRoundRobin:
		g.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRoundRobin()}
	default:
		g.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	}
	// The claims' partition consumers are paused at once; keep what they
	// fetch before that small.
	c.Consumer.Offsets.Initial = sarama.OffsetNewest
	c.Consumer.Offsets.AutoCommit.Enable = false
	c.Consumer.Fetch.Default = 1024
	c.ChannelBufferSize = 1
	return c
}

// clientIDPrefix + the job is every Kafka client id of a job, which is how
// members tell that their group is shared with another job. (The join
// metadata's user data can't carry it: the sticky assignor owns it.)
const clientIDPrefix = "microbatch-"

// foreignMember is a member of the group that is not this job's: another
// job given the same --group, or a consumer that isn't microbatch.
type foreignMember struct {
	id   string // member id
	desc string // what it is, for messages: job, instance id, host
}

// foreignMembers lists the members of group that are not job's, sorted by
// description. A job's group is its own: a member of another job would be
// assigned some of the partitions, and this job would never read them.
func foreignMembers(client sarama.Client, group, job string) ([]foreignMember, error) {
	members, err := GroupMembers(client, group)
	if err != nil {
		return nil, err
	}
	var out []foreignMember
	for id, m := range members {
		other, ok := strings.CutPrefix(m.ClientId, clientIDPrefix)
		if ok && other == job {
			continue
		}
		desc := fmt.Sprintf("job %q", other)
		if !ok {
			desc = fmt.Sprintf("a consumer that is not microbatch (client id %q)", m.ClientId)
		}
		var about []string
		if m.GroupInstanceId != nil && *m.GroupInstanceId != "" {
			about = append(about, "instance "+*m.GroupInstanceId)
		}
		if host := strings.TrimPrefix(m.ClientHost, "/"); host != "" {
			about = append(about, "host "+host)
		}
		if len(about) > 0 {
			desc += " (" + strings.Join(about, ", ") + ")"
		}
		out = append(out, foreignMember{id: id, desc: desc})
	}
	slices.SortFunc(out, func(a, b foreignMember) int { return strings.Compare(a.desc, b.desc) })
	return out, nil
}

// describeForeign joins the members' descriptions for a message.
func describeForeign(ms []foreignMember) string {
	descs := make([]string, len(ms))
	for i, m := range ms {
		descs[i] = m.desc
	}
	return strings.Join(descs, ", ")
}

// errGroupInUse is the error of a process that finds its group used by
// others when it joins: the newcomer is the one refused.
func errGroupInUse(cfg Config, ms []foreignMember) error {
	return fmt.Errorf("%w: consumer group %q is used by %s: give job %q its own --group (two jobs in one group would each miss the partitions assigned to the other)",
		ErrConfig, cfg.Group.ID, describeForeign(ms), cfg.Job)
}

// GroupMembers returns the live members of a consumer group by member id,
// as its coordinator knows them (none for a group that doesn't exist). A
// busy coordinator (coordinatorBusy) is asked again for up to
// coordinatorWait.
func GroupMembers(client sarama.Client, group string) (map[string]*sarama.GroupMemberDescription, error) {
	deadline := time.Now().Add(coordinatorWait)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		members, err := describeGroup(client, group)
		if err == nil || !coordinatorBusy(err) || time.Now().Add(wait).After(deadline) {
			return members, err
		}
		if !errors.Is(err, sarama.ErrOffsetsLoadInProgress) {
			_ = client.RefreshCoordinator(group) // it moved, or is not known yet
		}
		time.Sleep(wait)
	}
}

// coordinatorWait bounds how long GroupMembers waits out a group
// coordinator that is busy: still loading the group's offsets (a broker
// that has just started, or took over the group's partition of
// __consumer_offsets), or moving. Kafka marks those errors retriable; a
// dry run or a newcomer check right after a broker start meets them.
const coordinatorWait = 30 * time.Second

// coordinatorBusy reports the retriable coordinator errors.
func coordinatorBusy(err error) bool {
	return errors.Is(err, sarama.ErrOffsetsLoadInProgress) ||
		errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) ||
		errors.Is(err, sarama.ErrNotCoordinatorForConsumer)
}

// describeGroup asks the group's coordinator for its members once.
func describeGroup(client sarama.Client, group string) (map[string]*sarama.GroupMemberDescription, error) {
	b, err := client.Coordinator(group)
	if err != nil {
		return nil, err
	}
	resp, err := b.DescribeGroups(&sarama.DescribeGroupsRequest{Version: 5, Groups: []string{group}})
	if err != nil {
		return nil, err
	}
	out := map[string]*sarama.GroupMemberDescription{}
	for _, gd := range resp.Groups {
		if !errors.Is(gd.Err, sarama.ErrNoError) && !errors.Is(gd.Err, sarama.ErrGroupIDNotFound) {
			return nil, gd.Err
		}
		maps.Copy(out, gd.Members)
	}
	return out, nil
}

// groupRun is the state of a member across sessions.
type groupRun struct {
	client sarama.Client // for describing the group
	cfg    Config
	log    *slog.Logger
	cg     sarama.ConsumerGroup
	all    []int32
	start  sessionStart
	// onStart is called when the first session has claimed its partitions.
	onStart func(epoch int64)

	mu       sync.Mutex
	sum      batch.Summary
	epoch    int64
	fatal    error
	idle     bool // a driver stopped on UntilIdle: the member is done
	fenced   int  // sessions in a row that ended with fenced commits
	started  bool
	sessions int // sessions set up so far
	// holds: a session of this member was set up with no other job in
	// the group. A member that holds the group was there first: another
	// job's process joining later is refused, not this one.
	holds  bool
	warned map[string]bool // foreign member ids warned about

	// Of the current session.
	rejoin  context.CancelFunc // ends the session to rejoin the group
	drvDone chan struct{}
}

// Rejoin backoff after a group error: the first retry comes soon (most
// errors are a coordinator moving or a rebalance racing the join), later
// ones back off so that a broker that is down is not hammered.
const (
	rejoinBackoffMin = 250 * time.Millisecond
	rejoinBackoffMax = 10 * time.Second
	// maxGroupReadTimeout bounds how far the group client's read timeout
	// grows after joins that timed out.
	maxGroupReadTimeout = 15 * time.Minute
)

// runGroup joins the group and runs one driver per session until ctx is
// cancelled (the batch in flight finishes), a driver idles out, or a fatal
// error. Group errors are not fatal: the broker may hold a JoinGroup for a
// whole rebalance — longer than any read timeout when members come and go,
// or another member has a longer rebalance timeout — coordinators move,
// connections drop. The member logs the error and rejoins with backoff, on
// a fresh client whose read timeout doubles after each timeout. Only what
// no retry can fix ends the run (groupError).
func runGroup(ctx context.Context, cfg Config, client sarama.Client, all []int32, start sessionStart, onStart func(int64)) (batch.Summary, int64, error) {
	g := &groupRun{client: client, cfg: cfg, log: cfg.Logger, all: all, start: start, onStart: onStart,
		sum: batch.Summary{Next: map[int32]int64{}}, warned: map[string]bool{}}
	began := time.Now()
	readTimeout := groupConfig(cfg).Net.ReadTimeout
	failures := 0
	var err error
	for {
		var sessions int
		sessions, err = g.member(ctx, readTimeout)
		g.mu.Lock()
		fatal, idle := g.fatal, g.idle
		g.mu.Unlock()
		if fatal != nil {
			err = fatal
			break
		}
		if ctx.Err() != nil || idle {
			err = nil
			break
		}
		if ferr := groupError(cfg, err); ferr != nil {
			err = ferr
			break
		}
		if sessions > 0 {
			failures, readTimeout = 0, groupConfig(cfg).Net.ReadTimeout
		}
		failures++
		if isTimeout(err) {
			readTimeout = min(2*readTimeout, maxGroupReadTimeout)
		}
		wait := min(rejoinBackoffMin<<min(failures-1, 10), rejoinBackoffMax)
		if outage := kafkaOutage(err); outage && cfg.retry != nil {
			// Kafka is down: an outage under the run's retry policy, logged
			// once (and every 30 s while it lasts), not once per rejoin,
			// and waited out for --outage-timeout, not forever.
			left, ferr := cfg.retry.out.Failed(cfg.retry.kafka, "joining consumer group "+cfg.Group.ID, err)
			if ferr != nil {
				err = ferr
				break
			}
			wait = min(wait, left)
			g.log.Debug("consumer group error: rejoining", "group", cfg.Group.ID, "attempt", failures, "retry_in", wait, "err", err)
		} else {
			g.log.Warn("consumer group error: rejoining", "group", cfg.Group.ID, "attempt", failures, "retry_in", wait,
				"read_timeout", readTimeout, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if cfg.Group.InstanceID != "" && !errors.Is(err, sarama.ErrFencedInstancedId) && !errors.Is(err, ErrUnreachable) {
		// A static member stays in the group after its client closes, until
		// its session times out: that is what lets a crashed process's
		// restart take its place. A process that stops on purpose leaves by
		// its instance id instead, so that the others take its partitions
		// now. (Fenced: the id is another process's now; leaving would
		// remove that one. Unreachable: Kafka did not answer for the whole
		// outage timeout; its session times the member out.)
		if lerr := leaveStatic(client, cfg.Group.ID, cfg.Group.InstanceID); lerr != nil {
			g.log.Warn("leaving consumer group", "group", cfg.Group.ID, "instance", cfg.Group.InstanceID, "err", lerr)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sum.Elapsed = time.Since(began)
	return g.sum, g.epoch, err
}

// member is one life of the member on one group client: sessions until
// the stop, the driver idles out, a fatal error (in g.fatal) or a group
// error (returned). It reports how many sessions ran.
func (g *groupRun) member(ctx context.Context, readTimeout time.Duration) (sessions int, err error) {
	cfg := g.cfg
	// The group has a client of its own, whose connections a stop can cut:
	// that is the only way to end a JoinGroup the broker is holding (sarama
	// waits for the read timeout, even to close its client).
	conf := groupConfig(cfg)
	conf.Net.ReadTimeout = readTimeout
	for i, s := range conf.Consumer.Group.Rebalance.GroupStrategies {
		conf.Consumer.Group.Rebalance.GroupStrategies[i] = exclusive{BalanceStrategy: s, g: g}
	}
	var cutter kafkautil.ConnCutter
	cutter.Use(conf)
	gclient, err := sarama.NewClient(cfg.Brokers, conf)
	if err != nil {
		return 0, fmt.Errorf("joining consumer group %q: %w", cfg.Group.ID, err)
	}
	defer gclient.Close()
	cg, err := sarama.NewConsumerGroupFromClient(cfg.Group.ID, gclient)
	if err != nil {
		return 0, fmt.Errorf("joining consumer group %q: %w", cfg.Group.ID, err)
	}
	// A stop ends the session — the driver finishes its batch (Cleanup
	// waits for it; the batch needs neither this client nor the group) —
	// and a join in progress at once.
	stopCut := context.AfterFunc(ctx, cutter.Cut)
	defer stopCut()
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range cg.Errors() {
			if errors.Is(err, sarama.ErrFencedInstancedId) {
				// The heartbeat learned that another process joined with
				// this instance id: it owns the id now. Rejoining would
				// take the id back and fence that process in turn, so the
				// run ends instead (the batch in flight finishes first).
				g.mu.Lock()
				if g.fatal == nil {
					g.fatal = groupError(cfg, err)
				}
				g.mu.Unlock()
				g.rejoinNow()
				continue
			}
			if ctx.Err() == nil {
				g.log.Warn("consumer group", "group", cfg.Group.ID, "err", err)
			}
		}
	}()
	defer func() {
		if cerr := cg.Close(); cerr != nil && err == nil && ctx.Err() == nil {
			g.log.Warn("leaving consumer group", "group", cfg.Group.ID, "err", cerr)
		}
		<-errsDone
	}()
	g.mu.Lock()
	g.cg = cg
	g.mu.Unlock()
	for {
		sctx, rejoin := context.WithCancel(ctx)
		g.mu.Lock()
		g.rejoin = rejoin
		before := g.sessions
		g.mu.Unlock()
		err = cg.Consume(sctx, []string{cfg.Topic}, g)
		rejoin()
		g.mu.Lock()
		sessions += g.sessions - before
		done := g.fatal != nil || g.idle
		g.mu.Unlock()
		if done || ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return sessions, nil
		}
		if err != nil {
			return sessions, err
		}
		// A session ended (a rebalance): rejoin on the same client.
	}
}

// kafkaOutage reports a group error that says Kafka does not answer (a
// refused or lost connection, no broker left to talk to), as opposed to a
// join the broker held past the read timeout or a rebalance.
func kafkaOutage(err error) bool {
	return isUnreachable(err) && !isTimeout(err)
}

// isTimeout: the error is a network timeout (a read that waited longer
// than the client's read timeout).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// groupError returns the error that ends the run for a group error no
// rejoin can fix — a configuration the broker refuses, a denied access, a
// missing topic — and nil for the others, which call for a rejoin.
func groupError(cfg Config, err error) error {
	switch {
	case errors.Is(err, sarama.ErrFencedInstancedId):
		// What collides is two processes with the same host name whose
		// slot locks are in separate directories: each finds slot 0 free
		// in its own. A shared directory gives them separate slots.
		return fmt.Errorf("%w: consumer group %q: instance id %q belongs to another process now (the broker fenced this one): "+
			"two processes with the same host name keep their slot locks in separate directories (containers with their own /tmp, different TMPDIRs; this one's is %s) "+
			"and so took the same default id, or two were given the same --instance-id, or this one was paused past its session timeout and replaced: "+
			"give each process its own --instance-id (MICROBATCH_INSTANCE_ID, e.g. the pod name), or let the processes of one host share one TMPDIR: %w",
			ErrConfig, cfg.Group.ID, cfg.Group.InstanceID, cmp.Or(cfg.Group.InstanceLockDir, "$TMPDIR/"+DefaultInstanceLockDirName), err)
	case errors.Is(err, sarama.ErrInvalidSessionTimeout):
		return fmt.Errorf("%w: session-timeout %s: the broker refuses it (outside its group.min.session.timeout.ms .. group.max.session.timeout.ms)",
			ErrConfig, cfg.Group.SessionTimeout)
	case errors.Is(err, sarama.ErrInconsistentGroupProtocol):
		return fmt.Errorf("%w: consumer group %q is used by consumers of another kind: give the job its own --group", ErrConfig, cfg.Group.ID)
	case errors.Is(err, sarama.ErrGroupMaxSizeReached):
		return fmt.Errorf("%w: consumer group %q is full (the broker's group.max.size): run fewer processes", ErrConfig, cfg.Group.ID)
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return fmt.Errorf("%w %q: %w", ErrNoTopic, cfg.Topic, err)
	case isDenied(err):
		return fmt.Errorf("%w: consumer group %q: %w", ErrDenied, cfg.Group.ID, err)
	}
	return nil
}

// leaveStatic removes the static member instanceID from group (a
// LeaveGroup by instance id, as Kafka's admin client removes members).
func leaveStatic(client sarama.Client, group, instanceID string) error {
	b, err := client.Coordinator(group)
	if err != nil {
		return err
	}
	id := instanceID
	resp, err := b.LeaveGroup(&sarama.LeaveGroupRequest{Version: 3, GroupId: group, Members: []sarama.MemberIdentity{{GroupInstanceId: &id}}})
	if err != nil {
		return err
	}
	if !errors.Is(resp.Err, sarama.ErrNoError) {
		return resp.Err
	}
	for _, m := range resp.Members {
		// Unknown: the member was dropped already (its session ended, or it
		// never finished joining).
		if !errors.Is(m.Err, sarama.ErrNoError) && !errors.Is(m.Err, sarama.ErrUnknownMemberId) {
			return m.Err
		}
	}
	return nil
}

// Setup claims the session's partitions and starts their driver.
func (g *groupRun) Setup(sess sarama.ConsumerGroupSession) error {
	parts := slices.Clone(sess.Claims()[g.cfg.Topic])
	slices.Sort(parts)
	s := session{Partitions: parts, All: g.all, Generation: sess.GenerationID(), MemberID: sess.MemberID()}
	if err := g.admit(); err != nil {
		return err
	}
	// A rebalance during the claim must not turn into a failed claim: the
	// claim is bounded by its retries, and the session ends right after.
	if g.cfg.CrashPoint != nil {
		g.cfg.CrashPoint(CrashAfterJoin)
	}
	g.mu.Lock()
	g.sessions++
	g.mu.Unlock()
	if g.cfg.retry != nil {
		g.cfg.retry.out.Up(g.cfg.retry.kafka) // the group answers: an outage of Kafka is over
	}
	g.log.Debug("joined consumer group", "generation", s.Generation, "partitions", len(parts))
	// The claim is not cut short by the session's end (WithoutCancel), but
	// carries it as its stop: a claim that waits for a server that is down
	// (under --outage-timeout, minutes) gives up when the run stops or the
	// group rebalances, and the next session claims again (a claim and a
	// recovery may be repeated).
	sctx := sess.Context()
	d, epoch, err := g.start(batch.WithStop(context.WithoutCancel(sctx), sctx.Done()), s)
	if errors.Is(err, batch.ErrStopped) && sctx.Err() != nil {
		g.log.Debug("session ended during the claim", "generation", s.Generation, "err", err)
		return nil
	}
	if isFenced(err) {
		// The group moved on while we claimed: this session is stale.
		g.log.Warn("claim fenced: rejoining the group", "generation", s.Generation, "err", err)
		g.rejoinNow()
		return nil
	}
	if err != nil {
		g.mu.Lock()
		g.fatal = err
		g.mu.Unlock()
		return err
	}
	g.log.Info("partitions assigned", "group", g.cfg.Group.ID, "generation", s.Generation, "member", s.MemberID,
		"partitions", fmt.Sprint(parts), "epoch", epoch)
	fenced := false
	d.Drop = isFenced
	d.OnDrop = func(p int32, err error) {
		g.log.Warn("commit fenced: another instance owns the partition now; dropping it", "partition", p, "epoch", epoch, "err", err)
		g.mu.Lock()
		fenced = true
		g.mu.Unlock()
		// This session is stale: leave it and rejoin for a fresh
		// assignment (the batch in flight finishes first).
		g.rejoinNow()
	}
	done := make(chan struct{})
	g.mu.Lock()
	g.epoch, g.drvDone = epoch, done
	first := !g.started
	g.started = true
	g.mu.Unlock()
	if first && g.onStart != nil {
		g.onStart(epoch)
	}
	go func() {
		defer close(done)
		sum, err := d.Run(sess.Context())
		g.mu.Lock()
		defer g.mu.Unlock()
		g.add(sum)
		if fenced {
			g.fenced++
		} else if sum.Batches > 0 {
			g.fenced = 0
		}
		switch {
		case err != nil:
			g.fatal = err
		case g.fenced >= maxFencedSessions:
			g.fatal = fmt.Errorf("%w: this member's partitions were claimed by another instance in %d sessions in a row: is job %q also running under another --group?",
				offsets.ErrFenced, g.fenced, g.cfg.Job)
		case sess.Context().Err() == nil:
			g.idle = true // the driver idled out: the member is done
		default:
			return
		}
		g.rejoin()
	}()
	return nil
}

// admit checks the group for another job's members: the newcomer leaves,
// before it claims anything (a fatal ErrConfig); a member that held the
// group before goes on (its leader assigned the newcomer nothing, see
// exclusive).
func (g *groupRun) admit() error {
	if foreign, err := foreignMembers(g.client, g.cfg.Group.ID, g.cfg.Job); err != nil {
		g.log.Warn("could not describe the consumer group", "group", g.cfg.Group.ID, "err", err)
	} else if len(foreign) > 0 && !g.holdsGroup() {
		err := errGroupInUse(g.cfg, foreign)
		g.mu.Lock()
		g.fatal = err
		g.mu.Unlock()
		return err
	} else {
		g.warnForeign(foreign)
	}
	g.mu.Lock()
	g.holds = true
	g.mu.Unlock()
	return nil
}

// ConsumeClaim holds the claim until the session ends; records are read
// by the driver, not through the claim, which is paused.
func (g *groupRun) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	g.cg.Pause(map[string][]int32{claim.Topic(): {claim.Partition()}})
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case _, ok := <-claim.Messages():
			if !ok {
				return nil
			}
		}
	}
}

// Cleanup releases the partitions only once the driver's batch in flight
// has committed or rolled back.
func (g *groupRun) Cleanup(sarama.ConsumerGroupSession) error {
	g.mu.Lock()
	done := g.drvDone
	g.mu.Unlock()
	if done != nil {
		<-done
	}
	return nil
}

func (g *groupRun) holdsGroup() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holds
}

// warnForeign logs, once per member, that another job's process is in the
// group this member's job holds: the job goes on; the newcomer is refused.
func (g *groupRun) warnForeign(ms []foreignMember) {
	g.mu.Lock()
	var fresh []foreignMember
	for _, m := range ms {
		if !g.warned[m.id] {
			g.warned[m.id] = true
			fresh = append(fresh, m)
		}
	}
	g.mu.Unlock()
	if len(fresh) > 0 {
		g.log.Warn("another job tried to join this job's consumer group: this job goes on, the newcomer is refused (give it its own --group)",
			"group", g.cfg.Group.ID, "job", g.cfg.Job, "joined", describeForeign(fresh))
	}
}

// exclusive is the group's balance strategy as this member runs it. When
// the member is the group's leader and its job holds the group, members of
// other jobs get no partitions: the job's assignment stays as it was while
// a newcomer that joined by mistake finds out and leaves (a consumer that
// isn't microbatch, which would not leave, gets nothing at all). Otherwise
// the plan is the wrapped strategy's. None of sarama's built-in strategies
// has the optional hooks (SubscriptionUserData, OnAssignment) that a
// wrapper would hide.
type exclusive struct {
	sarama.BalanceStrategy
	g *groupRun
}

func (s exclusive) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	if s.g.holdsGroup() {
		foreign, err := foreignMembers(s.g.client, s.g.cfg.Group.ID, s.g.cfg.Job)
		if err != nil {
			s.g.log.Warn("could not describe the consumer group", "group", s.g.cfg.Group.ID, "err", err)
		}
		if len(foreign) > 0 {
			// A copy: sarama gives the members missing from the plan
			// empty assignments, from its own map.
			mine := maps.Clone(members)
			for _, m := range foreign {
				delete(mine, m.id)
			}
			if len(mine) > 0 {
				s.g.warnForeign(foreign)
				members = mine
			}
		}
	}
	return s.BalanceStrategy.Plan(members, topics)
}

func (g *groupRun) rejoinNow() {
	g.mu.Lock()
	rejoin := g.rejoin
	g.mu.Unlock()
	if rejoin != nil {
		rejoin()
	}
}

// add merges one session's summary into the run's. Called with g.mu held.
func (g *groupRun) add(s batch.Summary) {
	g.sum.Batches += s.Batches
	g.sum.Records += s.Records
	g.sum.DeadLetters += s.DeadLetters
	g.sum.Fenced += s.Fenced
	g.sum.RolledBack += s.RolledBack
	g.sum.Lag = s.Lag
	for p, n := range s.Next {
		g.sum.Next[p] = n
	}
}
