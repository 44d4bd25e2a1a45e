package writers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
)

// ErrBadDSN means the sink address can't be parsed or names an unknown
// scheme. Fix the configuration; retrying won't help.
var ErrBadDSN = errors.New("writers: bad sink DSN")

// ErrBadIdentifier means a table or column name given to Upsert is not a
// plain SQL identifier. Names are checked because they are spliced into SQL.
var ErrBadIdentifier = errors.New("writers: bad SQL identifier")

// ErrBadMerge means an Upsert's merge rules don't fit it (Merges of
// another length than Values, an unknown rule, MergeMin or MergeMax as
// the one Merge) or a sink can't apply them (SQLite has no exact decimals
// for per-column MergeMin, MergeMax and fractions). Fix the upsert or
// pick another sink; retrying won't help.
var ErrBadMerge = errors.New("writers: bad merge rule")

// ErrBadValue means a value of a per-column upsert (Upsert.Merges) can't
// be merged by its column's rule: a column added, or kept as least or
// greatest, takes Go integers, decimal strings and nil. It is the rows'
// error, not the sink's: retrying gives the same rows again.
var ErrBadValue = errors.New("writers: value not mergeable")

// MySQL and SQLite error codes that mean "try the transaction again".
const (
	mysqlLockWaitTimeout = 1205
	mysqlDeadlock        = 1213
	// A failover or a restart: the server (still) refuses writes or is
	// going away; the next connection may reach the new primary.
	mysqlReadOnly       = 1290 // ER_OPTION_PREVENTS_STATEMENT: --read-only
	mysqlReadOnlyTxn    = 1792 // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
	mysqlReadOnlyMode   = 1836 // ER_READ_ONLY_MODE
	mysqlServerShutdown = 1053 // ER_SERVER_SHUTDOWN
	mariadbConnKilled   = 1927 // ER_CONNECTION_KILLED
	sqliteBusy          = 5
	sqliteLocked        = 6
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
		switch me.Number {
		case mysqlDeadlock, mysqlLockWaitTimeout, mysqlReadOnly, mysqlReadOnlyTxn, mysqlReadOnlyMode, mysqlServerShutdown, mariadbConnKilled:
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return postgresRetryable(pe.Code)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff // primary code; extended codes keep it in the low byte
		return code == sqliteBusy || code == sqliteLocked
	}
	if IsTLSFailure(err) {
		return false // a setting to fix, not an outage to wait out
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	// pgx: a connection closed under a statement (pgconn.ErrConnClosed,
	// which pgx says is not safe to retry because the statement may have
	// run: here it is, as for MySQL's ErrInvalidConn, since the offset
	// advance refuses a batch twice), a failure before anything was sent
	// (SafeToRetry), a timeout.
	if errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// Failing to connect: refused, reset, timed out, or the server
		// going away before the startup finished; a bad password or an
		// unknown database are a PgError inside and were answered above.
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// IsTLSFailure reports a TLS handshake that failed on certificates or
// protocol — a server not trusted, a name that does not match, a server
// that does not speak TLS or refused the handshake — which retrying
// cannot fix: whoever retries meets the same server. (pgx wraps it in the
// ConnectError a server that is down gives.)
func IsTLSFailure(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		violated x509.ConstraintViolationError
		header   tls.RecordHeaderError
		alert    tls.AlertError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &violated) || errors.As(err, &header) || errors.As(err, &alert)
}

// postgresRetryable reports whether a PostgreSQL error (its SQLSTATE)
// means "try the transaction again": a serialization failure or a
// deadlock (the server rolled the transaction back), a lock wait that
// timed out, a server shutting down or restarting (a failover: 57P01
// admin shutdown, 57P02 crash shutdown, 57P03 not accepting connections
// yet), a connection error (class 08), or a read-only transaction on a
// server that is (still) a standby.
func postgresRetryable(code string) bool {
	switch code {
	case "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "25006":
		return true
	}
	return len(code) == 5 && code[:2] == "08"
}
