package kafkasink

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// Config configures one sink subtask's Kafka transactional writer.
type Config struct {
	Brokers         []string
	TransactionalID string        // prefix, e.g. "<job>-<subtask>"; slot k uses "<prefix>-<k>"
	Subtask         int           // stored in Pending.Subtask
	Slots           int           // transactional ids in rotation; 0 → 3, at least 3 (see the package doc)
	TxnTimeout      time.Duration // Producer.Transaction.Timeout; 0 → 1 minute
	// Sarama is an optional base configuration (TLS, SASL, client id…). It
	// is copied, never modified; the copy gets the settings a
	// transactional producer needs. nil: sarama's defaults with the
	// Kafka version microbatch is tested with and client id
	// "microbatch-kafka-sink". It configures the coordinator client
	// as it is; the producers (franz-go clients) take from it the client
	// id, dial timeout, TLS, SASL (PLAIN, SCRAM-SHA-256/512),
	// Producer.MaxMessageBytes (largest batch), Producer.Compression and
	// Producer.Flush.Frequency (linger).
	Sarama *sarama.Config
	// Security (TLS, SASL) is applied on top of the base configuration.
	Security Security
}

// Defaults and bounds of Config.
const (
	DefaultSlots      = 3
	MinSlots          = 3
	DefaultTxnTimeout = time.Minute
)

func (c *Config) setDefaults() {
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.TxnTimeout == 0 {
		c.TxnTimeout = DefaultTxnTimeout
	}
}

// Validate checks a configuration after defaults are applied.
func (c *Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka sink: no brokers")
	case c.TransactionalID == "":
		return errors.New("kafka sink: empty transactional id prefix")
	case c.Slots < MinSlots:
		return fmt.Errorf("kafka sink: %d transactional id slots; at least %d are needed so that a recovery commit can't hit a newer transaction", c.Slots, MinSlots)
	case c.TxnTimeout < time.Millisecond:
		return fmt.Errorf("kafka sink: transaction timeout %v is too short", c.TxnTimeout)
	}
	return nil
}

// CheckTxnTimeout returns an error if a Kafka transaction timeout is
// not above need, the longest a pre-committed transaction may wait for its
// commit (checkpoint interval + checkpoint timeout + restart time): the
// broker aborts a transaction older than its timeout, and a pre-committed
// transaction aborted that way is lost (writers.ErrTxnLost). A zero timeout is
// the default, DefaultTxnTimeout. Whether the broker accepts the
// timeout (transaction.max.timeout.ms) is known only when the first
// producer starts.
func CheckTxnTimeout(timeout, need time.Duration) error {
	if timeout == 0 {
		timeout = DefaultTxnTimeout
	}
	if timeout <= need {
		return fmt.Errorf("kafka sink: transaction timeout %v must exceed checkpoint interval + checkpoint timeout + restart time (%v)", timeout, need)
	}
	return nil
}
