package writers

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
)

// sqliteErrors provokes real SQLite errors: SQLITE_BUSY (another connection
// holds the write lock and busy_timeout is 0) and a primary-key violation.
func sqliteErrors(t *testing.T) (busy, constraint error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "busy.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	ctx := context.Background()
	a, b := open(), open()
	if _, err := a.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	_, constraint = a.ExecContext(ctx, `INSERT INTO t VALUES (1)`)

	ca, err := a.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	if _, err := ca.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer ca.ExecContext(ctx, `ROLLBACK`)
	cb, err := b.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	_, busy = cb.ExecContext(ctx, `BEGIN IMMEDIATE`)

	var se *sqlite.Error
	if !errors.As(busy, &se) || se.Code()&0xff != 5 {
		t.Fatalf("could not provoke SQLITE_BUSY, got %v", busy)
	}
	if !errors.As(constraint, &se) || se.Code()&0xff != 19 {
		t.Fatalf("could not provoke SQLITE_CONSTRAINT, got %v", constraint)
	}
	return busy, constraint
}

func TestIsRetryable(t *testing.T) {
	busy, constraint := sqliteErrors(t)
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("something"), false},
		{"mysql deadlock 1213", deadlock, true},
		{"mysql lock wait timeout 1205", &mysql.MySQLError{Number: 1205}, true},
		{"mysql read-only 1290", &mysql.MySQLError{Number: 1290}, true},
		{"mysql read-only transaction 1792", &mysql.MySQLError{Number: 1792}, true},
		{"mysql read-only mode 1836", &mysql.MySQLError{Number: 1836}, true},
		{"mysql server shutdown 1053", &mysql.MySQLError{Number: 1053}, true},
		{"mariadb connection killed 1927", &mysql.MySQLError{Number: 1927}, true},
		{"mysql duplicate key 1062", &mysql.MySQLError{Number: 1062}, false},
		{"mysql syntax 1064", &mysql.MySQLError{Number: 1064}, false},
		{"mysql table missing 1146", &mysql.MySQLError{Number: 1146}, false},
		{"wrapped deadlock", fmt.Errorf("upserting into mb_totals: %w", deadlock), true},
		{"doubly wrapped deadlock", fmt.Errorf("batch 3: %w", fmt.Errorf("committing: %w", deadlock)), true},
		{"wrapped duplicate key", fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1062}), false},
		{"deadlock joined with cancel", errors.Join(deadlock, context.Canceled), false},
		{"driver.ErrBadConn", driver.ErrBadConn, true},
		{"wrapped driver.ErrBadConn", fmt.Errorf("beginning transaction: %w", driver.ErrBadConn), true},
		{"mysql.ErrInvalidConn", mysql.ErrInvalidConn, true},
		{"io.EOF", io.EOF, true},
		{"io.ErrUnexpectedEOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"connection reset", fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		{"broken pipe", syscall.EPIPE, true},
		{"context.Canceled", context.Canceled, false},
		{"wrapped context.Canceled", fmt.Errorf("committing: %w", context.Canceled), false},
		{"context.DeadlineExceeded", context.DeadlineExceeded, false},
		{"wrapped DeadlineExceeded", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"sql.ErrTxDone", sql.ErrTxDone, false},
		{"sql.ErrNoRows", sql.ErrNoRows, false},
		{"ErrBadIdentifier", ErrBadIdentifier, false},
		{"sqlite busy", busy, true},
		{"wrapped sqlite busy", fmt.Errorf("beginning transaction: %w", busy), true},
		{"sqlite constraint", constraint, false},
		{"postgres serialization failure 40001", &pgconn.PgError{Code: "40001"}, true},
		{"postgres deadlock 40P01", fmt.Errorf("upserting: %w", &pgconn.PgError{Code: "40P01"}), true},
		{"postgres lock not available 55P03", &pgconn.PgError{Code: "55P03"}, true},
		{"postgres admin shutdown 57P01", &pgconn.PgError{Code: "57P01"}, true},
		{"postgres crash shutdown 57P02", &pgconn.PgError{Code: "57P02"}, true},
		{"postgres cannot connect now 57P03", &pgconn.PgError{Code: "57P03"}, true},
		{"postgres connection failure 08006", &pgconn.PgError{Code: "08006"}, true},
		{"postgres read-only transaction 25006", &pgconn.PgError{Code: "25006"}, true},
		{"postgres conn closed under a statement", fmt.Errorf("beginning transaction: %w", pgconn.ErrConnClosed), true},
		{"postgres unique violation 23505", &pgconn.PgError{Code: "23505"}, false},
		{"postgres numeric out of range 22003", &pgconn.PgError{Code: "22003"}, false},
		{"postgres bad password 28P01", &pgconn.PgError{Code: "28P01"}, false},
		{"postgres syntax 42601", &pgconn.PgError{Code: "42601"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsRetryable(tc.err); got != tc.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
