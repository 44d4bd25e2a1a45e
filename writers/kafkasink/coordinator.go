package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Bounds of the retry loop for requests to a transaction coordinator
// (EndTxn, DescribeTransactions): attempts, and the backoff between them.
// About 20 s in all; the context can cut it shorter.
const (
	maxCoordinatorAttempts = 25
	coordinatorBackoffMin  = 50 * time.Millisecond
	coordinatorBackoffMax  = time.Second
)

// describe returns the coordinator's view of transactional id id.
func (w *Txn) describe(ctx context.Context, id string) (sarama.TransactionState, error) {
	var st sarama.TransactionState
	err := w.coordinated(ctx, id, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.DescribeTransactions(&sarama.DescribeTransactionsRequest{TransactionalIDs: []string{id}})
		if err != nil {
			return 0, err
		}
		for _, s := range res.TransactionStates {
			if s.TransactionalID == id {
				st = s
				return s.ErrorCode, nil
			}
		}
		return 0, errors.New("DescribeTransactions answer lacks the id")
	})
	if err != nil {
		return st, fmt.Errorf("describing transactional id %s: %w", id, err)
	}
	return st, nil
}

// endTxn sends EndTxn for (id, pid, epoch) to the id's coordinator.
func (w *Txn) endTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	return w.coordinated(ctx, id, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.EndTxn(&sarama.EndTxnRequest{
			Version: 3, TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, TransactionResult: commit,
		})
		if err != nil {
			return 0, err
		}
		return res.Err, nil
	})
}

// coordinated runs call against the transaction coordinator of id until
// it succeeds or fails for good. It refreshes the coordinator and retries
// after the errors that mean the coordinator moved, is loading, is busy
// with the previous request's markers (CONCURRENT_TRANSACTIONS), or the
// connection failed; at most maxCoordinatorAttempts times, and not after
// ctx ends.
func (w *Txn) coordinated(ctx context.Context, id string, call func(*sarama.Broker) (sarama.KError, error)) error {
	backoff := coordinatorBackoffMin
	for attempt := 1; ; attempt++ {
		b, err := w.client.TransactionCoordinator(id)
		if err == nil {
			var code sarama.KError
			if code, err = call(b); err == nil {
				if code == sarama.ErrNoError {
					return nil
				}
				err = kafkaErr{code}
			}
		}
		if !retriableCoordinatorErr(err) || attempt >= maxCoordinatorAttempts {
			return kafkaError(err)
		}
		_ = w.client.RefreshTransactionCoordinator(id)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %v)", ctx.Err(), kafkaError(err))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, coordinatorBackoffMax)
	}
}

func retriableCoordinatorErr(err error) bool {
	var k sarama.KError
	if errors.As(err, &k) {
		switch k {
		case sarama.ErrNotCoordinatorForConsumer, sarama.ErrConsumerCoordinatorNotAvailable,
			sarama.ErrOffsetsLoadInProgress, sarama.ErrConcurrentTransactions,
			sarama.ErrRequestTimedOut, sarama.ErrNetworkException:
			return true
		}
		return false
	}
	// Anything else is the connection's: closed, refused, timed out.
	return !errors.Is(err, sarama.ErrClosedClient) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// kafkaErr prints a Kafka error code by its protocol name: sarama prints
// several of the transaction codes as "Unknown error, how did this
// happen?". It unwraps to the sarama.KError.
type kafkaErr struct{ code sarama.KError }

var kafkaErrNames = map[sarama.KError]string{
	sarama.ErrRequestTimedOut:                 "REQUEST_TIMED_OUT",
	sarama.ErrNetworkException:                "NETWORK_EXCEPTION",
	sarama.ErrOffsetsLoadInProgress:           "COORDINATOR_LOAD_IN_PROGRESS",
	sarama.ErrConsumerCoordinatorNotAvailable: "COORDINATOR_NOT_AVAILABLE",
	sarama.ErrNotCoordinatorForConsumer:       "NOT_COORDINATOR",
	sarama.ErrInvalidProducerEpoch:            "INVALID_PRODUCER_EPOCH",
	sarama.ErrInvalidTxnState:                 "INVALID_TXN_STATE",
	sarama.ErrInvalidProducerIDMapping:        "INVALID_PRODUCER_ID_MAPPING",
	sarama.ErrInvalidTransactionTimeout:       "INVALID_TRANSACTION_TIMEOUT",
	sarama.ErrConcurrentTransactions:          "CONCURRENT_TRANSACTIONS",
	sarama.ErrTransactionCoordinatorFenced:    "TRANSACTION_COORDINATOR_FENCED",
	sarama.ErrUnknownProducerID:               "UNKNOWN_PRODUCER_ID",
	sarama.ErrProducerFenced:                  "PRODUCER_FENCED",
	sarama.KError(105):                        "TRANSACTIONAL_ID_NOT_FOUND",
}

func (e kafkaErr) Error() string {
	if name, ok := kafkaErrNames[e.code]; ok {
		return fmt.Sprintf("%s (Kafka error %d)", name, int16(e.code))
	}
	return e.code.Error()
}

func (e kafkaErr) Unwrap() error { return e.code }

// kafkaError names a bare sarama.KError; other errors are returned as
// they are.
func kafkaError(err error) error {
	if k, ok := err.(sarama.KError); ok {
		return kafkaErr{k}
	}
	// franz-go's: a Kafka error code, or one wrapped with what failed.
	var ke *kerr.Error
	if errors.As(err, &ke) {
		if err == error(ke) {
			return kafkaErr{sarama.KError(ke.Code)}
		}
		return fmt.Errorf("%w: %w", err, kafkaErr{sarama.KError(ke.Code)})
	}
	return err
}
