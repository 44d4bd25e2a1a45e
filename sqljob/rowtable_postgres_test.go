package sqljob_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// pgReadBack writes r through the sink into q's emptied table and reads
// column col back as the server's text (BYTEA as its bytes).
func pgReadBack(t *testing.T, w *sqlsink.Writer, q *sqljob.Query, r sqljob.Row, col string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := w.DB().ExecContext(ctx, `DELETE FROM "`+q.Table()+`"`); err != nil {
		t.Fatal(err)
	}
	if err := w.Upsert(ctx, q.Upsert(), [][]any{r.Values}); err != nil {
		t.Fatalf("inserting %v: %v", r.Values, err)
	}
	var got *string
	expr := `"` + col + `"::text`
	if col == "b" {
		expr = `encode("b", 'escape')`
	}
	if err := w.DB().QueryRowContext(ctx, `SELECT `+expr+` FROM "`+q.Table()+`"`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		return "NULL"
	}
	return *got
}

// Into an existing PostgreSQL table each value is converted to the
// column's type exactly — it reads back as it was — or the record is a
// dead letter with the reason (a NUL byte in text among them); a table
// whose types would change values is refused.
func TestRowJobExistingTablePostgres(t *testing.T) {
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.DB().ExecContext(ctx, `CREATE TABLE conv (id SERIAL PRIMARY KEY, si SMALLINT, i INTEGER, bi BIGINT, d NUMERIC(5,2), vc VARCHAR(3), tx TEXT,
		b BYTEA, dt DATE, ts TIMESTAMP(3), j JSON, nn VARCHAR(10) NOT NULL DEFAULT 'x')`); err != nil {
		t.Fatal(err)
	}
	q, err := sqljob.Compile("INSERT INTO conv SELECT si, i, bi, d, vc, tx, b, dt, ts, j, nn FROM e", sqljob.Options{Postgres: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ col, json, want string }{
		{"si", `32767`, "32767"}, {"si", `-32768`, "-32768"}, {"si", `true`, "1"}, {"i", `"12"`, "12"}, {"i", `1e2`, "100"},
		{"bi", `"9223372036854775807"`, "9223372036854775807"}, {"d", `123.45`, "123.45"}, {"d", `"-1.5"`, "-1.50"}, {"d", `-0.00`, "0.00"},
		{"vc", `"üüü"`, "üüü"}, {"vc", `"a "`, "a "}, {"tx", `"a\\x41"`, `a\x41`}, {"b", `"a\\x41"`, `a\\x41`},
		{"dt", `"2024-02-29"`, "2024-02-29"}, {"ts", `"2024-02-29 23:59:59.999"`, "2024-02-29 23:59:59.999"},
		{"ts", `"2024-01-01T01:00:00.25+01:00"`, "2024-01-01 00:00:00.25"},
		{"j", `{"b":1,"a":[1, 2]}`, `{"b":1,"a":[1, 2]}`}, {"j", `"\u0000"`, `"\u0000"`}, {"j", `12.50`, "12.50"}, {"si", `null`, "NULL"},
	} {
		rec := `{"nn":"v","` + c.col + `":` + c.json + `}`
		r, err := q.Row([]byte(rec), sqljob.Meta{})
		if err != nil {
			t.Errorf("%s: %v", rec, err)
			continue
		}
		if got := pgReadBack(t, w, q, r, c.col); got != c.want {
			t.Errorf("%s: reads back %q, want %q", rec, got, c.want)
		}
		for i, col := range q.Upsert().Values {
			if col == c.col && col != "ts" && col != "b" && r.Values[i] != nil && fmt.Sprint(r.Values[i]) != c.want {
				t.Errorf("%s: the row holds %q, the table gives back %q", rec, fmt.Sprint(r.Values[i]), c.want)
			}
		}
	}
	for _, c := range []struct{ col, json, want string }{
		{"si", `32768`, "out of the range of SMALLINT"}, {"i", `1.5`, "has digits after the point"}, {"bi", `9223372036854775808`, "out of the range of BIGINT"},
		{"d", `1.234`, "more than 2 digits after the point; the column is NUMERIC(5,2)"}, {"d", `1234`, "more than 3 digits before the point"},
		{"vc", `"abcd"`, "is 4 characters; the column is VARCHAR(3)"}, {"tx", `"a\u0000b"`, "NUL byte"}, {"vc", `"\u0000"`, "NUL byte"},
		{"dt", `"2023-02-29"`, "not a valid date"}, {"ts", `"2024-01-01 00:00:00.1234"`, "more than 3 digits after the second"}, {"nn", `null`, "NOT NULL"},
	} {
		rec := `{"` + c.col + `":` + c.json + `}`
		if c.col != "nn" {
			rec = `{"nn":"v","` + c.col + `":` + c.json + `}`
		}
		_, err := q.Row([]byte(rec), sqljob.Meta{})
		if !sqljob.IsRejection(err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "column "+c.col) {
			t.Errorf("%s: %v, want a rejection of column %s saying %q", rec, err, c.col, c.want)
		}
	}
	u, err := sqljob.Compile("REPLACE INTO users (PRIMARY KEY (id)) SELECT id, name, CAST(bal AS DECIMAL(10,2)) AS bal FROM u", sqljob.Options{Postgres: true})
	if err != nil {
		t.Fatal(err)
	}
	for ddl, want := range map[string]string{
		`CREATE TABLE users (id TEXT PRIMARY KEY, name TEXT, bal NUMERIC(10,2))`:                  "collation",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name JSONB, bal NUMERIC(10,2))`:                "JSONB",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name CHAR(5), bal NUMERIC(10,2))`:              "CHAR(n)",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name TEXT, bal NUMERIC)`:                       "without a precision",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name TEXT, bal DOUBLE PRECISION)`:              "rounds decimals",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name TEXT, bal NUMERIC(10,2) CHECK (bal > 0))`: "could refuse a row",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name TIMESTAMPTZ, bal NUMERIC(10,2))`:          "TIMESTAMPTZ",
		`CREATE TABLE users (id BYTEA, name TEXT, bal NUMERIC(10,2), PRIMARY KEY (name))`:         "primary key is (name); want (id)",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name TEXT, bal NUMERIC(10,2), UNIQUE (name))`:  "unique key users_name_key",
		// An INCLUDE column is not part of the key: UNIQUE (name) still merges two ids.
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name TEXT, bal NUMERIC(10,2), UNIQUE (name) INCLUDE (id))`: "unique key users_name_id_key",
		`CREATE TABLE users (id BYTEA PRIMARY KEY, name TEXT, bal NUMERIC(10,2), x INT NOT NULL)`:             "extra column x",
		`CREATE TABLE users (id TEXT COLLATE "C" PRIMARY KEY, name TEXT, bal NUMERIC(10,2), y INT DEFAULT 1)`: "",
	} {
		w.DB().ExecContext(ctx, "DROP TABLE users")
		if _, err := w.DB().ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		err := u.EnsureTable(ctx, w.DB())
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s\n got  %v\n want %q", ddl, err, want)
		}
	}
}

