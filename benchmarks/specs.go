package benchmarks

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// Names are the strategies the bench knows, in table order.
var Names = []string{"txn", "single", "idempotent", "at-least-once", "at-most-once",
	"checkpoint-kafka", "checkpoint-xa", "checkpoint-file", "checkpoint-wal",
	"pg-txn", "pg-single", "pg-at-least-once", "pg-at-most-once", "pg-checkpoint-2pc", "pg-checkpoint-wal"}

// pgPrefix starts the names of the strategies that write into the
// PostgreSQL sink (Options.Postgres): the same runs as the names without
// it, whose SQL sink is Options.MySQL. pg-checkpoint-2pc is checkpoint-xa's
// run, with prepared transactions (PREPARE TRANSACTION) as the 2PC sink.
const pgPrefix = "pg-"

// spec is how the bench runs one of Names.
type spec struct {
	name     string
	strategy strategies.Strategy
	needs    string // "mysql" (the --mysql sink), "xa" (MySQL/MariaDB), "postgres", "redis", or ""
	sink     string // kind of sink: sql, redis, kafka, file
	extra    []string
	points   []string // crash points this strategy reaches
}

func specOf(name string) (spec, bool) {
	if base, ok := strings.CutPrefix(name, pgPrefix); ok {
		switch base {
		case "checkpoint-xa": // XA is MySQL's; PostgreSQL's 2PC is pg-checkpoint-2pc
			return spec{}, false
		case "checkpoint-2pc":
			base = "checkpoint-xa"
		}
		s, ok := specOf(base)
		if !ok || s.sink != "sql" {
			return spec{}, false
		}
		s.name, s.needs = name, "postgres"
		return s, true
	}
	batchPoints := strategies.CrashPoints
	without := func(p string) []string {
		return slices.DeleteFunc(slices.Clone(batchPoints), func(x string) bool { return x == p })
	}
	switch name {
	case "txn", "single":
		return spec{name: name, strategy: strategies.Strategy(name), needs: "mysql", sink: "sql", points: batchPoints}, true
	case "idempotent":
		// The fold moves offsets and totals together: no offsets-before-write.
		return spec{name: name, strategy: strategies.Strategy(name), needs: "redis", sink: "redis", points: without(strategies.CrashAfterOffsetsBeforeWrite)}, true
	case "at-least-once":
		return spec{name: name, strategy: strategies.Strategy(name), needs: "mysql", sink: "sql", points: without(strategies.CrashAfterOffsetsBeforeWrite)}, true
	case "at-most-once":
		return spec{name: name, strategy: strategies.Strategy(name), needs: "mysql", sink: "sql", points: without(strategies.CrashAfterWriteBeforeOffsets)}, true
	case "checkpoint-kafka":
		return spec{name: name, strategy: strategies.StrategyCheckpoint, sink: "kafka", points: strategies.CheckpointCrashPoints}, true
	case "checkpoint-xa":
		return spec{name: name, strategy: strategies.StrategyCheckpoint, needs: "xa", sink: "sql", points: strategies.CheckpointCrashPoints}, true
	case "checkpoint-file":
		return spec{name: name, strategy: strategies.StrategyCheckpoint, sink: "file", points: strategies.CheckpointCrashPoints}, true
	case "checkpoint-wal":
		return spec{name: name, strategy: strategies.StrategyCheckpoint, needs: "mysql", sink: "sql",
			extra: []string{"--sink-mode", string(strategies.SinkModeWAL)}, points: strategies.CheckpointCrashPoints}, true
	}
	return spec{}, false
}

// skipReason says why s can't run here ("" if it can).
func (b *bench) skipReason(s spec) string {
	switch s.needs {
	case "mysql":
		if b.sql == nil {
			return "no --mysql given"
		}
	case "xa":
		if b.sql == nil {
			return "no --mysql given"
		}
		if b.sql.Dialect() != offsets.MySQL {
			return "needs MySQL/MariaDB (XA); --mysql is " + string(b.sql.Dialect())
		}
	case "postgres":
		if b.pg == nil {
			return "no --postgres given"
		}
	case "redis":
		if b.redis == nil {
			return "no --redis given"
		}
	}
	return ""
}

// job names a job of one phase of s. Short enough for an XA branch
// qualifier (64 bytes) and a Kafka transactional id.
func (b *bench) job(s spec, phase string) string {
	return fmt.Sprintf("mb%s-%s-%s", b.runID, s.name, phase)
}

// sinkFor returns the sink DSN for job.
func (b *bench) sinkFor(s spec, job string) string {
	switch s.sink {
	case "redis":
		return b.o.Redis
	case "kafka":
		return "kafka://" + strings.Join(b.brokers, ",") + "/" + job + "-out"
	case "file":
		return "file://" + filepath.Join(b.workDir, job+"-out")
	}
	if s.needs == "postgres" {
		return b.o.Postgres
	}
	return b.o.MySQL
}

// sqlOf is the SQL sink s writes into (nil for the others).
func (b *bench) sqlOf(s spec) *sqlsink.Writer {
	switch {
	case s.sink != "sql":
		return nil
	case s.needs == "postgres":
		return b.pg
	}
	return b.sql
}

// sinkLabel describes s's sink for the table.
func (b *bench) sinkLabel(s spec) string {
	switch s.sink {
	case "redis":
		return "Redis"
	case "kafka":
		return "Kafka (2PC)"
	case "file":
		return "files (2PC)"
	}
	d := "MySQL"
	switch {
	case s.needs == "postgres":
		d = "PostgreSQL"
	case b.sql != nil && b.sql.Dialect() == offsets.SQLite:
		d = "SQLite"
	}
	switch strings.TrimPrefix(s.name, pgPrefix) {
	case "checkpoint-xa":
		return d + " (XA)"
	case "checkpoint-2pc":
		return d + " (2PC, prepared transactions)"
	case "checkpoint-wal":
		return d + " (write-ahead)"
	}
	return d
}

// runArgs are the `microbatch run` arguments of s on topic for job.
func (b *bench) runArgs(s spec, topic, job string, more ...string) []string {
	args := []string{"run", "--strategy", string(s.strategy), "--brokers", strings.Join(b.brokers, ","), "--topic", topic,
		"--job", job, "--sink", b.sinkFor(s, job), "--interval", b.o.Interval.String()}
	if s.strategy == strategies.StrategyCheckpoint {
		args = append(args, "--checkpoint-interval", b.o.Interval.String(), "--state-dir", filepath.Join(b.workDir, job+"-state"))
	} else {
		// A static group member: a restart after a kill takes the
		// partitions back at once instead of waiting out the session.
		args = append(args, "--instance-id", job)
	}
	return slices.Concat(args, s.extra, more)
}
