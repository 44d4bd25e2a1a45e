package strategies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
)

// flakyBounds is a source whose Bounds fails with a refused connection
// while down is set and counts its calls.
type flakyBounds struct {
	down  atomic.Bool
	calls atomic.Int64
	err   error // what a down Bounds fails with (default: connection refused)
}

func (s *flakyBounds) Bounds(context.Context) (map[int32]batch.Bounds, error) {
	s.calls.Add(1)
	if s.down.Load() {
		if s.err != nil {
			return nil, s.err
		}
		return nil, fmt.Errorf("listing offsets on broker 127.0.0.1:1: %w",
			&net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}})
	}
	return map[int32]batch.Bounds{0: {Start: 0, End: 0}}, nil
}

func (s *flakyBounds) Read(context.Context, record.Range, func(*batch.Record) error) error {
	return nil
}

func testPolicy(timeout time.Duration, log *bytes.Buffer) *retryPolicy {
	return &retryPolicy{
		out:   &shared.Outages{Timeout: timeout, Log: slog.New(slog.NewTextHandler(log, nil)), Sink: "sink"},
		kafka: "Kafka 127.0.0.1:1",
	}
}

// TestBoundsReadWaitsOutKafka: the driver reads the partitions' bounds
// before every batch; Kafka not answering there is an outage under the
// run's policy — the run keeps polling with backoff, logs the outage once
// and goes on once Kafka answers — not a failed run (it was: "reading
// partition offsets: …", exit 1, after the source's own five quick tries).
func TestBoundsReadWaitsOutKafka(t *testing.T) {
	src := &flakyBounds{}
	src.down.Store(true)
	var log bytes.Buffer
	d := &batch.Driver{Source: boundsSource{Source: src, retry: testPolicy(0, &log)}, Topic: "t", Interval: 10 * time.Millisecond, UntilIdle: 50 * time.Millisecond}
	go func() {
		// Up again once the run has waited through several attempts.
		for src.calls.Load() < 5 {
			time.Sleep(10 * time.Millisecond)
		}
		src.down.Store(false)
	}()
	if _, err := d.Run(context.Background()); err != nil {
		t.Fatalf("the run ended on Kafka not answering its bounds read: %v", err)
	}
	if n := strings.Count(log.String(), "level=WARN"); n != 1 {
		t.Errorf("%d WARN lines for one outage, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `msg="server is back" server="Kafka 127.0.0.1:1"`) {
		t.Errorf("no line saying Kafka is back:\n%s", log.String())
	}
}

// TestBoundsReadOutageTimeout: past --outage-timeout the run fails with
// ErrUnreachable (exit 3) naming Kafka; a stop during the wait ends the
// run without error; a refusal no wait can cure fails at once.
func TestBoundsReadOutageTimeout(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		src := &flakyBounds{}
		src.down.Store(true)
		var log bytes.Buffer
		d := &batch.Driver{Source: boundsSource{Source: src, retry: testPolicy(500*time.Millisecond, &log)}, Topic: "t"}
		_, err := d.Run(context.Background())
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "Kafka 127.0.0.1:1 has not answered for") {
			t.Fatalf("run = %v, want ErrUnreachable naming Kafka", err)
		}
	})
	t.Run("stop", func(t *testing.T) {
		src := &flakyBounds{}
		src.down.Store(true)
		var log bytes.Buffer
		d := &batch.Driver{Source: boundsSource{Source: src, retry: testPolicy(0, &log)}, Topic: "t"}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for src.calls.Load() < 2 {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
		}()
		if _, err := d.Run(ctx); err != nil {
			t.Fatalf("a stop while Kafka was down ended the run with %v, want nil", err)
		}
	})
	t.Run("permanent", func(t *testing.T) {
		src := &flakyBounds{err: fmt.Errorf("listing offsets of t/0: %w", sarama.ErrTopicAuthorizationFailed)}
		src.down.Store(true)
		var log bytes.Buffer
		d := &batch.Driver{Source: boundsSource{Source: src, retry: testPolicy(0, &log)}, Topic: "t"}
		_, err := d.Run(context.Background())
		if !errors.Is(err, sarama.ErrTopicAuthorizationFailed) || src.calls.Load() != 1 {
			t.Fatalf("run = %v after %d reads, want the authorization error after 1", err, src.calls.Load())
		}
	})
}
