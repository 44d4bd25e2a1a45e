package offsets

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/microbatch/microbatch/internal/pgbind"
	"github.com/microbatch/microbatch/internal/testutil"
	_ "modernc.org/sqlite"
)

// The cases run on a temporary SQLite file always, and on MariaDB/MySQL
// when MICROBATCH_TEST_MYSQL is set (and not -short). mb_offsets is shared
// between tests and runs on MySQL, so every case uses its own job name.
// (This package must not import writers; the connection is opened here.)

type testDB struct {
	db *sql.DB
	d  Dialect
}

func forEachDB(t *testing.T, fn func(t *testing.T, db testDB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "offsets.db")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		fn(t, setUp(t, db, SQLite))
	})
	t.Run("mysql", func(t *testing.T) {
		dsn := testutil.NeedServer(t, testutil.EnvMySQL)
		u, err := url.Parse(dsn)
		if err != nil || u.Scheme != "mysql" {
			t.Fatalf("%s: want mysql://user:pass@host:port/db", testutil.EnvMySQL)
		}
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
		if u.Port() == "" {
			cfg.Addr += ":3306"
		}
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.ParseTime, cfg.ClientFoundRows = true, true
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		fn(t, setUp(t, db, MySQL))
	})
	t.Run("postgres", func(t *testing.T) {
		cfg, err := pgx.ParseConfig(testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres)))
		if err != nil {
			t.Fatal(err)
		}
		fn(t, setUp(t, sql.OpenDB(pgbind.Connector(stdlib.GetConnector(*cfg))), Postgres))
	})
}

func setUp(t *testing.T, db *sql.DB, d Dialect) testDB {
	t.Helper()
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatalf("connecting: %v", err)
	}
	if _, err := db.ExecContext(t.Context(), Schema(d)); err != nil {
		t.Fatalf("creating mb_offsets: %v", err)
	}
	// Idempotent.
	if _, err := db.ExecContext(t.Context(), Schema(d)); err != nil {
		t.Fatalf("creating mb_offsets again: %v", err)
	}
	return testDB{db, d}
}

var nonJobChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func uniqueJob(t *testing.T) string {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	name := nonJobChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return fmt.Sprintf("%s-%x", name, n)
}

func fixedStart(m map[int32]int64) StartFunc {
	return func(p int32, _ bool) (int64, error) {
		v, ok := m[p]
		if !ok {
			return 0, fmt.Errorf("no start offset for partition %d", p)
		}
		return v, nil
	}
}

// withTx runs fn in a transaction, committing if it returns nil.
func withTx(t *testing.T, db testDB, fn func(tx *sql.Tx) error) error {
	t.Helper()
	tx, err := db.db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return nil
}

func initJob(t *testing.T, db testDB, job, topic string, parts []int32, start map[int32]int64) Claim {
	t.Helper()
	var c Claim
	err := withTx(t, db, func(tx *sql.Tx) error {
		var err error
		c, err = Init(t.Context(), tx, db.d, job, topic, parts, fixedStart(start))
		return err
	})
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	return c
}

func apply(t *testing.T, db testDB, a Advance) error {
	t.Helper()
	return withTx(t, db, func(tx *sql.Tx) error { return Apply(t.Context(), tx, a) })
}

func load(t *testing.T, db testDB, job, topic string) map[int32]Position {
	t.Helper()
	pos, err := Load(t.Context(), db.db, job, topic)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return pos
}

