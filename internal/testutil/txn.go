package testutil

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
)

// TxnProducer writes records into Kafka in transactions, as another
// producer of a user's topic would: committed ones a read-committed reader
// must see, aborted ones it must skip.
type TxnProducer struct {
	P     sarama.SyncProducer
	Topic string
}

// NewTxnProducer returns a transactional producer for topic (transactional
// id topic+"-txn"), closed when the test ends.
func NewTxnProducer(t testing.TB, brokers []string, topic string) *TxnProducer {
	t.Helper()
	cfg := kafkautil.Config("microbatch-test-txn")
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = topic + "-txn"
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &TxnProducer{P: p, Topic: topic}
}

// Txn writes msgs in one transaction, sent in chunks (few round trips,
// each well under a request's size limit), and commits or aborts it.
func (tp *TxnProducer) Txn(t testing.TB, msgs []*sarama.ProducerMessage, commit bool) {
	t.Helper()
	if err := tp.P.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	const chunk = 500
	for i := 0; i < len(msgs); i += chunk {
		if err := tp.P.SendMessages(msgs[i:min(len(msgs), i+chunk)]); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if commit {
		err = tp.P.CommitTxn()
	} else {
		err = tp.P.AbortTxn()
	}
	if err != nil {
		t.Fatal(err)
	}
}
