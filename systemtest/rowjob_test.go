package systemtest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
)

// TestRowJobCrashes runs row jobs — appends and upserts — on another
// program's JSON (bad records, byte-identical repeats, and for upserts
// Kafka keys and tombstones) against Apache Kafka, MariaDB, SQLite and
// Redis, SIGKILLs them at each crash point (and at random moments, txn),
// restarts them, and judges the sink with verify --sql: after a final run
// until idle an append must hold every accepted record exactly once (a
// multiset: a repeated record is two rows), an upsert each key's latest
// record (no row after a tombstone), and the bad records must be rejected
// and dead-lettered. The controls prove the kills land: at-least-once
// killed between its write and its offsets must fail with rows extra (the
// duplicates), at-most-once killed between its offsets and its write with
// rows missing.
func TestRowJobCrashes(t *testing.T) {
	t.Parallel()
	kafka := testutil.NeedServer(t, testutil.EnvKafka)
	mariadb := func(t *testing.T) string {
		return testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	}
	sqlite := func(t *testing.T) string { return "sqlite://" + t.TempDir() + "/rows.db" }
	postgres := func(t *testing.T) string {
		return testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	}
	redis := func(t *testing.T) string { return testutil.NeedServer(t, testutil.EnvRedis) }
	idemPoints := []string{strategies.CrashAfterPlan, strategies.CrashMidWrite, strategies.CrashAfterWriteBeforeOffsets}
	wal := []string{"--sink-mode", string(strategies.SinkModeWAL)}
	for i, c := range []struct {
		name     string
		strategy strategies.Strategy
		sink     func(t *testing.T) string
		runExtra []string
		q        rowQuery
		keyed    bool
		points   []string // nil: sqlRandomKills random kills
		// mustLand: checkpoint crash points after which the sink must hold
		// the killed run's work for recovery to finish.
		mustLand []string
	}{
		{"append/txn/crash-points", strategies.StrategyTxn, mariadb, nil, rowAudit, false, strategies.CrashPoints, nil},
		{"append/txn/random-kills", strategies.StrategyTxn, mariadb, nil, rowPlain, false, nil, nil},
		{"append/single/crash-points", strategies.StrategySingle, mariadb, nil, rowPlain, false, strategies.CrashPoints, nil},
		{"append/checkpoint-xa/crash-points", strategies.StrategyCheckpoint, mariadb, nil, rowAudit, false, strategies.CheckpointCrashPoints,
			[]string{strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit}},
		{"append/checkpoint-wal/crash-points", strategies.StrategyCheckpoint, mariadb, wal, rowPlain, false, strategies.CheckpointCrashPoints,
			[]string{strategies.CrashAfterCheckpointBeforeCommit}},
		{"append/sqlite-txn/crash-points", strategies.StrategyTxn, sqlite, nil, rowPlainSQLite, false, strategies.CrashPoints, nil},
		{"upsert/txn/crash-points", strategies.StrategyTxn, mariadb, nil, rowUpsert, true, strategies.CrashPoints, nil},
		{"upsert/single/crash-points", strategies.StrategySingle, mariadb, nil, rowUpsert, true, strategies.CrashPoints, nil},
		{"upsert/checkpoint-xa/crash-points", strategies.StrategyCheckpoint, mariadb, nil, rowUpsert, true, strategies.CheckpointCrashPoints,
			[]string{strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit}},
		{"append/postgres-txn/crash-points", strategies.StrategyTxn, postgres, nil, rowAuditPG, false, strategies.CrashPoints, nil},
		{"upsert/postgres-txn/crash-points", strategies.StrategyTxn, postgres, nil, rowUpsertPG, true, strategies.CrashPoints, nil},
		{"upsert/idempotent/crash-points", strategies.StrategyIdempotent, redis, nil, rowUpsertRedis, true, idemPoints, nil},
		{"upsert/postgres-checkpoint-pg2pc/crash-points", strategies.StrategyCheckpoint, freshPostgresForCheckpoint, nil, rowUpsertPG, true, strategies.CheckpointCrashPoints,
			[]string{strategies.CrashAfterPrecommit, strategies.CrashAfterCheckpointBeforeCommit}},
		{"append/postgres-checkpoint-wal/crash-points", strategies.StrategyCheckpoint, postgres, wal, rowAuditPG, false, strategies.CheckpointCrashPoints,
			[]string{strategies.CrashAfterCheckpointBeforeCommit}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j, ri := newRowCrashJob(t, c.strategy, kafka, c.sink(t), c.q, uint64(300+i), c.keyed)
			j.runExtra = append(j.runExtra, c.runExtra...)
			j.watchSink(c.runExtra)
			if c.points == nil {
				for range sqlRandomKills {
					j.topUp(sqlCkptTopUp)
					j.randomKill()
				}
			} else {
				j.in.produce(t, sqlInitial)
			}
			for _, p := range c.points {
				if c.strategy != strategies.StrategyCheckpoint {
					// The second reach: one partition task of the first
					// batch got through it, or the first batch is done
					// and the second planned.
					j.crashAt(p, 2)
					j.in.produce(t, sqlPointTopUp)
					continue
				}
				j.checkpointCrashAt(p, slices.Contains(c.mustLand, p))
			}
			j.drain()
			v := j.verify()
			j.requireExact(v)
			if c.keyed {
				ri.requireKeys(v)
			}
			if c.points == nil {
				t.Logf("%d kills, %d inside a batch; %d records, %d bad", j.kills, j.landed, j.in.n, j.in.bad)
				// As in TestSQLJobCrashes: the aligned kills land by
				// construction unless every try came too late.
				if j.landed == 0 || j.landed*4 < j.kills {
					t.Errorf("only %d of %d kills landed inside a batch, want a quarter at least (logs in %s)", j.landed, j.kills, j.logDir)
				}
			}
		})
	}

	for i, c := range []struct {
		strategy strategies.Strategy
		point    string
	}{
		{strategies.StrategyAtLeastOnce, strategies.CrashAfterWriteBeforeOffsets},
		{strategies.StrategyAtMostOnce, strategies.CrashAfterOffsetsBeforeWrite},
	} {
		t.Run("append/"+string(c.strategy)+"/control", func(t *testing.T) {
			t.Parallel()
			j, _ := newRowCrashJob(t, c.strategy, kafka, mariadb(t), rowPlain, uint64(400+i), false)
			j.in.produce(t, sqlInitial)
			j.crashAt(c.point, 2)
			j.in.produce(t, sqlPointTopUp)
			j.drain()
			requireRowsControl(t, j.verify(), c.strategy == strategies.StrategyAtLeastOnce, j.logDir)
		})
	}
}