func TestInit(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		job := uniqueJob(t)

		// First claim: epoch 1, rows at the start offsets.
		c1 := initJob(t, db, job, "events", []int32{0, 1, 2}, map[int32]int64{0: 0, 1: 100, 2: 7})
		if c1.Epoch != 1 || c1.LastBatch != 0 {
			t.Fatalf("first Init: epoch %d last batch %d, want 1 and 0", c1.Epoch, c1.LastBatch)
		}
		want := map[int32]Position{0: {0, 0, 1, 0}, 1: {1, 100, 1, 0}, 2: {2, 7, 1, 0}}
		for p, w := range want {
			if c1.Positions[p] != w {
				t.Errorf("claim position %d = %+v, want %+v", p, c1.Positions[p], w)
			}
		}
		if got := load(t, db, job, "events"); len(got) != 3 || got[1] != want[1] {
			t.Errorf("stored positions %+v", got)
		}

		// Commit some batches, then a second instance claims the job.
		for i, a := range []Advance{
			{Job: job, Topic: "events", Partition: 0, From: 0, To: 10, Epoch: 1, BatchID: 1},
			{Job: job, Topic: "events", Partition: 1, From: 100, To: 150, Epoch: 1, BatchID: 1},
			{Job: job, Topic: "events", Partition: 0, From: 10, To: 12, Epoch: 1, BatchID: 2},
		} {
			if err := apply(t, db, a); err != nil {
				t.Fatalf("advance %d: %v", i, err)
			}
		}
		// A partition was added meanwhile; its start offset is consulted,
		// the others' are not (start fails for them).
		c2 := initJob(t, db, job, "events", []int32{0, 1, 2, 3}, map[int32]int64{3: 42})
		if c2.Epoch != 2 || c2.LastBatch != 2 {
			t.Fatalf("second Init: epoch %d last batch %d, want 2 and 2", c2.Epoch, c2.LastBatch)
		}
		want = map[int32]Position{0: {0, 12, 2, 2}, 1: {1, 150, 2, 1}, 2: {2, 7, 2, 0}, 3: {3, 42, 2, 0}}
		if len(c2.Positions) != len(want) {
			t.Errorf("second claim has %d positions, want %d", len(c2.Positions), len(want))
		}
		stored := load(t, db, job, "events")
		for p, w := range want {
			if c2.Positions[p] != w {
				t.Errorf("second claim position %d = %+v, want %+v", p, c2.Positions[p], w)
			}
			if stored[p] != w {
				t.Errorf("stored position %d = %+v, want %+v (stamped with epoch 2)", p, stored[p], w)
			}
		}

		// A third claim keeps counting.
		if c3 := initJob(t, db, job, "events", []int32{0}, nil); c3.Epoch != 3 || c3.LastBatch != 2 {
			t.Errorf("third Init: epoch %d last batch %d, want 3 and 2", c3.Epoch, c3.LastBatch)
		}
	})
}

func TestInitIsolation(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		jobA, jobB := uniqueJob(t), uniqueJob(t)
		initJob(t, db, jobA, "events", []int32{0}, map[int32]int64{0: 5})
		initJob(t, db, jobA, "events", []int32{0}, nil)
		// Another job starts at epoch 1 regardless of jobA's epochs.
		if c := initJob(t, db, jobB, "events", []int32{0}, map[int32]int64{0: 9}); c.Epoch != 1 || c.Positions[0].NextOffset != 9 {
			t.Errorf("other job's claim: %+v", c)
		}
		// Two topics of one job keep separate rows.
		c := initJob(t, db, jobA, "other", []int32{0}, map[int32]int64{0: 77})
		if c.Epoch != 3 || len(c.Positions) != 1 || c.Positions[0].NextOffset != 77 {
			t.Errorf("second topic's claim: %+v", c)
		}
		if got := load(t, db, jobA, "events"); got[0].NextOffset != 5 {
			t.Errorf("first topic's row moved: %+v", got[0])
		}
	})
}

func TestInitStartError(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		job := uniqueJob(t)
		errStart := errors.New("listing offsets failed")
		err := withTx(t, db, func(tx *sql.Tx) error {
			_, err := Init(t.Context(), tx, db.d, job, "events", []int32{0, 1},
				func(p int32, _ bool) (int64, error) {
					if p == 1 {
						return 0, errStart
					}
					return 0, nil
				})
			return err
		})
		if !errors.Is(err, errStart) {
			t.Fatalf("Init = %v, want the start function's error", err)
		}
		if got := load(t, db, job, "events"); len(got) != 0 {
			t.Errorf("rows left after a failed (rolled back) Init: %+v", got)
		}
	})
}

