package sqlsink

import (
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// ErrBadTable means a table can't take an Upsert: it is missing, lacks a
// column, or has no primary or unique key on exactly the upsert's keys.
var ErrBadTable = errors.New("writers: table not usable for the upsert")

// ErrXABusy means a prepared XA transaction is still held by another
// database session, usually a connection of ours that just broke or a
// process that just died, which the server has not yet noticed is gone.
// Commit or Abort again a little later; writers.IsRetryable says so (the error
// wraps driver.ErrBadConn for that). If it persists, a live process still
// holds the transaction.
var ErrXABusy = fmt.Errorf("writers: prepared XA transaction still held by another session: %w", driver.ErrBadConn)

var errXAClosed = errors.New("writers: XA writer closed")

// MySQL/MariaDB error numbers the XA writer tells apart.
const (
	mysqlLockWaitTimeout = 1205 // also a metadata lock's
	xaerNOTA             = 1397 // unknown xid
	xaRBROLLBACK         = 1402 // rolled back (e.g. a read-only one whose session ended)
	xaerDUPID            = 1440 // the xid exists already
	xaRBTIMEOUT          = 1613
	xaRBDEADLOCK         = 1614
)

func mysqlErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// isXARollback: the server rolled the transaction back.
func isXARollback(n uint16) bool {
	return n == xaRBROLLBACK || n == xaRBTIMEOUT || n == xaRBDEADLOCK
}

// ErrPreparedBusy means another session is finishing the same prepared
// PostgreSQL transaction, usually a commit of ours whose reply was lost
// and which the server is still running. Commit or Abort again a little
// later; writers.IsRetryable says so (it wraps driver.ErrBadConn).
var ErrPreparedBusy = fmt.Errorf("writers: prepared transaction busy in another session: %w", driver.ErrBadConn)

// ErrNoPreparedTransactions means the PostgreSQL server allows no prepared
// transactions (max_prepared_transactions = 0), which the two-phase sink
// needs: change the setting and restart the server, or use the
// write-ahead sink. No retry cures it.
var ErrNoPreparedTransactions = errors.New("writers: the server allows no prepared transactions")

var errPG2PCClosed = errors.New("writers: PG2PC writer closed")
