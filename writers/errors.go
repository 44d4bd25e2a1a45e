package writers

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"
)

// ErrBadDSN means the sink address can't be parsed or names an unknown
// scheme. Fix the configuration; retrying won't help.
var ErrBadDSN = errors.New("writers: bad sink DSN")

// ErrBadIdentifier means a table or column name given to Upsert is not a
// plain SQL identifier. Names are checked because they are spliced into SQL.
var ErrBadIdentifier = errors.New("writers: bad SQL identifier")

// MySQL and SQLite error codes that mean "try the transaction again".
const (
	mysqlLockWaitTimeout = 1205
	mysqlDeadlock        = 1213
	sqliteBusy           = 5
	sqliteLocked         = 6
)

// IsRetryable reports whether a failed SQL transaction may be run again
// from the start. That includes a connection lost during COMMIT, whose
// outcome is unknown: the retry is still safe because the offset advance in
// the same transaction (offsets.Apply) refuses to apply a batch twice, and
// callers check offsets.Landed first.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == mysqlDeadlock || me.Number == mysqlLockWaitTimeout
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff // primary code; extended codes keep it in the low byte
		return code == sqliteBusy || code == sqliteLocked
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
