package strategies

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/checkpoint"
	"github.com/microbatch/microbatch/writers/filesink"
)

// readOutputTotals sums the committed output records of checkpoint mode's
// Kafka topic (read-committed, up to the last stable offset) or files: one
// output record per input event, so events and amount compare with what
// was produced exactly as mb_totals does.
func readOutputTotals(ctx context.Context, dsn, job string, sec kafkautil.Security) (SinkTotals, string, error) {
	spec, err := parseCheckpointSink(dsn, SinkMode2PC)
	if err != nil {
		return SinkTotals{}, "", err
	}
	t := SinkTotals{Amount: new(big.Int)}
	var amount exact.Int
	keys := map[string]bool{}
	add := func(value []byte) error {
		if strings.HasPrefix(string(value), `{"dead_letter":`) {
			t.DeadLetters++
			return nil
		}
		var o event.Output
		if err := json.Unmarshal(value, &o); err != nil {
			return fmt.Errorf("output record %q: %w", value, err)
		}
		t.Events++
		amount.Add(o.Amount)
		keys[o.Key] = true
		return nil
	}
	if spec.Kind == checkpoint.SinkFile {
		err := filesink.Read(spec.Dir, job, add)
		t.Keys, t.Amount = int64(len(keys)), amount.Big()
		return t, "files in " + spec.Dir, err
	}
	where := fmt.Sprintf("kafka %s/%s", strings.Join(spec.Brokers, ","), spec.Topic)
	if err := readTopic(ctx, sec, spec.Brokers, spec.Topic, add); err != nil {
		return t, where, err
	}
	t.Keys, t.Amount = int64(len(keys)), amount.Big()
	err = readTopic(ctx, sec, spec.Brokers, spec.Topic+DeadLetterTopicSuffix, func([]byte) error {
		t.DeadLetters++
		return nil
	})
	return t, where, err
}

// readTopic calls fn with every committed record of topic, read-committed
// from the log start to the last stable offset.
func readTopic(ctx context.Context, sec kafkautil.Security, brokers []string, topic string, fn func(value []byte) error) error {
	conf, err := sec.Config("microbatch-verify")
	if err != nil {
		return err
	}
	client, err := sec.NewClient(brokers, conf)
	if err != nil {
		return err
	}
	defer client.Close()
	src, err := batch.NewKafkaSource(client, topic)
	if err != nil {
		return err
	}
	defer src.Close()
	bounds, err := src.Bounds(ctx)
	if err != nil {
		return err
	}
	for p, b := range bounds {
		r := record.Range{Topic: topic, Partition: p, From: b.Start, To: b.End}
		if r.Len() == 0 {
			continue
		}
		if err := src.Read(ctx, r, func(rec *batch.Record) error { return fn(rec.Value) }); err != nil {
			return err
		}
	}
	return nil
}
