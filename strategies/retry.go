package strategies

import (
	"context"
	"errors"
	"strings"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// unknownOutcome marks a failed attempt whose commit may have landed (its
// offsets couldn't be read back): only another attempt can tell.
type unknownOutcome struct{ err error }

func (u unknownOutcome) Error() string { return u.err.Error() }
func (u unknownOutcome) Unwrap() error { return u.err }

// isRetryable: lost connections, deadlocks, Kafka read errors and unknown
// outcomes may succeed on another attempt; fencing, conflicts and bad
// configuration never do. Nor does a read that gave up on the run's stop
// request (batch.ErrStopped): another attempt would only wait again.
func isRetryable(err error) bool {
	if errors.Is(err, batch.ErrStopped) {
		return false
	}
	var u unknownOutcome
	return errors.As(err, &u) || writers.IsRetryable(err) || redissink.IsRetryable(err) || batch.IsRetryable(err)
}

// retryPolicy is the run's one retry policy (shared.Outages: backoff
// against --outage-timeout, one log line per outage) with the names of
// the run's two servers.
type retryPolicy struct {
	out   *shared.Outages // its Sink names the sink
	kafka string          // Kafka's name in messages
}

// withRetry runs attempt, a step that talks to the sink only, under the
// retry policy until it succeeds or fails for good. It returns how many
// attempts it made.
func withRetry(ctx context.Context, p *retryPolicy, what string, attempt func() error) (int, error) {
	return p.out.Retry(ctx, what, []string{p.out.Sink}, p.classify, attempt)
}

// withReadRetry is withRetry for a step that reads Kafka and writes the
// sink (a partition task): its success means both answer.
func withReadRetry(ctx context.Context, p *retryPolicy, what string, attempt func() error) (int, error) {
	return p.out.Retry(ctx, what, []string{p.kafka, p.out.Sink}, p.classify, attempt)
}

// withKafkaRetry is withRetry for a step that talks to Kafka only (a
// consumer group's offset commit).
func withKafkaRetry(ctx context.Context, p *retryPolicy, what string, attempt func() error) (int, error) {
	return p.out.Retry(ctx, what, []string{p.kafka}, func(err error) (string, bool) { return p.kafka, isRetryable(err) }, attempt)
}

// newRetryPolicy is cfg's retry policy.
func newRetryPolicy(cfg Config) *retryPolicy {
	timeout := cfg.OutageTimeout
	if timeout == NoOutageTimeout {
		timeout = 0
	}
	return &retryPolicy{
		out:   &shared.Outages{Timeout: timeout, Log: cfg.Logger, Sink: SinkDisplay(cfg.Sink), OnChange: cfg.OnOutage},
		kafka: kafkaName(cfg),
	}
}

// kafkaName is how messages name the run's Kafka.
func kafkaName(cfg Config) string { return "Kafka " + strings.Join(cfg.Brokers, ",") }

// classify: a read error is Kafka's, anything else the sink's.
func (p *retryPolicy) classify(err error) (string, bool) {
	if batch.IsRetryable(err) {
		return p.kafka, isRetryable(err)
	}
	return p.out.Sink, isRetryable(err)
}

// settle decides what a failed commit attempt means. A commit whose reply
// was lost may have landed: the offset rows tell, since only our own commit
// can have moved them to their ends. (A retry after such a commit fails
// with offsets.ErrConflict and is settled here as success too.) If the rows
// can't be read, the outcome is unknown, which calls for another attempt,
// never for giving up with the error of an attempt that may have succeeded.
func settle(ctx context.Context, w *sqlsink.Writer, err error, advs ...offsets.Advance) error {
	for _, a := range advs {
		landed, lerr := offsets.Landed(ctx, w.DB(), a)
		if lerr != nil {
			return unknownOutcome{err}
		}
		if !landed {
			return err
		}
	}
	return nil
}

// boundsSource is the run's source with its partition bounds — read
// before every batch — read under the run's retry policy: a broker that
// stops answering between batches is an outage to wait out (logged once,
// for --outage-timeout), not the end of the run. (The source's own few
// quick retries cover a leader that moved; its records are read by the
// partition tasks, under withReadRetry.)
type boundsSource struct {
	batch.Source
	retry *retryPolicy
}

func (s boundsSource) Bounds(ctx context.Context) (map[int32]batch.Bounds, error) {
	var b map[int32]batch.Bounds
	_, err := s.retry.out.Retry(ctx, "reading partition offsets", []string{s.retry.kafka}, s.classifyBounds, func() (err error) {
		b, err = s.Source.Bounds(ctx)
		return err
	})
	return b, err
}

// classifyBounds: a bounds read that failed is Kafka's, and worth another
// attempt unless it was refused for good — access denied, the topic gone —
// or the run is stopping.
func (s boundsSource) classifyBounds(err error) (string, bool) {
	permanent := errors.Is(err, sarama.ErrTopicAuthorizationFailed) || errors.Is(err, sarama.ErrClusterAuthorizationFailed) ||
		errors.Is(err, sarama.ErrSASLAuthenticationFailed) || errors.Is(err, sarama.ErrUnknownTopicOrPartition) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, batch.ErrStopped)
	return s.retry.kafka, !permanent
}