// TestRowJobInput checks the row crash tests' input against the queries a
// server isn't needed for — SQLite's append bound to the table the test
// creates, and the Redis upsert — with no Kafka: exactly the bad records
// are rejected (a repeated bad record twice), repeated records are equal
// rows, and tombstones delete.
func TestRowJobInput(t *testing.T) {
	for _, c := range []struct {
		q      rowQuery
		sqlite bool
		keyed  bool
	}{{rowPlainSQLite, true, false}, {rowUpsertRedis, false, true}} {
		t.Run(c.q.name, func(t *testing.T) {
			in := &sqlInput{topic: "topic", rng: rand.New(rand.NewPCG(1, 2))}
			ri := newRowInput(t, in, c.keyed, c.q.ddl == "")
			q, err := sqljob.Compile(fmt.Sprintf(c.q.stmt, "t_"+c.q.name, "topic"), sqljob.Options{SQLite: c.sqlite})
			if err != nil {
				t.Fatal(err)
			}
			if c.sqlite {
				w := sinktest.OpenSQL(t, "sqlite://"+t.TempDir()+"/rows.db")
				if _, err := w.DB().ExecContext(t.Context(), fmt.Sprintf(c.q.ddl, "t_"+c.q.name)); err != nil {
					t.Fatal(err)
				}
				if err := q.CheckTable(t.Context(), w.DB()); err != nil {
					t.Fatal(err)
				}
			}
			var rejected, deletes, rows int64
			counts := map[string]int{}
			for i := range int64(3000) {
				m := ri.msg(i)
				var key, value []byte
				if m.Key != nil {
					key, _ = m.Key.Encode()
				}
				if m.Value != nil {
					value, _ = m.Value.Encode()
				}
				row, err := q.Row(value, sqljob.Meta{Key: key, Partition: m.Partition, Offset: i})
				if err != nil && !sqljob.IsRejection(err) {
					t.Fatal(err)
				}
				switch {
				case err != nil:
					rejected++
				case row.Delete:
					deletes++
				case row.Values != nil:
					rows++
					counts[fmt.Sprintf("%q", row.Values)]++
				}
			}
			if rejected != in.bad || in.bad < 100 {
				t.Errorf("%d rejected, %d bad", rejected, in.bad)
			}
			repeats := 0
			for _, n := range counts {
				repeats += n - 1
			}
			if c.keyed && deletes < 100 {
				t.Errorf("%d tombstones deleted, want 100 at least", deletes)
			}
			if !c.keyed && repeats < 3000/rowRepeatEvery/2 {
				t.Errorf("%d rows equal to another, want %d at least", repeats, 3000/rowRepeatEvery/2)
			}
			t.Logf("%d rows (%d equal to another), %d rejected, %d deletes", rows, repeats, rejected, deletes)
		})
	}
}
