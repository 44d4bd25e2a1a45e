package strategies_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
)

// TestControlsRecordTheirStart: the controls keep offsets in the consumer
// group, and a new job's start-from must be committed there before its
// first batch: otherwise a crash before the first commit would resolve
// "latest" again on restart and skip what arrived in between.
func TestControlsRecordTheirStart(t *testing.T) {
	t.Parallel()
	for _, strategy := range []strategies.Strategy{strategies.StrategyAtLeastOnce, strategies.StrategyAtMostOnce} {
		t.Run(string(strategy), func(t *testing.T) {
			t.Parallel()
			brokers := kfake.brokers(t)
			dsn := sqliteSink.dsn(t)
			topic := newTopic(t, brokers)
			job := uniqueName(t, "job")
			produce(t, brokers, topic, integrationSeed, 0, 1_000)

			cfg := baseConfig(t, brokers, topic, job, dsn)
			cfg.Strategy = strategy
			cfg.StartFrom = strategies.StartLatest
			if res := runJob(t, cfg); res.Records != 0 {
				t.Fatalf("a new job starting from latest processed %d records", res.Records)
			}
			if got, want := groupOffsets(t, brokers, job, topic), testutil.EndOffsets(t, brokers, topic); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("group offsets after start-up %v, want the ends %v", got, want)
			}
			exp := produce(t, brokers, topic, integrationSeed, 1_000, 2_000)
			if res := runJob(t, cfg); res.Records != exp.Events {
				t.Fatalf("second run processed %d records, want the %d produced since", res.Records, exp.Events)
			}
		})
	}
}

func groupOffsets(t *testing.T, brokers []string, group, topic string) map[int32]int64 {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkautil.Config("controls-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	got, err := offsets.NewKafkaGroup(client, group, topic).Load(context.Background(), []int32{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
