package strategies_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/strategies"
)

// TestGroupSharedWithAnotherJob: two jobs given the same --group would
// split the topic's partitions between them, each job silently never
// reading the other's share. The job that joins a group held by another
// must stop with a configuration error naming it instead.
func TestGroupSharedWithAnotherJob(t *testing.T) {
	t.Parallel()
	brokers := kfake.brokers(t)
	topic := newTopic(t, brokers)
	produce(t, brokers, topic, 5, 0, 5_000)
	group := uniqueName(t, "shared")
	dsn := sqliteSink.dsn(t)

	started := make(chan struct{}, 1)
	cfgA := baseConfig(t, brokers, topic, uniqueName(t, "job-a"), dsn)
	cfgA.Group, cfgA.UntilIdle = group, 0
	cfgA.OnProgress = func(batch.Progress) {
		select {
		case started <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	doneA := make(chan error, 1)
	go func() {
		_, err := strategies.Run(ctx, cfgA)
		doneA <- err
	}()
	select {
	case <-started:
	case err := <-doneA:
		t.Fatalf("job A ended before its first batch: %v", err)
	}

	cfgB := baseConfig(t, brokers, topic, uniqueName(t, "job-b"), dsn)
	cfgB.Group = group
	_, errB := strategies.Run(ctx, cfgB)
	if !errors.Is(errB, strategies.ErrConfig) || !strings.Contains(errB.Error(), `shared with job "`+cfgA.Job+`"`) {
		t.Errorf("job B returned %v, want a configuration error naming job %q", errB, cfgA.Job)
	}
	// A saw B in the group too, or B left before A looked: A either stops
	// with the same error or goes on alone — until it is stopped, which
	// may come before or after it saw B on a busy machine.
	var errA error
	select {
	case errA = <-doneA:
	case <-time.After(2 * time.Second):
		cancel()
		errA = <-doneA
	}
	if errA != nil && (!errors.Is(errA, strategies.ErrConfig) || !strings.Contains(errA.Error(), `shared with job "`+cfgB.Job+`"`)) {
		t.Errorf("job A returned %v, want a configuration error naming job %q (or to go on)", errA, cfgB.Job)
	}
}
