package strategies_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestSQLTransformClaimsTable: Run claims a SQL job's table for its job
// in every strategy that writes SQL tables, without the CLI: another job
// on the table, or the owner with a changed query, stops at start
// (ErrConfig, sqljob.ErrTableOwned) and leaves the table as it was; the
// owner runs again.
func TestSQLTransformClaimsTable(t *testing.T) {
	brokers := startKfake(t)
	sink := "sqlite://" + t.TempDir() + "/sink.db"
	topic := newTopic(t, brokers)
	produce(t, brokers, topic, 7, 0, 200)
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	compile := func(stmt string) *sqljob.Query {
		q, err := sqljob.Compile(stmt, sqljob.Options{SQLite: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.EnsureTable(ctx, w.DB()); err != nil {
			t.Fatal(err)
		}
		return q
	}
	stmt := fmt.Sprintf("INSERT INTO lib_owned SELECT `key`, COUNT(*) AS n, SUM(amount) AS amount FROM `%s` GROUP BY `key`", topic)
	q := compile(stmt)
	jobA, jobB := uniqueName(t, "a"), uniqueName(t, "b")
	cfg := baseConfig(t, brokers, topic, jobA, sink)
	cfg.Transform = strategies.SQLTransform(q)
	runJob(t, cfg)
	rows := func() string {
		var out []string
		if err := w.DB().SelectContext(ctx, &out, "SELECT `key` || ':' || n || ':' || amount FROM lib_owned ORDER BY `key`"); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, " ")
	}
	want := rows()
	if want == "" {
		t.Fatal("job a wrote no rows")
	}

	changed := compile(strings.Replace(stmt, "GROUP BY", "WHERE amount > 10 GROUP BY", 1))
	for _, c := range []struct {
		name     string
		strategy strategies.Strategy
		mode     strategies.SinkMode
		job      string
		q        *sqljob.Query
	}{
		{"txn", strategies.StrategyTxn, "", jobB, q},
		{"single", strategies.StrategySingle, "", jobB, q},
		{"at-least-once", strategies.StrategyAtLeastOnce, "", jobB, q},
		{"at-most-once", strategies.StrategyAtMostOnce, "", jobB, q},
		{"checkpoint-wal", strategies.StrategyCheckpoint, strategies.SinkModeWAL, jobB, q},
		{"changed query", strategies.StrategyTxn, "", jobA, changed},
		{"changed query, checkpoint-wal", strategies.StrategyCheckpoint, strategies.SinkModeWAL, jobA, changed},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(t, brokers, topic, c.job, sink)
			cfg.Strategy = c.strategy
			if c.strategy == strategies.StrategyCheckpoint {
				cfg.Checkpoint.SinkMode = c.mode
				cfg.Checkpoint.StateDir = t.TempDir()
			}
			cfg.Transform = strategies.SQLTransform(c.q)
			_, err := strategies.Run(ctx, cfg)
			if !errors.Is(err, strategies.ErrConfig) || !errors.Is(err, sqljob.ErrTableOwned) {
				t.Fatalf("Run: %v, want ErrConfig and sqljob.ErrTableOwned", err)
			}
			if got := rows(); got != want {
				t.Fatalf("the refused run changed the table:\n%s\nwant\n%s", got, want)
			}
		})
	}
	runJob(t, cfg) // the owner again: a restart
	if got := rows(); got != want {
		t.Fatalf("table after the owner's restart:\n%s\nwant\n%s", got, want)
	}
}