func TestApply(t *testing.T) {
	type tc struct {
		name    string
		a       func(job string) Advance
		wantErr error
		want    Position // partition 0's row afterwards
	}
	// Every case starts from: partition 0 at 10, epoch 2, batch 5.
	tests := []tc{
		{"advance", func(j string) Advance { return Advance{j, "events", 0, 10, 20, 2, 6} }, nil, Position{0, 20, 2, 6}},
		{"advance with a newer epoch", func(j string) Advance { return Advance{j, "events", 0, 10, 20, 3, 6} }, nil, Position{0, 20, 3, 6}},
		{"empty advance", func(j string) Advance { return Advance{j, "events", 0, 10, 10, 2, 6} }, nil, Position{0, 10, 2, 6}},
		{"older epoch is fenced", func(j string) Advance { return Advance{j, "events", 0, 10, 20, 1, 6} }, ErrFenced, Position{0, 10, 2, 5}},
		{"older epoch and wrong offset is fenced", func(j string) Advance { return Advance{j, "events", 0, 0, 20, 1, 6} }, ErrFenced, Position{0, 10, 2, 5}},
		{"offset behind", func(j string) Advance { return Advance{j, "events", 0, 0, 10, 2, 6} }, ErrConflict, Position{0, 10, 2, 5}},
		{"offset ahead", func(j string) Advance { return Advance{j, "events", 0, 15, 20, 2, 6} }, ErrConflict, Position{0, 10, 2, 5}},
		{"missing partition", func(j string) Advance { return Advance{j, "events", 9, 10, 20, 2, 6} }, ErrNoRow, Position{0, 10, 2, 5}},
		{"missing topic", func(j string) Advance { return Advance{j, "nope", 0, 10, 20, 2, 6} }, ErrNoRow, Position{0, 10, 2, 5}},
		{"missing job", func(j string) Advance { return Advance{j + "-x", "events", 0, 10, 20, 2, 6} }, ErrNoRow, Position{0, 10, 2, 5}},
	}
	forEachDB(t, func(t *testing.T, db testDB) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				job := uniqueJob(t)
				initJob(t, db, job, "events", []int32{0, 1}, map[int32]int64{0: 0, 1: 0})
				initJob(t, db, job, "events", []int32{0, 1}, nil) // epoch 2
				if err := apply(t, db, Advance{job, "events", 0, 0, 10, 2, 5}); err != nil {
					t.Fatalf("setting up: %v", err)
				}
				a := tc.a(job)
				err := apply(t, db, a)
				if tc.wantErr == nil && err != nil {
					t.Fatalf("Apply(%+v) = %v", a, err)
				}
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("Apply(%+v) = %v, want %v", a, err, tc.wantErr)
					}
					for _, other := range []error{ErrFenced, ErrConflict, ErrNoRow} {
						if other != tc.wantErr && errors.Is(err, other) {
							t.Errorf("error %v is also %v", err, other)
						}
					}
				}
				pos := load(t, db, job, "events")
				if pos[0] != tc.want {
					t.Errorf("row afterwards %+v, want %+v", pos[0], tc.want)
				}
				if pos[1] != (Position{1, 0, 2, 0}) {
					t.Errorf("another partition's row moved: %+v", pos[1])
				}
				landed, err := Landed(t.Context(), db.db, a)
				if err != nil {
					t.Fatalf("Landed: %v", err)
				}
				if landed != (tc.wantErr == nil) {
					t.Errorf("Landed(%+v) = %v after Apply returned %v", a, landed, tc.wantErr)
				}
			})
		}
	})
}

