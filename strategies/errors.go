package strategies

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies/checkpoint"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
)

var (
	// ErrConfig means the configuration is invalid; the message names the
	// setting. Fix it and start again.
	ErrConfig = checkpoint.ErrConfig

	// ErrUnreachable means Kafka or the sink did not answer: at start
	// within the connect timeout, or during the run for longer than the
	// outage timeout; the message names the address (and how long it was
	// gone). Check that the server runs and the address and port are right.
	ErrUnreachable = shared.ErrUnreachable

	// ErrNoTopic means the topic to read does not exist (batch.ErrNoTopic).
	ErrNoTopic = batch.ErrNoTopic

	// ErrDenied means a server refused the credentials or the permission
	// to do what the job needs; the message says which.
	ErrDenied = errors.New("access denied")
)

// Classify marks err, from connecting to or first using a server, as
// ErrDenied, ErrUnreachable or (a failed TLS handshake) ErrConfig when it
// is one of those; others pass as they are. Run classifies its own errors;
// a program that talks to the same servers itself (the microbatch CLI's
// produce, verify and offsets) classifies its errors with this, so that
// the same failure reads the same everywhere.
func Classify(err error) error { return classify(err) }

// classify is Classify.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrDenied) || errors.Is(err, ErrConfig) || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNoTopic):
		return err // classified already
	case writers.IsTLSFailure(err):
		return fmt.Errorf("%w: TLS handshake failed (check --kafka-tls, --kafka-ca-file, --sink-ca-file): %w", ErrConfig, err)
	case isListenFailure(err):
		return fmt.Errorf("%w: %w", ErrConfig, err) // an address to listen on that is taken or not ours
	case isDenied(err):
		return fmt.Errorf("%w: %w", ErrDenied, err)
	case isUnreachable(err):
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}

func isDenied(err error) bool {
	if errors.Is(err, ErrDenied) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1142, 1143, 1227: // db / user access denied, table / column / privilege
			return true
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000", "42501": // bad password, no such role or not allowed (pg_hba), insufficient privilege
			return true
		}
	}
	for _, k := range []sarama.KError{sarama.ErrTopicAuthorizationFailed, sarama.ErrGroupAuthorizationFailed,
		sarama.ErrClusterAuthorizationFailed, sarama.ErrSASLAuthenticationFailed, sarama.ErrTransactionalIDAuthorizationFailed} {
		if errors.Is(err, k) {
			return true
		}
	}
	if errors.Is(err, kafkautil.ErrSASLClosed) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOPERM")
}

func isListenFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "listen"
}

func isUnreachable(err error) bool {
	if errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.As(err, &op)
}

// Connect calls open until it succeeds, fails with an error other than an
// unreachable server, or timeout passes (0: DefaultConnectTimeout), and
// returns the last error classified (see Classify) — what Run does to
// reach Kafka and the sink, for a program reaching them itself. open gets
// a context that ends with the timeout.
func Connect(ctx context.Context, timeout time.Duration, open func(context.Context) error) error {
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	return connect(ctx, timeout, open)
}

// connect calls open until it succeeds, fails with an error other than an
// unreachable server, or timeout passes — so a job started together with
// its servers (a compose stack, a reboot) waits for them instead of failing
// at once — and returns the last error classified.
func connect(ctx context.Context, timeout time.Duration, open func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		actx, cancel := context.WithDeadline(ctx, deadline)
		err := open(actx)
		cancel()
		if err == nil {
			return nil
		}
		// A refused password or certificate will not change by waiting.
		unreachable := !isDenied(err) && !writers.IsTLSFailure(err) &&
			(isUnreachable(err) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil))
		if !unreachable || !time.Now().Before(deadline) || ctx.Err() != nil {
			if unreachable {
				return fmt.Errorf("%w after %s (--connect-timeout): %w", ErrUnreachable, timeout, err)
			}
			return classify(err)
		}
		select {
		case <-ctx.Done():
			return classify(err)
		case <-time.After(min(wait, time.Until(deadline))):
		}
	}
}
