package strategies

import (
	"fmt"
	"strings"

	"github.com/microbatch/microbatch/strategies/checkpoint"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// SinkDisplay names a sink DSN for people — logs, status pages — without
// its password ("xxxxx" in its place), as Result.Sink does once a run has
// opened the sink. A DSN that does not parse is named by its scheme only.
func SinkDisplay(dsn string) string {
	switch {
	case shared.IsKafkaDSN(dsn) || shared.IsFileDSN(dsn):
		spec, err := parseCheckpointSink(dsn, SinkMode2PC)
		if err != nil {
			break
		}
		if spec.Kind == checkpoint.SinkKafka {
			return fmt.Sprintf("kafka://%s/%s", strings.Join(spec.Brokers, ","), spec.Topic)
		}
		return "file://" + spec.Dir
	case shared.IsRedisDSN(dsn):
		if _, display, err := redissink.ParseDSN(dsn); err == nil {
			return display
		}
	default:
		if t, err := sqlsink.ParseDSN(dsn); err == nil {
			return t.Display
		}
	}
	if scheme, _, ok := strings.Cut(dsn, "://"); ok {
		return scheme + "://…"
	}
	return "(sink)"
}