// The table a row job creates in PostgreSQL (BYTEA keys, quoted names)
// takes its rows: an upsert keeps each key's last row and a delete
// removes its key, in one write.
func TestRowJobTablePostgres(t *testing.T) {
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q, err := sqljob.Compile("REPLACE INTO Users (PRIMARY KEY (id)) SELECT _key AS id, name, CAST(age AS SIGNED) AS age, CAST(bal AS DECIMAL(10,2)) AS bal, CAST(seen AS DATETIME(3)) AS seen, CAST(tags AS JSON) AS tags, CAST(name AS CHAR(5)) AS short, _partition AS p, _offset AS o, _timestamp AS ts FROM u", sqljob.Options{Postgres: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatalf("EnsureTable: %v\n%s", err, q.DDL())
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatalf("EnsureTable again: %v\n%s", err, q.DDL())
	}
	r, err := q.Row([]byte(`{"name":"Zoë","age":41,"bal":"3.5","seen":"2024-02-29 10:00:00.25","tags":["a","b"]}`), meta)
	if err != nil {
		t.Fatal(err)
	}
	for col, want := range map[string]string{"id": `\x6b31`, "name": "Zoë", "age": "41", "bal": "3.50", "seen": "2024-02-29 10:00:00.25", "tags": `["a","b"]`, "short": "Zoë", "p": "3", "o": "42", "ts": "2023-11-14 22:13:20.123"} {
		if got := pgReadBack(t, w, q, r, col); got != want {
			t.Errorf("column %s reads back %q, want %q", col, got, want)
		}
	}
	u := q.Upsert()
	row := func(k, name string) []any {
		v := append([]any(nil), r.Values...)
		v[0], v[1] = k, name
		return v
	}
	del := make([]any, len(r.Values))
	del[0], del[1] = "gone", writers.Delete
	if err := w.Upsert(ctx, u, [][]any{row("a", "1"), row("gone", "x"), row("a", "2"), row(`b\x00`, "3")}); err != nil {
		t.Fatal(err)
	}
	if err := w.Upsert(ctx, u, [][]any{del, row("a", "4")}); err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := w.DB().QueryContext(ctx, `SELECT encode(id, 'escape') || '=' || name FROM "Users" ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if g, want := strings.Join(got, " "), `a=4 b\\x00=3 k1=Zoë`; g != want {
		t.Errorf("table %s, want %s", g, want)
	}
}
