package strategies_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

const (
	secUser     = "alice"
	secPassword = "s3cret-Pw-7781"
)

// TestSecureKafka runs jobs against a broker that accepts only TLS and
// SASL: PLAIN and SCRAM-SHA-256 succeed with exact totals, a wrong
// password is ErrDenied at once, an untrusted certificate a clear
// configuration error.
func TestSecureKafka(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	ca := testutil.NewTestCA(t)
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: testPartitions, TLS: ca.Server,
		Users: []devbroker.User{
			{Mechanism: kafkautil.SASLPlain, Name: secUser, Password: secPassword},
			{Mechanism: kafkautil.SASLScramSHA256, Name: "bob", Password: secPassword + "-scram"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	brokers := b.Addrs()
	plain := kafkautil.Security{TLS: true, CAFile: ca.CAFile, SASLMechanism: kafkautil.SASLPlain, User: secUser, Password: secPassword}
	scram := kafkautil.Security{TLS: true, CAFile: ca.CAFile, SASLMechanism: kafkautil.SASLScramSHA256, User: "bob", Password: secPassword + "-scram"}

	topic := uniqueName(t, "mbt")
	if err := plain.EnsureTopic(brokers, topic, testPartitions); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	const count = 5000
	exp, err := kafkautil.Produce(ctx, kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: count, Keys: testKeys, Seed: 7, Security: scram})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		sec  kafkautil.Security
	}{{"PLAIN", plain}, {"SCRAM-SHA-256", scram}} {
		t.Run(tc.name, func(t *testing.T) {
			sink := "sqlite://" + t.TempDir() + "/sink.db"
			cfg := baseConfig(t, brokers, topic, uniqueName(t, "job"), sink)
			cfg.UntilIdle = 500 * time.Millisecond
			cfg.Kafka = tc.sec
			runJob(t, cfg)
			w, err := sqlsink.Open(ctx, sink)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := readSinkTotals(t, w, cfg.Job); got.Events != exp.Events || !got.AmountIs(exp.Amount) {
				t.Fatalf("sink holds events=%d amount=%d, want %d / %d", got.Events, got.Amount, exp.Events, exp.Amount)
			}
		})
	}

	fail := func(t *testing.T, sec kafkautil.Security) error {
		t.Helper()
		return runRefused(t, ctx, baseConfig(t, brokers, topic, uniqueName(t, "job"), "sqlite://"+t.TempDir()+"/sink.db"), sec)
	}
	t.Run("WrongPassword", func(t *testing.T) {
		for _, sec := range []kafkautil.Security{plain, scram} {
			sec.Password = "wrong-" + secPassword
			if err := fail(t, sec); !errors.Is(err, strategies.ErrDenied) {
				t.Errorf("%s: error %v is not ErrDenied", sec.SASLMechanism, err)
			}
		}
	})
	t.Run("UntrustedCA", func(t *testing.T) {
		sec := plain
		sec.CAFile = testutil.NewTestCA(t).CAFile // another CA
		err := fail(t, sec)
		if !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), "TLS") || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("error %v: want ErrConfig naming TLS and the certificate", err)
		}
	})
	t.Run("PlaintextToTLS", func(t *testing.T) {
		sec := plain
		sec.TLS, sec.CAFile = false, ""
		cfg := baseConfig(t, brokers, topic, uniqueName(t, "job"), "sqlite://"+t.TempDir()+"/sink.db")
		cfg.Kafka = sec
		cfg.ConnectTimeout = 2 * time.Second
		_, err := strategies.Run(ctx, cfg)
		if err == nil {
			t.Fatal("plaintext to a TLS listener succeeded")
		}
		t.Logf("error: %v", err)
	})
}

// runRefused runs cfg with Kafka security sec, which the broker must
// refuse at once (no retries until the connect timeout) with an error
// that does not show the password; it returns the error.
func runRefused(t *testing.T, ctx context.Context, cfg strategies.Config, sec kafkautil.Security) error {
	t.Helper()
	cfg.Kafka = sec
	// Far above what a refusal takes (a few seconds), so that a busy
	// machine can't pass for retries until the timeout.
	cfg.ConnectTimeout = time.Minute
	start := time.Now()
	_, err := strategies.Run(ctx, cfg)
	if err == nil {
		t.Fatal("Run succeeded")
	}
	// Waiting cannot fix a refusal: no retries until the timeout.
	if d := time.Since(start); d >= cfg.ConnectTimeout {
		t.Errorf("failing took %s: retried like an unreachable server until the connect timeout", d)
	}
	if strings.Contains(err.Error(), sec.Password) {
		t.Errorf("error shows the password: %v", err)
	}
	t.Logf("error: %v", err)
	return err
}