// TestApplyTwiceInOneTransaction: the row guards against the same batch
// being applied twice even within one transaction.
func TestApplyTwiceInOneTransaction(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		job := uniqueJob(t)
		initJob(t, db, job, "events", []int32{0}, map[int32]int64{0: 0})
		a := Advance{job, "events", 0, 0, 10, 1, 1}
		err := withTx(t, db, func(tx *sql.Tx) error {
			if err := Apply(t.Context(), tx, a); err != nil {
				return err
			}
			return Apply(t.Context(), tx, a)
		})
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("second Apply in one transaction = %v, want ErrConflict", err)
		}
		if pos := load(t, db, job, "events"); pos[0].NextOffset != 0 {
			t.Errorf("rolled-back transaction left the row at %d", pos[0].NextOffset)
		}
	})
}

func TestLanded(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		job := uniqueJob(t)
		initJob(t, db, job, "events", []int32{0}, map[int32]int64{0: 0})
		a := Advance{job, "events", 0, 0, 10, 1, 1}
		if ok, err := Landed(t.Context(), db.db, a); err != nil || ok {
			t.Fatalf("Landed before Apply = %v, %v", ok, err)
		}
		// Rolled back: not landed.
		_ = withTx(t, db, func(tx *sql.Tx) error {
			if err := Apply(t.Context(), tx, a); err != nil {
				t.Fatal(err)
			}
			return errors.New("roll back")
		})
		if ok, err := Landed(t.Context(), db.db, a); err != nil || ok {
			t.Fatalf("Landed after rollback = %v, %v", ok, err)
		}
		if err := apply(t, db, a); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			a    Advance
			want bool
		}{
			{"the exact advance", a, true},
			{"other end", Advance{job, "events", 0, 0, 11, 1, 1}, false},
			{"other batch", Advance{job, "events", 0, 0, 10, 1, 2}, false},
			{"other epoch", Advance{job, "events", 0, 0, 10, 2, 1}, false},
			{"other partition", Advance{job, "events", 1, 0, 10, 1, 1}, false},
			{"other job", Advance{job + "-x", "events", 0, 0, 10, 1, 1}, false},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ok, err := Landed(t.Context(), db.db, tc.a)
				if err != nil || ok != tc.want {
					t.Fatalf("Landed(%+v) = %v, %v; want %v", tc.a, ok, err, tc.want)
				}
			})
		}
		// Once the next batch moved the row on, the earlier advance no
		// longer shows (the caller settles outcomes before moving on).
		if err := apply(t, db, Advance{job, "events", 0, 10, 20, 1, 2}); err != nil {
			t.Fatal(err)
		}
		if ok, _ := Landed(t.Context(), db.db, a); ok {
			t.Error("Landed still true for a superseded advance")
		}
	})
}

// TestZombieIsFenced: instance A claims the job, instance B claims it after
// it; A's next commit is refused, B's goes through, and A can't sneak in
// afterwards either.
func TestZombieIsFenced(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		job := uniqueJob(t)
		a := initJob(t, db, job, "events", []int32{0, 1}, map[int32]int64{0: 0, 1: 0})
		b := initJob(t, db, job, "events", []int32{0, 1}, map[int32]int64{0: 0, 1: 0})
		if a.Epoch != 1 || b.Epoch != 2 {
			t.Fatalf("epochs %d and %d, want 1 and 2", a.Epoch, b.Epoch)
		}
		fromA := a.Positions[0].NextOffset
		errA := apply(t, db, Advance{job, "events", 0, fromA, 10, a.Epoch, a.LastBatch + 1})
		if !errors.Is(errA, ErrFenced) {
			t.Fatalf("zombie A's Apply = %v, want ErrFenced", errA)
		}
		if err := apply(t, db, Advance{job, "events", 0, b.Positions[0].NextOffset, 10, b.Epoch, b.LastBatch + 1}); err != nil {
			t.Fatalf("B's Apply: %v", err)
		}
		// A tries again from where B left the row: still fenced.
		if err := apply(t, db, Advance{job, "events", 0, 10, 20, a.Epoch, 2}); !errors.Is(err, ErrFenced) {
			t.Fatalf("A's Apply from B's offset = %v, want ErrFenced", err)
		}
		// A's partition 1 commit too: Init stamped every row, not only
		// those B has written to.
		if err := apply(t, db, Advance{job, "events", 1, 0, 5, a.Epoch, 1}); !errors.Is(err, ErrFenced) {
			t.Fatalf("A's Apply on an untouched partition = %v, want ErrFenced", err)
		}
		pos := load(t, db, job, "events")
		if pos[0] != (Position{0, 10, 2, 1}) || pos[1] != (Position{1, 0, 2, 0}) {
			t.Errorf("rows %+v", pos)
		}
	})
}

