package strategies

import (
	"context"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/checkpoint"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// DeadLetterTopicSuffix names the Kafka sink's dead-letter topic:
// <output topic>-dead-letters, written in the same transactions.
const DeadLetterTopicSuffix = checkpoint.DeadLetterTopicSuffix

// parseCheckpointSink reads a checkpoint-mode sink DSN (checkpoint.ParseSink).
func parseCheckpointSink(dsn string, mode SinkMode) (checkpoint.SinkSpec, error) {
	return checkpoint.ParseSink(dsn, mode)
}

// checkpointConfig is the part of c that checkpoint mode runs with.
func (c Config) checkpointConfig() checkpoint.Config {
	cc := checkpoint.Config{
		Topic:          c.Topic,
		Job:            c.Job,
		StartLatest:    c.StartFrom == StartLatest,
		Sink:           c.Sink,
		SinkMode:       c.Checkpoint.SinkMode,
		Kafka:          c.Kafka,
		ConnectTimeout: c.ConnectTimeout,
		Connect: func(ctx context.Context, open func(context.Context) error) error {
			return Connect(ctx, c.ConnectTimeout, open)
		},
		OperatorParallelism: c.Checkpoint.OperatorParallelism,
		Interval:            c.Checkpoint.Interval,
		Timeout:             c.Checkpoint.Timeout,
		StateBackend:        c.Checkpoint.StateBackend,
		StateDir:            c.Checkpoint.StateDir,
		KafkaTxnTimeout:     c.Checkpoint.KafkaTxnTimeout,
		MaxRestartTime:      c.Checkpoint.MaxRestartTime,
		OutageTimeout:       max(c.OutageTimeout, 0), // NoOutageTimeout: 0, forever
		OnOutage:            c.OnOutage,
		KafkaName:           kafkaName(c),
		UntilIdle:           c.UntilIdle,
		NewSpool:            func() checkpoint.Spool { return spool{newDLSpool()} },
		Logger:              c.Logger,
		OnProgress:          c.OnProgress,
		OnCheckpointFailure: c.Checkpoint.OnFailure,
		OnRecovery:          c.Checkpoint.OnRecovery,
		CrashPoint:          c.CrashPoint,
	}
	if sw := streamWorkOf(c); sw != nil {
		cc.Work = checkpoint.Work{Upsert: sw.upsert(), Decode: sw.decodeAny, Rows: sw.rowsOf,
			Claim: func(ctx context.Context, w *sqlsink.Writer) error { return claimSQLTable(ctx, c, w) }}
	}
	return cc
}

// validateCheckpoint checks the settings of checkpoint mode.
func (c Config) validateCheckpoint() error { return c.checkpointConfig().Validate() }

// runCheckpoint runs checkpoint mode (checkpoint.Run) reading src.
func runCheckpoint(ctx context.Context, cfg Config, src *batch.KafkaSource) (Result, error) {
	res, err := checkpoint.Run(ctx, cfg.checkpointConfig(), src)
	return Result{Summary: res.Summary, Started: res.Started, Sink: res.Sink}, err
}

// spool is a dlSpool as the XA sink of checkpoint mode spools its dead
// letters.
type spool struct{ s *dlSpool }

func (s spool) Add(d record.DeadLetter) error                 { return s.s.add(d) }
func (s spool) Each(fn func([]record.DeadLetter) error) error { return s.s.each(fn) }
func (s spool) Reset() error                                  { return s.s.reset() }
func (s spool) Close()                                        { s.s.close() }
