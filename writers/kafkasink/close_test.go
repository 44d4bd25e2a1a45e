package kafkasink

import (
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
)

func TestKafkaTxnCloseNoLeaksKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close() // if the test fails early; Close twice is fine
	kafkaTxnCloseNoLeaks(t, b.Addrs(), b.Close)
}

func TestKafkaTxnCloseNoLeaksApacheKafka(t *testing.T) {
	brokers := kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka))
	kafkaTxnCloseNoLeaks(t, brokers, func() {})
}

// kafkaTxnCloseNoLeaks uses a writer, leaves a transaction open, closes it
// twice, stops the broker and checks that no goroutine is left.
func kafkaTxnCloseNoLeaks(t *testing.T, brokers []string, stopBroker func()) {
	ctx := t.Context()
	topic := kafkaTxnTopic(t, brokers)
	w, err := New(Config{Brokers: brokers, TransactionalID: kafkaTxnName(t, "txn")})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(ctx, 1); err != nil {
		t.Fatal(err)
	}
	kafkaTxnWrite(t, w, topic, "a")
	p, err := w.PreCommit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(ctx, 2); err != nil { // left open by Close
		t.Fatal(err)
	}
	kafkaTxnWrite(t, w, topic, "b")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Begin(ctx, 3); err == nil {
		t.Fatal("Begin after Close: no error")
	}
	stopBroker()
	if leaked := testutil.LeakedGoroutines(5 * time.Second); leaked != "" {
		t.Fatalf("goroutines left after Close:\n%s", leaked)
	}
}
