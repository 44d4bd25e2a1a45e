package sqlsink

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"

	"github.com/microbatch/microbatch/writers"
)

// The errors a PostgreSQL sink meets when a transaction may succeed on
// another attempt, provoked on the real server, are writers.IsRetryable:
// a deadlock (40P01), a serialization failure (40001), the session ended
// by the server (57P01, as in a failover or a restart) and a refused
// connection; a constraint violation is not.
func TestPostgresRetryableErrors(t *testing.T) {
	dsn := pgDSN(t)
	w := openPG(t, dsn)
	ctx := context.Background()
	db := w.DB()
	for _, stmt := range []string{
		`CREATE TABLE t_retry (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)`,
		`INSERT INTO t_retry (id, v) VALUES (1, 0), (2, 0)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("deadlock 40P01", func(t *testing.T) { provokeDeadlock(t, db) })
	t.Run("serialization failure 40001", func(t *testing.T) { provokeSerializationFailure(t, db) })
	t.Run("session terminated 57P01", func(t *testing.T) { provokeTerminatedSession(t, db) })
	t.Run("connection refused", func(t *testing.T) {
		_, err := Open(ctx, "postgres://mb:pw@127.0.0.1:1/db?sslmode=disable&connect_timeout=2")
		checkRetryable(t, err, "", true)
	})
	t.Run("unique violation 23505 is not retryable", func(t *testing.T) {
		_, err := db.ExecContext(ctx, `INSERT INTO t_retry (id, v) VALUES (1, 0)`)
		checkRetryable(t, err, "23505", false)
	})
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// checkRetryable checks err has SQLSTATE code (unless "") and is
// writers.IsRetryable as want says.
func checkRetryable(t *testing.T, err error, code string, want bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want SQLSTATE %q", code)
	}
	if code != "" && sqlstate(err) != code {
		t.Fatalf("error %v (SQLSTATE %q), want %s", err, sqlstate(err), code)
	}
	if got := writers.IsRetryable(err); got != want {
		t.Fatalf("IsRetryable(%v) = %v, want %v", err, got, want)
	}
}

// provokeDeadlock: two transactions update rows 1 and 2 in opposite order.
func provokeDeadlock(t *testing.T, db *sqlx.DB) {
	ctx := context.Background()
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	mustExec(t, tx1, `UPDATE t_retry SET v = v + 1 WHERE id = 1`)
	mustExec(t, tx2, `UPDATE t_retry SET v = v + 1 WHERE id = 2`)
	errc := make(chan error, 1)
	go func() {
		_, err := tx1.ExecContext(ctx, `UPDATE t_retry SET v = v + 1 WHERE id = 2`) // waits for tx2
		errc <- err
	}()
	waitForLockWait(t, db)
	_, err2 := tx2.ExecContext(ctx, `UPDATE t_retry SET v = v + 1 WHERE id = 1`) // closes the cycle
	err1 := <-errc
	if err1 != nil {
		checkRetryable(t, err1, "40P01", true)
	} else {
		checkRetryable(t, err2, "40P01", true)
	}
}

// provokeSerializationFailure: a repeatable-read transaction updates a row
// another committed since its snapshot.
func provokeSerializationFailure(t *testing.T, db *sqlx.DB) {
	ctx := context.Background()
	tx1, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	var v int
	if err := tx1.QueryRowContext(ctx, `SELECT v FROM t_retry WHERE id = 1`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `UPDATE t_retry SET v = v + 1 WHERE id = 1`)
	_, err = tx1.ExecContext(ctx, `UPDATE t_retry SET v = v + 1 WHERE id = 1`)
	checkRetryable(t, err, "40001", true)
}

// provokeTerminatedSession: the server ends the session inside a
// transaction (pg_terminate_backend, as a failover or a restart does).
func provokeTerminatedSession(t *testing.T, db *sqlx.DB) {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `SELECT pg_terminate_backend(?)`, pid)
	time.Sleep(100 * time.Millisecond) // the FATAL is sent; read it with the next statement
	_, err = tx.ExecContext(ctx, `UPDATE t_retry SET v = v + 1 WHERE id = 1`)
	checkRetryable(t, err, "", true)
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func mustExec(t *testing.T, ex execer, q string, args ...any) {
	t.Helper()
	if _, err := ex.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// waitForLockWait returns once a session of the database waits for a lock.
func waitForLockWait(t *testing.T, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(context.Background(),
			`SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatal("no session waits for a lock after 10 s")
}
