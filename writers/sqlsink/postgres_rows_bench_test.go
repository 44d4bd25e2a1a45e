package sqlsink

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
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
// transaction, committed. It compares multi-row INSERTs (insertRowsPer,
// prepared once per write; what the sink wrote before) of several sizes
// with pgx's
// COPY: in binary format (CopyFrom, the values encoded by pgx) and in
// text format as the sink writes an append now (copyAppend: the server
// parses the values), each inside the transaction, reached through
// (*sql.Conn).Raw and pgbind's Unwrap; it reports rows/s:
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
	loop := func(b *testing.B, fn func(ctx context.Context, tx *Tx) error) {
		for b.Loop() {
			ctx := b.Context()
			tx, err := w.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := fn(ctx, tx); err != nil {
				tx.Rollback()
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
	}
	for _, per := range []int{500, rowsPerStatement, 2000, 5000} {
		b.Run(fmt.Sprintf("insert/rows=%d", per), func(b *testing.B) {
			loop(b, func(ctx context.Context, tx *Tx) error { return w.insertRowsPer(ctx, tx.tx, u, rows, per) })
		})
	}
	b.Run("copy-binary", func(b *testing.B) {
		loop(b, func(ctx context.Context, tx *Tx) error { return copyRows(ctx, tx.conn.Conn, u, rows) })
	})
	b.Run("sink/copy-text", func(b *testing.B) {
		before := pgCopies.Load()
		loop(b, func(ctx context.Context, tx *Tx) error { return tx.Upsert(ctx, u, rows) })
		if pgCopies.Load() == before {
			b.Fatal("the sink's append ran no COPY")
		}
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