// TestZombieConcurrentCommit: A's transaction has applied its advance but
// not committed when B claims. Whatever the database does with the lock,
// at most one of them moves the row, and B is never fenced by A.
func TestZombieConcurrentCommit(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.d == SQLite {
			t.Skip("SQLite serialises writers: the race can't happen")
		}
		job := uniqueJob(t)
		initJob(t, db, job, "events", []int32{0}, map[int32]int64{0: 0})
		txA, err := db.db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer txA.Rollback()
		if err := Apply(t.Context(), txA, Advance{job, "events", 0, 0, 10, 1, 1}); err != nil {
			t.Fatal(err)
		}
		claimed := make(chan Claim, 1)
		claimErr := make(chan error, 1)
		go func() {
			tx, err := db.db.BeginTx(context.Background(), nil)
			if err != nil {
				claimErr <- err
				return
			}
			defer tx.Rollback()
			c, err := Init(context.Background(), tx, db.d, job, "events", []int32{0}, fixedStart(map[int32]int64{0: 0}))
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				claimErr <- err
				return
			}
			claimed <- c
		}()
		// B's Init waits for A's row lock; A commits first.
		select {
		case c := <-claimed:
			t.Fatalf("B claimed (%+v) while A held the row lock", c)
		case err := <-claimErr:
			t.Fatalf("B's Init: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if err := txA.Commit(); err != nil {
			t.Fatalf("A's commit: %v", err)
		}
		var c Claim
		select {
		case c = <-claimed:
		case err := <-claimErr:
			t.Fatalf("B's Init: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("B's Init did not finish")
		}
		if c.Epoch != 2 || c.Positions[0].NextOffset != 10 || c.LastBatch != 1 {
			t.Fatalf("B's claim %+v, want epoch 2 from offset 10 after batch 1", c)
		}
		if err := apply(t, db, Advance{job, "events", 0, 10, 20, 1, 2}); !errors.Is(err, ErrFenced) {
			t.Fatalf("A's next Apply = %v, want ErrFenced", err)
		}
	})
}

// TestInitNewJob: start is told the job is new only while it has no rows
// for the topic, so "latest" can't skip what arrived in a partition added
// to a running job.
func TestInitNewJob(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		job := uniqueJob(t)
		calls := map[int32]bool{}
		start := func(p int32, newJob bool) (int64, error) {
			calls[p] = newJob
			return 100, nil
		}
		for _, parts := range [][]int32{{0, 1}, {0, 1, 2}} {
			err := withTx(t, db, func(tx *sql.Tx) error {
				_, err := Init(t.Context(), tx, db.d, job, "events", parts, start)
				return err
			})
			if err != nil {
				t.Fatalf("Init(%v): %v", parts, err)
			}
		}
		want := map[int32]bool{0: true, 1: true, 2: false}
		if len(calls) != len(want) {
			t.Fatalf("start called for %v, want %v", calls, want)
		}
		for p, nj := range want {
			if calls[p] != nj {
				t.Errorf("partition %d: newJob=%v, want %v", p, calls[p], nj)
			}
		}
	})
}

