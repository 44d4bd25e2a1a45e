package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers"
)

func openPostgresCopy(t *testing.T) *Writer {
	t.Helper()
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	w, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if _, err := w.DB().ExecContext(t.Context(), `CREATE TABLE copied (
  id BIGINT NOT NULL, name VARCHAR(8), total NUMERIC(12,2), at TIMESTAMP(3), raw BYTEA, note TEXT)`); err != nil {
		t.Fatal(err)
	}
	return w
}

var copiedAppend = writers.Upsert{Table: "copied", Values: []string{"id", "name", "total", "at", "raw", "note"}, Merge: writers.MergeAppend}

// TestPostgresAppendCopies: a row job's append into PostgreSQL inside a
// transaction goes as COPY (text format) and lands every value as the
// INSERT would have: text with tabs, newlines and backslashes, NULLs,
// exact NUMERIC, BYTEA of any bytes (a string or []byte), integers;
// nothing is visible before Commit.
func TestPostgresAppendCopies(t *testing.T) {
	w := openPostgresCopy(t)
	ctx := t.Context()
	const n = 2500 // more than one INSERT statement's worth
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{int64(i), fmt.Sprintf("n%d", i%1000), fmt.Sprintf("%d.%02d", i, i%100), "2026-12-07 10:11:12.345", fmt.Sprintf("b%d", i), nil}
	}
	rows[0] = []any{int64(-1), "a\tb\nc\\d", "9999999999.99", "2026-12-07T10:11:12.5Z", []byte{0, '\\', '\t', 0xff}, `\N is text, \. too`}
	rows[1] = []any{int64(1) << 62, "ünï🙂", "-0.01", nil, "\\x41", "line\r\nend"}
	before := pgCopies.Load()
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tx.Upsert(ctx, copiedAppend, rows); err != nil {
		t.Fatal(err)
	}
	if got := pgCopies.Load() - before; got < 1 {
		t.Fatalf("the append ran no COPY")
	}
	var visible int
	if err := w.DB().QueryRowContext(ctx, `SELECT count(*) FROM copied`).Scan(&visible); err != nil || visible != 0 {
		t.Fatalf("before Commit another session sees %d rows (%v)", visible, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var count, sumID, sumTotal string
	if err := w.DB().QueryRowContext(ctx, `SELECT count(*)::text, sum(id)::text, sum(total)::text FROM copied`).Scan(&count, &sumID, &sumTotal); err != nil {
		t.Fatal(err)
	}
	wantID, wantTotal := int64(1)<<62-1, 9999999999.99-0.01
	for i := 2; i < n; i++ {
		wantID += int64(i)
		wantTotal += float64(i) + float64(i%100)/100
	}
	if count != fmt.Sprint(n) || sumID != fmt.Sprint(wantID) || sumTotal != fmt.Sprintf("%.2f", wantTotal) {
		t.Errorf("count %s, sum(id) %s, sum(total) %s; want %d, %d, %.2f", count, sumID, sumTotal, n, wantID, wantTotal)
	}
	for _, c := range []struct {
		id   int64
		name string
		at   *string
		raw  []byte
		note *string
	}{
		{-1, "a\tb\nc\\d", ptr("2026-12-07 10:11:12.5"), []byte{0, '\\', '\t', 0xff}, ptr(`\N is text, \. too`)},
		{1 << 62, "ünï🙂", nil, []byte(`\x41`), ptr("line\r\nend")},
		{7, "n7", ptr("2026-12-07 10:11:12.345"), []byte("b7"), nil},
	} {
		var name string
		var at, note *string
		var raw []byte
		if err := w.DB().QueryRowContext(ctx, `SELECT name, at::text, raw, note FROM copied WHERE id = ?`, c.id).Scan(&name, &at, &raw, &note); err != nil {
			t.Fatalf("row %d: %v", c.id, err)
		}
		if name != c.name || deref(at) != deref(c.at) || string(raw) != string(c.raw) || deref(note) != deref(c.note) || (note == nil) != (c.note == nil) {
			t.Errorf("row %d: %q %q %q %q, want %q %q %q %q", c.id, name, deref(at), raw, deref(note), c.name, deref(c.at), c.raw, deref(c.note))
		}
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "<NULL>"
	}
	return *s
}

// TestPostgresCopyIsStrict: COPY refuses what the INSERT refuses — a
// string too long for its VARCHAR (22001, never truncated), a NUL byte
// (22021), a number too wide for its NUMERIC (22003), text that is no
// number (22P02) — and the transaction rolls back with nothing written.
func TestPostgresCopyIsStrict(t *testing.T) {
	w := openPostgresCopy(t)
	ctx := t.Context()
	for _, c := range []struct {
		name  string
		row   []any
		state string
	}{
		{"too long", []any{int64(1), "ninechars", nil, nil, nil, nil}, "22001"},
		{"NUL byte", []any{int64(1), "a\x00b", nil, nil, nil, nil}, "22021"},
		{"numeric overflow", []any{int64(1), nil, "12345678901.00", nil, nil, nil}, "22003"},
		{"not a number", []any{int64(1), nil, "12,5", nil, nil, nil}, "22P02"},
	} {
		t.Run(c.name, func(t *testing.T) {
			good := []any{int64(2), "fine", "1.00", nil, nil, nil}
			before := pgCopies.Load()
			tx, err := w.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = tx.Upsert(ctx, copiedAppend, [][]any{good, c.row, good})
			tx.Rollback()
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != c.state {
				t.Fatalf("got %v, want SQLSTATE %s", err, c.state)
			}
			if pgCopies.Load() == before {
				t.Errorf("no COPY ran: the refusal came from elsewhere")
			}
			var n int
			if err := w.DB().QueryRowContext(ctx, `SELECT count(*) FROM copied`).Scan(&n); err != nil || n != 0 {
				t.Errorf("%d rows after the rollback (%v)", n, err)
			}
		})
	}
}

// TestPostgresTxReleasesItsConnection: a transaction of a PostgreSQL
// writer holds one connection of the pool (its COPY needs it) and gives it
// back on Commit and on Rollback: with a pool of one, transactions one
// after another never wait.
func TestPostgresTxReleasesItsConnection(t *testing.T) {
	w := openPostgresCopy(t)
	w.DB().SetMaxOpenConns(1)
	for i := range 6 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		tx, err := w.Begin(ctx)
		if err != nil {
			cancel()
			t.Fatalf("transaction %d: %v (the connection of one before was not released)", i, err)
		}
		err = tx.Upsert(ctx, copiedAppend, [][]any{{int64(i), "x", "1", nil, nil, nil}})
		switch {
		case err != nil:
			t.Fatal(err)
		case i%2 == 0:
			err = tx.Commit()
		case i%3 == 0:
			err = tx.Commit()
			tx.Rollback() // after Commit: nothing, and no second release
		default:
			tx.Rollback()
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := w.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM copied`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d rows, want the 4 committed (%v)", n, err)
	}
}
