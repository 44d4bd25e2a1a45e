package checkpoint

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// SinkKind is the two-phase writer a sink DSN and mode pick. Its text is
// the DSN scheme (kafka, file) or the SQL writer (xa, wal).
type SinkKind string

// Sink kinds.
const (
	SinkKafka SinkKind = "kafka" // a transactional producer per subtask
	SinkXA    SinkKind = "xa"    // an XA branch per subtask (MySQL/MariaDB)
	SinkPG2PC SinkKind = "pg2pc" // a prepared transaction per subtask (PostgreSQL)
	SinkFile  SinkKind = "file"  // a temp file per subtask, renamed on commit
	SinkWAL   SinkKind = "wal"   // write-ahead: rows in the checkpoint, applied after it
)

// DeadLetterTopicSuffix names the Kafka sink's dead-letter topic:
// <output topic>-dead-letters, written in the same transactions.
const DeadLetterTopicSuffix = "-dead-letters"

// SinkSpec is a parsed checkpoint-mode sink.
type SinkSpec struct {
	Kind    SinkKind
	Brokers []string // kafka
	Topic   string   // kafka
	Dir     string   // file
	DSN     string   // xa, pg2pc, wal
}

// ParseSink reads --sink for checkpoint mode:
// kafka://host:port[,host:port]/topic, file:///dir, or an SQL DSN (XA on
// MySQL/MariaDB or prepared transactions on PostgreSQL with SinkMode2PC,
// write-ahead with SinkModeWAL).
func ParseSink(dsn string, mode SinkMode) (SinkSpec, error) {
	switch {
	case shared.IsKafkaDSN(dsn):
		return parseKafkaSink(dsn, mode)
	case shared.IsFileDSN(dsn):
		if mode == SinkModeWAL {
			return SinkSpec{}, errors.New("sink: --sink-mode wal needs an SQL sink (mysql://, postgres:// or sqlite://), not file://")
		}
		dir := strings.TrimPrefix(dsn, "file://")
		if dir == "" || strings.ContainsAny(dir, "?#") {
			return SinkSpec{}, errors.New("sink: want file:///absolute/dir or file://relative/dir")
		}
		return SinkSpec{Kind: SinkFile, Dir: filepath.Clean(dir)}, nil
	case shared.IsRedisDSN(dsn):
		return SinkSpec{}, errors.New("sink: checkpoint mode writes to kafka://, mysql:// (XA), postgres:// (prepared transactions), file:// or, with --sink-mode wal, mysql://, postgres:// or sqlite://; redis:// is for --strategy idempotent")
	}
	t, err := sqlsink.ParseDSN(dsn)
	if err != nil {
		return SinkSpec{}, err
	}
	if mode == SinkModeWAL {
		return SinkSpec{Kind: SinkWAL, DSN: dsn}, nil
	}
	switch t.Dialect {
	case offsets.MySQL:
		return SinkSpec{Kind: SinkXA, DSN: dsn}, nil
	case offsets.Postgres:
		return SinkSpec{Kind: SinkPG2PC, DSN: dsn}, nil
	}
	return SinkSpec{}, errors.New("sink: SQLite has no two-phase commit (XA): use a mysql:// or postgres:// sink, or --sink-mode wal")
}

func parseKafkaSink(dsn string, mode SinkMode) (SinkSpec, error) {
	if mode == SinkModeWAL {
		return SinkSpec{}, errors.New("sink: --sink-mode wal needs an SQL sink (mysql://, postgres:// or sqlite://), not kafka://")
	}
	// Neither a broker address nor a topic holds an '@': a user (and
	// perhaps a password) is there, which this sink does not take.
	if strings.Contains(dsn, "@") {
		return SinkSpec{}, errors.New("sink: a kafka:// sink takes no user or password: it reaches Kafka with the --kafka-tls and --kafka-sasl-* settings")
	}
	hosts, topic, ok := strings.Cut(strings.TrimPrefix(dsn, "kafka://"), "/")
	brokers := kafkautil.SplitBrokers(hosts)
	if !ok || len(brokers) == 0 || !record.ValidTopic(topic) {
		return SinkSpec{}, errors.New("sink: want kafka://host:port[,host:port]/topic")
	}
	return SinkSpec{Kind: SinkKafka, Brokers: brokers, Topic: topic}, nil
}