func claimParts(t *testing.T, db testDB, job string, all, mine []int32, minEpoch int64, start map[int32]int64) Claim {
	t.Helper()
	var c Claim
	err := withTx(t, db, func(tx *sql.Tx) error {
		var err error
		c, err = ClaimPartitions(t.Context(), tx, db.d, job, "events", all, mine, minEpoch, fixedStart(start))
		return err
	})
	if err != nil {
		t.Fatalf("ClaimPartitions: %v", err)
	}
	return c
}

// TestClaimPartitions: members of a consumer group claim their partitions
// generation by generation. Each claim is newer than every one before it
// (even when the generation restarted at 1), stamps only the member's rows,
// creates every missing row at the start offset once (a new job's
// start-from is not re-resolved by later members), and fences the
// partitions' previous owner without touching the other members'.
func TestClaimPartitions(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		job := uniqueJob(t)
		all := []int32{0, 1, 2, 3}
		// Generation 5: A gets 0,1 and B 2,3.
		a := claimParts(t, db, job, all, []int32{0, 1}, 5, map[int32]int64{0: 100, 1: 100, 2: 100, 3: 100})
		b := claimParts(t, db, job, all, []int32{2, 3}, 5, map[int32]int64{0: 999, 1: 999, 2: 999, 3: 999})
		if a.Epoch != 5 || b.Epoch != 6 {
			t.Fatalf("epochs %d, %d; want 5 (the generation) and 6 (newer than A's)", a.Epoch, b.Epoch)
		}
		if len(a.Positions) != 2 || a.Positions[1].NextOffset != 100 {
			t.Errorf("A's positions %+v, want partitions 0 and 1 at 100", a.Positions)
		}
		if b.Positions[2].NextOffset != 100 {
			t.Errorf("B starts partition 2 at %d, want 100: the rows A created pin the start for the whole topic", b.Positions[2].NextOffset)
		}
		// Both commit their own partitions.
		if err := apply(t, db, Advance{job, "events", 0, 100, 110, a.Epoch, 1}); err != nil {
			t.Fatalf("A on 0: %v", err)
		}
		if err := apply(t, db, Advance{job, "events", 2, 100, 120, b.Epoch, 1}); err != nil {
			t.Fatalf("B on 2: %v", err)
		}
		// A rebalance after the group was deleted: generation 1 again. B
		// takes partition 1 from A; the claim is still the newest.
		b2 := claimParts(t, db, job, all, []int32{1, 2, 3}, 1, nil)
		if b2.Epoch != 7 {
			t.Fatalf("epoch %d after a generation reset, want 7", b2.Epoch)
		}
		if err := apply(t, db, Advance{job, "events", 1, 100, 105, a.Epoch, 2}); !errors.Is(err, ErrFenced) {
			t.Fatalf("A (zombie) on partition 1 it lost = %v, want ErrFenced", err)
		}
		if err := apply(t, db, Advance{job, "events", 0, 110, 115, a.Epoch, 2}); err != nil {
			t.Fatalf("A on partition 0, still its own: %v", err)
		}
		if err := apply(t, db, Advance{job, "events", 1, 100, 105, b2.Epoch, 2}); err != nil {
			t.Fatalf("B on partition 1: %v", err)
		}
		pos := load(t, db, job, "events")
		want := map[int32]Position{0: {0, 115, 5, 2}, 1: {1, 105, 7, 2}, 2: {2, 120, 7, 1}, 3: {3, 100, 7, 0}}
		for p, w := range want {
			if pos[p] != w {
				t.Errorf("row %d = %+v, want %+v", p, pos[p], w)
			}
		}
		// A partition the topic doesn't have (as far as the caller knows).
		err := withTx(t, db, func(tx *sql.Tx) error {
			_, err := ClaimPartitions(t.Context(), tx, db.d, job, "events", all, []int32{9}, 1, fixedStart(nil))
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "events/9") {
			t.Errorf("claiming an unknown partition: %v, want an error naming events/9", err)
		}
	})
}
