package sqlsink

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers"
)

// BenchmarkRowJobPostgres writes a row job's append into PostgreSQL
// (MICROBATCH_TEST_POSTGRES) as BenchmarkRowJobMySQL does into MariaDB:
// 10,000 rows of 5 columns, about 120 bytes of values each, per
// transaction, committed. It compares the sink's multi-row INSERTs
// (insertRowsPer, prepared once per write) of several sizes with pgx's
// COPY (CopyFrom, binary format) inside the same kind of transaction,
// reached through (*sql.Conn).Raw and pgbind's Unwrap, and reports rows/s:
//
//	go test -run '^$' -bench RowJobPostgres -benchtime 20x ./writers/sqlsink/
func BenchmarkRowJobPostgres(b *testing.B) {
	dsn := testutil.FreshPostgresDatabase(b, testutil.NeedServer(b, testutil.EnvPostgres))
	w, err := Open(b.Context(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	table := fmt.Sprintf("bench_rows_%x", time.Now().UnixNano())
	if _, err := w.DB().ExecContext(b.Context(), "CREATE TABLE "+table+` (
  id BIGINT NOT NULL, customer VARCHAR(32) NOT NULL, total NUMERIC(12,2) NOT NULL,
  note VARCHAR(100), at TIMESTAMP(3) NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	u := writers.Upsert{Table: table, Values: []string{"id", "customer", "total", "note", "at"}, Merge: writers.MergeAppend}
	const batch = 10000
	rows := make([][]any, batch)
	for i := range rows {
		rows[i] = []any{int64(1_000_000 + i), fmt.Sprintf("customer-%06d", i%5000), fmt.Sprintf("%d.%02d", i%100000, i%100),
			fmt.Sprintf("order note %05d: two items, gift wrap, leave at the door", i), "2026-12-07 10:11:12.345"}
	}
	loop := func(b *testing.B, fn func(ctx context.Context, conn *sql.Conn, tx *sql.Tx) error) {
		for b.Loop() {
			ctx := b.Context()
			conn, err := w.DB().Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := fn(ctx, conn, tx); err != nil {
				tx.Rollback()
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
	}
	for _, per := range []int{500, rowsPerStatement, 2000, 5000} {
		b.Run(fmt.Sprintf("sink/rows=%d", per), func(b *testing.B) {
			loop(b, func(ctx context.Context, _ *sql.Conn, tx *sql.Tx) error {
				return w.insertRowsPer(ctx, tx, u, rows, per)
			})
		})
	}
	b.Run("copy-binary", func(b *testing.B) {
		loop(b, func(ctx context.Context, conn *sql.Conn, _ *sql.Tx) error { return copyRows(ctx, conn, u, rows) })
	})
	b.Run("copy-text", func(b *testing.B) {
		loop(b, func(ctx context.Context, conn *sql.Conn, _ *sql.Tx) error { return copyText(ctx, conn, u, rows) })
	})
}

// copyText writes rows with COPY … FROM STDIN in text format (pgconn's
// CopyFrom of a buffer): the server parses every value with the column
// type's input function, as it does a text parameter of an INSERT.
func copyText(ctx context.Context, conn *sql.Conn, u writers.Upsert, rows [][]any) error {
	var buf bytes.Buffer
	esc := strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n", "\r", "\\r")
	for _, r := range rows {
		for i, v := range r {
			if i > 0 {
				buf.WriteByte('\t')
			}
			switch x := v.(type) {
			case nil:
				buf.WriteString(`\N`)
			case string:
				esc.WriteString(&buf, x)
			case int64:
				buf.WriteString(strconv.FormatInt(x, 10))
			default:
				return fmt.Errorf("copyText: %T", v)
			}
		}
		buf.WriteByte('\n')
	}
	return conn.Raw(func(dc any) error {
		if uw, ok := dc.(interface{ Unwrap() driver.Conn }); ok {
			dc = uw.Unwrap()
		}
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("connection %T is not pgx's", dc)
		}
		cols := make([]string, len(u.Values))
		for i, c := range u.Values {
			cols[i] = pgx.Identifier{c}.Sanitize()
		}
		tag, err := sc.Conn().PgConn().CopyFrom(ctx, &buf, "COPY "+pgx.Identifier{u.Table}.Sanitize()+" ("+strings.Join(cols, ", ")+") FROM STDIN")
		if err == nil && tag.RowsAffected() != int64(len(rows)) {
			err = fmt.Errorf("COPY wrote %d rows of %d", tag.RowsAffected(), len(rows))
		}
		return err
	})
}

// copyRows writes rows with COPY … FROM STDIN (pgx CopyFrom, binary
// format) on conn, inside the transaction open on it.
func copyRows(ctx context.Context, conn *sql.Conn, u writers.Upsert, rows [][]any) error {
	return conn.Raw(func(dc any) error {
		if uw, ok := dc.(interface{ Unwrap() driver.Conn }); ok {
			dc = uw.Unwrap()
		}
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("connection %T is not pgx's", dc)
		}
		n, err := sc.Conn().CopyFrom(ctx, pgx.Identifier{u.Table}, u.Values, pgx.CopyFromRows(rows))
		if err == nil && n != int64(len(rows)) {
			err = fmt.Errorf("COPY wrote %d rows of %d", n, len(rows))
		}
		return err
	})
}
