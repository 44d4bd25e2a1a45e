package strategies_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
)

// TestGroupSharedWithAnotherJob: two jobs given the same --group would
// split the topic's partitions between them, each job silently never
// reading the other's share. The job that joins a group held by another
// must stop with a configuration error naming it, before it claims
// anything; the job that held the group must go on — reading input
// produced after the newcomer left — and log a warning naming it.
func TestGroupSharedWithAnotherJob(t *testing.T) {
	t.Parallel()
	for _, k := range []kafkaTarget{kfake, apacheKafka} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			testGroupShared(t, k.brokers(t))
		})
	}
}

func testGroupShared(t *testing.T, brokers []string) {
	topic := newTopic(t, brokers)
	exp := produce(t, brokers, topic, 5, 0, 5_000)
	dsn := sqliteSink.dsn(t)
	jobA, jobB := uniqueName(t, "job-a"), uniqueName(t, "job-b")

	progress := make(chan struct{}, 1)
	logA := &lockedBuffer{}
	cfgA := baseConfig(t, brokers, topic, jobA, dsn)
	cfgA.UntilIdle = 0
	cfgA.Logger = slog.New(slog.NewTextHandler(logA, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfgA.OnProgress = func(batch.Progress) {
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	doneA := make(chan error, 1)
	go func() {
		_, err := strategies.Run(ctx, cfgA)
		doneA <- err
	}()
	defer func() {
		cancel()
		<-doneA
	}()
	aliveA := func(what string) {
		t.Helper()
		select {
		case err := <-doneA:
			doneA <- err
			t.Fatalf("job A ended %s: %v\nits log:\n%s", what, err, logA.String())
		default:
		}
	}
	select {
	case <-progress:
	case err := <-doneA:
		t.Fatalf("job A ended before its first batch: %v", err)
	}

	cfgB := baseConfig(t, brokers, topic, jobB, dsn)
	cfgB.Group.ID = jobA
	_, errB := strategies.Run(ctx, cfgB)
	if !errors.Is(errB, strategies.ErrConfig) || !strings.Contains(errB.Error(), fmt.Sprintf(`consumer group %q is used by job %q`, jobA, jobA)) {
		t.Fatalf("job B returned %v, want a configuration error naming job %q", errB, jobA)
	}
	aliveA("when job B tried its group")
	w := sinktest.OpenSQL(t, dsn)
	if rows := sinktest.StoredOffsets(t, w.DB(), jobB, topic); len(rows) != 0 {
		t.Errorf("the refused job B claimed partitions: %v", rows)
	}

	// A goes on: it reads what is produced after B left, to the end.
	more := produce(t, brokers, topic, 5, 5_000, 3_000)
	end := testutil.EndOffsets(t, brokers, topic)
	deadline := time.Now().Add(2 * time.Minute)
	for fmt.Sprint(sinktest.StoredOffsets(t, w.DB(), jobA, topic)) != fmt.Sprint(end) {
		aliveA("before it read the input produced after job B left")
		if time.Now().After(deadline) {
			t.Fatalf("job A did not reach the partitions' ends %v within 2m: at %v", end, sinktest.StoredOffsets(t, w.DB(), jobA, topic))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-doneA; err != nil {
		t.Fatalf("job A, stopped: %v\nits log:\n%s", err, logA.String())
	}
	doneA <- nil
	if got := readSinkTotals(t, w, jobA); got.Events != exp.Events+more.Events || !got.AmountIs(exp.Amount+more.Amount) {
		t.Errorf("job A's totals %+v, want events=%d amount=%d", got, exp.Events+more.Events, exp.Amount+more.Amount)
	}
	checkPerKey(t, readPerKey(t, w, jobA), expectedPerKey(5, 0, 8_000))
	if log := logA.String(); !strings.Contains(log, "another job tried to join this job's consumer group") || !strings.Contains(log, fmt.Sprintf(`job \"%s\" (instance %s-`, jobB, jobB)) {
		t.Errorf("job A logged no warning naming job %q and its instance:\n%s", jobB, log)
	}
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
