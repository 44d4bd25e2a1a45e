package sqlsink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers"
)

// BenchmarkRowJobMySQL writes a row job's append into MariaDB/MySQL
// (MICROBATCH_TEST_MYSQL): 10,000 rows of 5 columns, about 120 bytes of
// values each, per transaction (one batch), committed. It compares
// multi-row INSERTs of several sizes, as text (interpolated) and as the
// sink writes them (insertRowsPer: prepared once per write), with LOAD
// DATA LOCAL INFILE from memory (the driver's reader handler), and
// reports rows/s:
//
//	go test -run '^$' -bench RowJobMySQL -benchtime 20x ./writers/sqlsink/
func BenchmarkRowJobMySQL(b *testing.B) {
	dsn := testutil.NeedServer(b, testutil.EnvMySQL)
	w, err := Open(b.Context(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	table := fmt.Sprintf("bench_rows_%x", time.Now().UnixNano())
	if _, err := w.DB().ExecContext(b.Context(), "CREATE TABLE "+table+` (
  id BIGINT NOT NULL, customer VARCHAR(32) NOT NULL, total DECIMAL(12,2) NOT NULL,
  note VARCHAR(100), at DATETIME(3) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`); err != nil {
		b.Fatal(err)
	}
	defer w.DB().ExecContext(context.Background(), "DROP TABLE "+table)
	u := writers.Upsert{Table: table, Values: []string{"id", "customer", "total", "note", "at"}, Merge: writers.MergeAppend}
	const batch = 10000
	rows := make([][]any, batch)
	size := 0
	for i := range rows {
		rows[i] = []any{int64(1_000_000 + i), fmt.Sprintf("customer-%06d", i%5000), fmt.Sprintf("%d.%02d", i%100000, i%100),
			fmt.Sprintf("order note %05d: two items, gift wrap, leave at the door", i), "2026-12-07 10:11:12.345"}
		for _, v := range rows[i] {
			size += valueBytes(v)/2 - 6
		}
	}
	b.Logf("%d rows of %d bytes of values on average", batch, size/batch)
	inTx := func(b *testing.B, fn func(tx *Tx) error) {
		for b.Loop() {
			tx, err := w.Begin(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			if err := fn(tx); err != nil {
				tx.Rollback()
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
	}
	for _, per := range []int{100, 500, rowsPerStatement, 2000, 5000} {
		b.Run(fmt.Sprintf("text/rows=%d", per), func(b *testing.B) {
			inTx(b, func(tx *Tx) error { return insertText(b.Context(), w, tx, u, rows, per) })
		})
	}
	for _, per := range []int{500, rowsPerStatement, 2000, 5000} {
		b.Run(fmt.Sprintf("sink/rows=%d", per), func(b *testing.B) {
			inTx(b, func(tx *Tx) error { return w.insertRowsPer(b.Context(), tx.tx, u, rows, per) })
		})
	}
	b.Run("load-data-local", func(b *testing.B) {
		inTx(b, func(tx *Tx) error { return loadData(b.Context(), tx, u, rows) })
	})
}

// insertText writes rows as interpolated text statements of per rows,
// every one parsed by the server (what insertRowsPer did before it
// prepared).
func insertText(ctx context.Context, w *Writer, tx *Tx, u writers.Upsert, rows [][]any, per int) error {
	args := make([]any, 0, per*len(u.Values))
	for len(rows) > 0 {
		n := min(per, len(rows))
		args = args[:0]
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		if _, err := tx.tx.ExecContext(ctx, w.upsertSQL(u, n), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

var loadDataSeq atomic.Int64

// loadData writes rows with LOAD DATA LOCAL INFILE from memory: as
// tab-separated text, under a reader handler registered for this one
// statement (the driver's registry is process-global).
func loadData(ctx context.Context, tx *Tx, u writers.Upsert, rows [][]any) error {
	var buf bytes.Buffer
	esc := strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n")
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
			default:
				fmt.Fprint(&buf, x)
			}
		}
		buf.WriteByte('\n')
	}
	name := fmt.Sprintf("mb-rows-%d", loadDataSeq.Add(1))
	mysql.RegisterReaderHandler(name, func() io.Reader { return bytes.NewReader(buf.Bytes()) })
	defer mysql.DeregisterReaderHandler(name)
	_, err := tx.tx.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+name+"' INTO TABLE "+tx.w.quoteIdent(u.Table)+
		" CHARACTER SET utf8mb4 FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' ("+tx.w.quoteIdents(u.Values)+")")
	return err
}
