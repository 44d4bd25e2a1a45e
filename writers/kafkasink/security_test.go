package kafkasink

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
)

// The SASL_SSL listener scripts/services.sh gives Apache Kafka, and who
// may log in there (the same user for PLAIN and both SCRAMs).
const (
	envKafkaSASLSSL  = "MICROBATCH_TEST_KAFKA_SASL_SSL"
	envKafkaSASLUser = "MICROBATCH_TEST_KAFKA_SASL_USER"
	envKafkaSASLPass = "MICROBATCH_TEST_KAFKA_SASL_PASSWORD"
	envTLSCA         = "MICROBATCH_TEST_TLS_CA"
)

// Every producer of the writer (franz-go clients) and its coordinator
// client (sarama) connect over TLS with each SASL mechanism; a wrong
// password is refused, not retried for ever.
func TestKafkaTxnSecurity(t *testing.T) {
	addr := testutil.NeedServer(t, envKafkaSASLSSL)
	sec := kafkautil.Security{TLS: true, CAFile: testutil.NeedServer(t, envTLSCA),
		User: testutil.NeedServer(t, envKafkaSASLUser), Password: testutil.NeedServer(t, envKafkaSASLPass)}
	plain := kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka)) // the same cluster, for reading back
	for _, mech := range []string{SASLPlain, SASLScramSHA256, SASLScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			ctx := t.Context()
			topic := kafkaTxnTopic(t, plain)
			sec := sec
			sec.SASLMechanism = mech
			w, err := New(Config{Brokers: []string{addr}, TransactionalID: kafkaTxnName(t, "txn"), Security: sec})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Recover(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if err := w.Begin(ctx, 1); err != nil {
				t.Fatal(err)
			}
			kafkaTxnWrite(t, w, topic, "a", "b")
			p, err := w.PreCommit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(ctx, p); err != nil {
				t.Fatal(err)
			}
			kafkaTxnExpect(t, plain, topic, sarama.ReadCommitted, []string{"a", "b"})
		})
	}
	t.Run("WrongPassword", func(t *testing.T) {
		sec := sec
		sec.SASLMechanism, sec.Password = SASLScramSHA512, "wrong"
		w, err := New(Config{Brokers: []string{addr}, TransactionalID: kafkaTxnName(t, "txn"), Security: sec})
		if err == nil {
			defer w.Close()
			err = w.Recover(t.Context(), nil)
		}
		if err == nil {
			t.Fatal("a wrong password: no error")
		}
		t.Logf("wrong password: %v", err)
	})
}
