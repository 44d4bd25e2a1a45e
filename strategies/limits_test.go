package strategies_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kfakepkg "github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestBrokerLimitsUnreadable: the start-up check of the broker's limits
// never stops a run by itself. A user whose ACLs deny DescribeConfigs
// runs a job within the limits to exact totals (the preflight logs that
// it could not check, at debug level); a setting the broker then refuses
// is still a configuration error — a session timeout out of bounds at
// the join, a Kafka transaction timeout above transaction.max.timeout.ms
// at the first transactional producer, without the restarts a checkpoint
// attempt's failure gets.
func TestBrokerLimitsUnreadable(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	brokers, admin, app := clusterWithoutDescribeConfigs(t)
	topic := uniqueName(t, "mbt")
	if err := admin.EnsureTopic(brokers, topic, testPartitions); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	exp, err := kafkautil.Produce(ctx, kafkautil.ProduceOptions{Brokers: brokers, Topic: topic, Count: 3000, Keys: testKeys, Seed: 11, Security: admin})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("within", func(t *testing.T) {
		sink := "sqlite://" + t.TempDir() + "/sink.db"
		cfg := baseConfig(t, brokers, topic, uniqueName(t, "job"), sink)
		cfg.Kafka = app
		cfg.UntilIdle = 500 * time.Millisecond
		log := &lockedBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		runJob(t, cfg)
		if !strings.Contains(log.String(), `msg="broker limits not checked: going on"`) {
			t.Errorf("the run did not log that it could not read the broker's limits:\n%s", log.String())
		}
		w, err := sqlsink.Open(ctx, sink)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if got := readSinkTotals(t, w, cfg.Job); got.Events != exp.Events || !got.AmountIs(exp.Amount) {
			t.Fatalf("sink holds events=%d amount=%d, want %d / %d", got.Events, got.Amount, exp.Events, exp.Amount)
		}
	})
	t.Run("session refused at the join", func(t *testing.T) {
		cfg := baseConfig(t, brokers, topic, uniqueName(t, "job"), "sqlite://"+t.TempDir()+"/sink.db")
		cfg.Kafka = app
		cfg.Group.SessionTimeout = 200 * time.Millisecond
		_, err := strategies.Run(ctx, cfg)
		if !errors.Is(err, strategies.ErrConfig) || !strings.Contains(err.Error(), "session-timeout 200ms: the broker refuses it") {
			t.Fatalf("Run: %v, want the broker's refusal as a configuration error", err)
		}
	})
	t.Run("transaction timeout refused at the first producer", func(t *testing.T) {
		cfg := baseConfig(t, brokers, topic, uniqueName(t, "job"), "kafka://"+brokers[0]+"/"+uniqueName(t, "out"))
		cfg.Strategy = strategies.StrategyCheckpoint
		cfg.Kafka = app
		cfg.Checkpoint.StateDir = t.TempDir()
		cfg.Checkpoint.KafkaTxnTimeout = 20 * time.Minute
		var failures atomic.Int64
		cfg.Checkpoint.OnFailure = func(error) { failures.Add(1) }
		_, err := strategies.Run(ctx, cfg)
		if !errors.Is(err, strategies.ErrConfig) || !errors.Is(err, sarama.ErrInvalidTransactionTimeout) {
			t.Fatalf("Run: %v, want INVALID_TRANSACTION_TIMEOUT as a configuration error", err)
		}
		if n := failures.Load(); n != 0 {
			t.Errorf("the job restarted %d times on a transaction timeout the broker refuses", n)
		}
	})
}

// clusterWithoutDescribeConfigs is a kfake cluster whose user app may do
// everything a job needs but not read the brokers' settings
// (DescribeConfigs on the cluster), and whose admin may.
func clusterWithoutDescribeConfigs(t *testing.T) (brokers []string, admin, app kafkautil.Security) {
	const appPassword = "app-pw-5521"
	all := func(r kmsg.ACLResourceType) kfakepkg.ACL {
		return kfakepkg.ACL{Resource: r, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true}
	}
	c, err := kfakepkg.NewCluster(
		kfakepkg.NumBrokers(1),
		kfakepkg.DefaultNumPartitions(testPartitions),
		kfakepkg.GroupMinSessionTimeout(500*time.Millisecond),
		kfakepkg.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "500"}),
		kfakepkg.EnableSASL(),
		kfakepkg.EnableACLs(),
		kfakepkg.Superuser(kafkautil.SASLPlain, "admin", "admin-pw"),
		// Everything the jobs need, nothing on the cluster.
		kfakepkg.User(kafkautil.SASLPlain, "app", appPassword,
			all(kmsg.ACLResourceTypeTopic), all(kmsg.ACLResourceTypeGroup), all(kmsg.ACLResourceTypeTransactionalId)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers = c.ListenAddrs()
	admin = kafkautil.Security{SASLMechanism: kafkautil.SASLPlain, User: "admin", Password: "admin-pw"}
	app = kafkautil.Security{SASLMechanism: kafkautil.SASLPlain, User: "app", Password: appPassword}

	// The app really may not read the broker's settings.
	conf, err := app.Config("limits-test")
	if err != nil {
		t.Fatal(err)
	}
	client, err := sarama.NewClient(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ca.DescribeConfig(sarama.ConfigResource{Type: sarama.BrokerResource, Name: "0", ConfigNames: []string{"transaction.max.timeout.ms"}})
	ca.Close() // closes the client
	var denied *sarama.DescribeConfigError
	if !errors.As(err, &denied) || !errors.Is(denied.Err, sarama.ErrClusterAuthorizationFailed) {
		t.Fatalf("DescribeConfigs as the app: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}

	return brokers, admin, app
}
