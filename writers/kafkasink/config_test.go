package kafkasink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestCheckTxnTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, need time.Duration
		ok            bool
	}{
		{time.Minute, 30 * time.Second, true},
		{time.Minute, time.Minute, false},
		{10 * time.Second, time.Minute + 5*time.Second, false},
		{0, 59 * time.Second, true}, // 0 is the 1 minute default
		{0, time.Minute, false},
		{15 * time.Minute, 0, true},
	} {
		err := CheckTxnTimeout(tc.timeout, tc.need)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTxnTimeout(%v, %v) = %v, want ok=%v", tc.timeout, tc.need, err, tc.ok)
		}
		if err != nil && (!strings.HasPrefix(err.Error(), "kafka sink: ") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("error %q: want one line starting with \"kafka sink: \"", err)
		}
	}
	want := "kafka sink: transaction timeout 10s must exceed checkpoint interval + checkpoint timeout + restart time (1m5s)"
	if err := CheckTxnTimeout(10*time.Second, 65*time.Second); err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestKafkaTxnConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0"}, true},
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0", Slots: 4, TxnTimeout: time.Hour}, true},
		{Config{TransactionalID: "j-0"}, false},
		{Config{Brokers: []string{"b:9092"}}, false},
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0", Slots: 2}, false},
		{Config{Brokers: []string{"b:9092"}, TransactionalID: "j-0", TxnTimeout: -time.Second}, false},
	} {
		cfg := tc.cfg
		cfg.setDefaults()
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

func TestKafkaTxnTimeoutAboveBrokerMax(t *testing.T) {
	forEachKafka(t, func(t *testing.T, brokers []string) {
		w, err := New(Config{Brokers: brokers, TransactionalID: kafkaTxnName(t, "txn"), TxnTimeout: 20 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for name, call := range map[string]func() error{
			"Recover": func() error { return w.Recover(t.Context(), nil) },
			"Begin":   func() error { return w.Begin(t.Context(), 1) },
		} {
			err := call()
			if err == nil || !errors.Is(err, sarama.ErrInvalidTransactionTimeout) ||
				!strings.Contains(err.Error(), "transaction.max.timeout.ms") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%s with a 20m timeout: %v, want one line naming transaction.max.timeout.ms", name, err)
			}
			t.Logf("%s: %v", name, err)
		}
	})
}

// The leak checks are top-level tests: in a subtest, the parent test's
// goroutine (waiting in t.Run) would count as left over.
