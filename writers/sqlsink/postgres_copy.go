package sqlsink

import (
	"bytes"
	"context"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/microbatch/microbatch/writers"
)

// An append into PostgreSQL inside a transaction (Tx.Upsert of a
// writers.MergeAppend) goes as one COPY … FROM STDIN in text format,
// sent by pgx on the transaction's own connection (a PostgreSQL Tx is
// begun on a *sql.Conn for this, reached through (*sql.Conn).Raw and
// pgbind's Unwrap). BenchmarkRowJobPostgres (10,000 rows of 5 columns,
// ~120 bytes, a transaction; PostgreSQL 15 on the shared 2-core machine,
// load under 1) measured it at 533,000–571,000 rows/s against
// 144,000–167,000 for the prepared multi-row INSERTs of 1,000 rows the
// sink sent before (152,000–184,000 at 500 rows, the best size): 3.2–3.8
// ×, and alike under a load of 12. COPY's binary format (pgx CopyFrom,
// 194,000–213,000) is not used: barely faster than the INSERTs, and pgx
// must then parse every string value itself, refusing text the server
// takes ("2026-12-07T10:11:12Z" for a TIMESTAMP, " 12" for a BIGINT).
// benchmarks/README.md has the numbers.
//
// Text format keeps the INSERT's exactness: the server reads every value
// with its column type's input function, as it reads a text parameter
// of the INSERT, so what does not fit is the same error — a string too
// long for its VARCHAR (22001, never truncated), a NUL byte (22021), a
// number too wide for its NUMERIC (22003), text that is no number
// (22P02) — and the transaction rolls back. Values go as text: strings
// and []byte escaped (backslash, tab, newline, carriage return), BYTEA
// columns as \x hex of their bytes, integers as their digits, nil as
// \N (an integer into a text column is its digits, where pgx's INSERT
// refuses the Go type: the one place COPY takes more, never less exactly). A write holding any other type (a float, a bool, a time.Time) goes
// as INSERTs, whose encodings pgx chooses; so does a write outside a
// transaction, an upsert, and a pool not opened by this package (no pgx
// connection under it).

// pgCopies counts the COPY statements appends ran (for tests).
var pgCopies atomic.Int64

// copyTx is a PostgreSQL transaction with the connection it runs on.
type copyTx struct {
	*sqlx.Tx
	conn *sqlx.Conn
}

// errNoCopy: the write can't go as COPY, nothing was sent; use INSERTs.
var errNoCopy = errors.New("sqlsink: not a COPY")

// copyAppend writes the rows of an append with COPY, or returns
// errNoCopy having sent nothing.
func (w *Writer) copyAppend(ctx context.Context, c copyTx, u writers.Upsert, rows [][]any) error {
	cols := slices.Concat(u.Keys, u.Values)
	bytea, err := w.byteaOf(ctx, c, u.Table)
	if err != nil {
		return err
	}
	isBytea := make([]bool, len(cols))
	for i, col := range cols {
		isBytea[i] = slices.Contains(bytea, col)
	}
	data, ok := copyText(rows, isBytea)
	if !ok {
		return errNoCopy
	}
	stmt := "COPY " + w.quoteIdent(u.Table) + " (" + w.quoteIdents(cols) + ") FROM STDIN"
	err = c.conn.Raw(func(dc any) error {
		if uw, ok := dc.(interface{ Unwrap() driver.Conn }); ok {
			dc = uw.Unwrap()
		}
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNoCopy
		}
		pgCopies.Add(1)
		tag, err := sc.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(data), stmt)
		if err == nil && tag.RowsAffected() != int64(len(rows)) {
			err = fmt.Errorf("COPY took %d rows of %d", tag.RowsAffected(), len(rows))
		}
		return err
	})
	if err != nil && !errors.Is(err, errNoCopy) {
		return fmt.Errorf("inserting into %s: %w", u.Table, err)
	}
	return err
}

// copyEscaper escapes text for COPY's text format.
var copyEscaper = strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`)

// copyText is rows as COPY text-format data; ok is false if a value has
// a type it does not write.
func copyText(rows [][]any, isBytea []bool) (data []byte, ok bool) {
	var b bytes.Buffer
	for _, r := range rows {
		for i, v := range r {
			if i > 0 {
				b.WriteByte('\t')
			}
			switch x := v.(type) {
			case nil:
				b.WriteString(`\N`)
			case string:
				if isBytea[i] {
					writeHex(&b, []byte(x))
				} else {
					copyEscaper.WriteString(&b, x)
				}
			case []byte:
				if isBytea[i] {
					writeHex(&b, x)
				} else {
					copyEscaper.WriteString(&b, string(x))
				}
			case int64, int, int32:
				if isBytea[i] {
					return nil, false // the INSERT path refuses an integer for BYTEA: so must COPY
				}
				b.WriteString(fmt.Sprint(x))
			default:
				return nil, false
			}
		}
		b.WriteByte('\n')
	}
	return b.Bytes(), true
}

// writeHex writes p as BYTEA's hex input, its backslash escaped for COPY.
func writeHex(b *bytes.Buffer, p []byte) {
	b.WriteString(`\\x`)
	b.Grow(2 * len(p))
	b.WriteString(hex.EncodeToString(p))
}
