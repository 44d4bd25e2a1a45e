package sqlsink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// migrateTotals gives an mb_totals made by an older version the exact
// amount column of totalsDDL. It looks first and changes the table only
// when its column is not the exact one, so that the usual start costs one
// read. Processes starting on the same old table at once all come up:
// MySQL serializes their ALTERs (the later ones find nothing to change or
// redo the same change), SQLite their write transactions, in which each
// looks again.
func (w *Writer) migrateTotals(ctx context.Context) error {
	switch w.dialect {
	case offsets.MySQL:
		return w.migrateTotalsMySQL(ctx)
	case offsets.Postgres:
		return nil // no older version made mb_totals in PostgreSQL
	}
	return w.migrateTotalsSQLite(ctx)
}

func (w *Writer) migrateTotalsMySQL(ctx context.Context) error {
	var typ string
	err := w.db.QueryRowContext(ctx, `SELECT DATA_TYPE FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'amount'`, writers.TotalsTable).Scan(&typ)
	if err != nil {
		return fmt.Errorf("reading the type of %s.amount: %w", writers.TotalsTable, err)
	}
	if strings.EqualFold(typ, "decimal") {
		return nil
	}
	// A copy of the table on MySQL and MariaDB. It waits for the
	// transactions using the table to end, a prepared XA branch included
	// (which only recovery, after this, would end): bounded, on a
	// connection of its own so that the bound stays with the ALTER.
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", migrateLockWait)); err != nil {
		return err
	}
	defer func() { // the pool keeps the connection: give it back as it was
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION lock_wait_timeout = DEFAULT")
	}()
	if _, err := conn.ExecContext(ctx, "ALTER TABLE "+writers.TotalsTable+" MODIFY amount DECIMAL(38,0) NOT NULL"); err != nil {
		return fmt.Errorf("%w (the ALTER waits up to %d s for transactions on %s to end: stop other writers of the table, or finish a prepared XA transaction on it (XA RECOVER), then start again)",
			err, migrateLockWait, writers.TotalsTable)
	}
	return nil
}

// migrateLockWait bounds, in seconds, how long the migration's ALTER waits
// for the table.
const migrateLockWait = 60

// migrateTotalsSQLite rebuilds mb_totals when amount has a declared type
// (SQLite can't change a column's type in place): in one IMMEDIATE
// transaction, which takes the write lock first, so a second process waits
// for it (busy_timeout) and then finds the new table.
func (w *Writer) migrateTotalsSQLite(ctx context.Context) (err error) {
	typ, err := sqliteColumnType(ctx, w.db, writers.TotalsTable, "amount")
	if err != nil || typ == "" {
		return err
	}
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if typ, err = sqliteColumnType(ctx, conn, writers.TotalsTable, "amount"); err != nil || typ == "" {
		if err == nil {
			_, err = conn.ExecContext(ctx, "COMMIT")
		}
		return err
	}
	const tmp = writers.TotalsTable + "_migrating"
	for _, stmt := range []string{
		"DROP TABLE IF EXISTS " + tmp,
		totalsDDL(offsets.SQLite, tmp),
		"INSERT INTO " + tmp + " (job, k, events, amount) SELECT job, k, events, amount FROM " + writers.TotalsTable,
		"DROP TABLE " + writers.TotalsTable,
		"ALTER TABLE " + tmp + " RENAME TO " + writers.TotalsTable,
		"COMMIT",
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sqliteColumnType is column's declared type in table, "" for none.
func sqliteColumnType(ctx context.Context, db queryRower, table, column string) (string, error) {
	var typ string
	err := db.QueryRowContext(ctx, "SELECT type FROM pragma_table_info(?) WHERE name = ?", table, column).Scan(&typ)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("%s has no column %s", table, column)
	}
	if err != nil {
		return "", fmt.Errorf("reading the type of %s.%s: %w", table, column, err)
	}
	return typ, nil
}
