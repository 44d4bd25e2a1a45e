package batch

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/record"
)

// aheadWait bounds how long these tests wait for a fetch they expect:
// far more than a loopback round trip on a loaded machine. A fetch that
// never comes fails the test after it; one that comes ends the wait.
const aheadWait = 20 * time.Second

// fetchLog is a kfake cluster holding n records ("0", "1", …) in
// partition 0 of mockTopic, which notes every fetch the source sends
// before the broker serves it, and can hold the fetches at one offset.
type fetchLog struct {
	c *kfake.Cluster

	mu      sync.Mutex
	offsets []int64       // FetchOffset of every fetch of partition 0, in arrival order
	changed chan struct{} // closed and replaced on every fetch
	holdAt  int64         // fetches at this offset wait for release (-1: none)
	release chan struct{}
}

func newFetchLog(t *testing.T, n int) *fetchLog {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, mockTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(mockTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range n {
		// One record per batch: a range may end anywhere without
		// cutting a batch.
		if err := prod.ProduceSync(t.Context(), &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	l := &fetchLog{c: c, changed: make(chan struct{}), holdAt: -1, release: make(chan struct{})}
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				l.mu.Lock()
				l.offsets = append(l.offsets, rp.FetchOffset)
				close(l.changed)
				l.changed = make(chan struct{})
				hold := rp.FetchOffset == l.holdAt
				l.mu.Unlock()
				if hold {
					<-l.release
				}
			}
		}
		return nil, nil, false // observed only: kfake serves it
	})
	return l
}

// count is how many fetches at offset the broker has received.
func (l *fetchLog) count(offset int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.offsets {
		if o == offset {
			n++
		}
	}
	return n
}

// waitFor waits until the broker has received a fetch at offset, for at
// most aheadWait, and reports whether it did.
func (l *fetchLog) waitFor(offset int64) bool { return l.waitForN(offset, 1) }

// waitForN waits until the broker has received n fetches at offset, for
// at most aheadWait, and reports whether it did.
func (l *fetchLog) waitForN(offset int64, n int) bool {
	deadline := time.After(aheadWait)
	for {
		l.mu.Lock()
		changed := l.changed // taken first: a fetch after it closes it
		l.mu.Unlock()
		if l.count(offset) >= n {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return false
		}
	}
}

func (l *fetchLog) source(t *testing.T) *KafkaSource {
	t.Helper()
	src, _ := testSource(t, l.c.ListenAddrs(), kafkautil.Config("ahead-test"))
	return src
}

func want(from, to int64) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, strconv.FormatInt(i, 10))
	}
	return out
}

// TestKafkaSourceFetchesAheadDuringCommit runs the driver over a backlog
// of 30 records, 10 per batch, with a task whose commit waits until the
// broker has seen a fetch at the end of the task's range: the first fetch
// of the next batch's range, sent while this batch commits. When only
// the next batch's Read sent it, after the commit, the commit waited in
// vain. Each later batch then uses that answer instead of fetching its
// start again.
func TestKafkaSourceFetchesAheadDuringCommit(t *testing.T) {
	log := newFetchLog(t, 30)
	src := log.source(t)
	var mu sync.Mutex
	var got []string
	var missed []int64
	d := &Driver{
		Source: src, Topic: mockTopic, Next: map[int32]int64{0: 0},
		MaxRecords: 10, UntilIdle: 100 * time.Millisecond,
		Task: func(ctx context.Context, b Info, r record.Range) (TaskResult, error) {
			err := src.Read(ctx, r, func(rec *Record) error {
				mu.Lock()
				got = append(got, string(rec.Value))
				mu.Unlock()
				return nil
			})
			if err != nil {
				return TaskResult{}, err
			}
			// The commit: it ends once the next range's fetch is in flight.
			if !log.waitFor(r.To) {
				mu.Lock()
				missed = append(missed, r.To)
				mu.Unlock()
			}
			return TaskResult{Records: r.Len()}, nil
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*aheadWait)
	defer cancel()
	sum, err := d.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(missed) > 0 {
		t.Fatalf("no fetch at %v while the batch ending there committed: the next range's first fetch did not overlap the commit", missed)
	}
	if sum.Batches != 3 || sum.Next[0] != 30 || !slices.Equal(got, want(0, 30)) {
		t.Fatalf("%d batches, next offset %d, records %v; want 3 batches, 30, every record once in order", sum.Batches, sum.Next[0], got)
	}
	for _, at := range []int64{10, 20} {
		if n := log.count(at); n != 1 {
			t.Errorf("%d fetches at offset %d, want 1: the batch starting there fetched again what was fetched ahead for it", n, at)
		}
	}
}

// TestKafkaSourceAheadOnlyForItsOffset: the answer fetched ahead at the
// end of a range serves only a Read whose range starts there. A Read of
// the same range again (a retry after a failed commit) or of one starting
// anywhere else (a plan from other offsets) must fetch for itself and
// deliver exactly its own records. Each Read's fetch ahead is waited for
// before the next Read, so the counts don't depend on whether it went
// out before the next Read discarded it.
func TestKafkaSourceAheadOnlyForItsOffset(t *testing.T) {
	log := newFetchLog(t, 40)
	src := log.source(t)
	for _, step := range []struct {
		from, to int64
		fetches  int // fetches at from once the Read returned (the ahead one included)
	}{
		{0, 10, 1},
		{0, 10, 2},  // again: the ahead fetch at 10 is not for it
		{5, 15, 1},  // inside the range read ahead of: not at 10 either
		{15, 20, 1}, // where the last Read ended: the ahead answer
		{22, 30, 1}, // past it
		{30, 40, 1}, // right after
		{12, 18, 1}, // before it
		{18, 25, 1}, // where the last one ended
		{25, 25, 1}, // an empty range reads nothing (1: the ahead fetch)
		{25, 26, 1}, // nor takes what was fetched ahead for 25
	} {
		aheadBefore := log.count(step.to)
		got, err := read(t, t.Context(), src, step.from, step.to)
		if err != nil {
			t.Fatalf("Read [%d, %d): %v", step.from, step.to, err)
		}
		if !slices.Equal(got, want(step.from, step.to)) {
			t.Fatalf("Read [%d, %d) = %v, want %v", step.from, step.to, got, want(step.from, step.to))
		}
		if n := log.count(step.from); n != step.fetches {
			t.Fatalf("after Read [%d, %d): %d fetches at %d, want %d", step.from, step.to, n, step.from, step.fetches)
		}
		if step.from < step.to {
			// Every Read of a range that isn't empty leaves a fetch ahead.
			if !log.waitForN(step.to, aheadBefore+1) {
				t.Fatalf("after Read [%d, %d): no fetch ahead at %d", step.from, step.to, step.to)
			}
		}
	}
}

// TestKafkaSourceCloseCutsFetchAhead: Close returns while a fetch sent
// ahead is still unanswered (the broker holds it), having ended it,
// instead of waiting for the broker or the read timeout.
func TestKafkaSourceCloseCutsFetchAhead(t *testing.T) {
	log := newFetchLog(t, 10)
	log.holdAt = 10
	defer close(log.release)
	src := log.source(t)
	if got, err := read(t, t.Context(), src, 0, 10); err != nil || !slices.Equal(got, want(0, 10)) {
		t.Fatalf("Read [0, 10) = %v, %v", got, err)
	}
	if !log.waitFor(10) {
		t.Fatal("no fetch ahead at 10")
	}
	closed := make(chan error, 1)
	go func() { closed <- src.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(aheadWait):
		t.Fatalf("Close still waiting after %s for a fetch ahead the broker holds", aheadWait)
	}
}
