package sqljob_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// strictConn is one connection of db in strict SQL mode, as the sinks
// run theirs: a value the server would change is an error there.
func strictConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO'"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// insertRow inserts r's values into q's table and reads column col back
// as text.
func insertRow(t *testing.T, conn *sql.Conn, q *sqljob.Query, r sqljob.Row, col string) string {
	t.Helper()
	ctx := context.Background()
	u := q.Upsert()
	names := append(append([]string(nil), u.Keys...), u.Values...)
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ")
	if _, err := conn.ExecContext(ctx, "DELETE FROM "+q.Table()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO "+q.Table()+" (`"+strings.Join(names, "`, `")+"`) VALUES ("+marks+")", r.Values...); err != nil {
		t.Fatalf("inserting %v: %v", r.Values, err)
	}
	var got sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT CAST(`"+col+"` AS CHAR) FROM "+q.Table()).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if !got.Valid {
		return "NULL"
	}
	return got.String
}

// Into an existing MariaDB table each value is converted to the column's
// real type exactly — it reads back as it was — or the record is a
// dead letter with the reason: too long, digits a column would round, out
// of range, not a number, an invalid date, NULL into NOT NULL.
func TestRowJobExistingTableMySQL(t *testing.T) {
	dsn := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.DB().ExecContext(ctx, "CREATE TABLE conv (id INT AUTO_INCREMENT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED, "+
		"d DECIMAL(5,2), du DECIMAL(5,2) UNSIGNED, vc VARCHAR(3), ch CHAR(3), vb VARBINARY(3), tx TINYTEXT, dt DATE, dtm DATETIME(3), j JSON, nn VARCHAR(10) NOT NULL DEFAULT 'x') DEFAULT CHARSET=utf8mb4"); err != nil {
		t.Fatal(err)
	}
	q, err := sqljob.Compile("INSERT INTO conv SELECT ti, tu, bi, bu, d, du, vc, ch, vb, tx, dt, dtm, j, nn FROM e", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatal(err)
	}
	conn := strictConn(t, w.DB().DB)
	long := strings.Repeat("a", 255)
	for _, c := range []struct{ col, json, want string }{
		{"ti", `127`, "127"}, {"ti", `-128`, "-128"}, {"ti", `true`, "1"}, {"ti", `"12"`, "12"}, {"ti", `1.0`, "1"}, {"ti", `1e2`, "100"},
		{"tu", `255`, "255"}, {"bi", `"9223372036854775807"`, "9223372036854775807"}, {"bi", `-9223372036854775808`, "-9223372036854775808"},
		{"bu", `18446744073709551615`, "18446744073709551615"},
		{"d", `123.45`, "123.45"}, {"d", `"-1.5"`, "-1.50"}, {"d", `-0.00`, "0.00"}, {"du", `999.99`, "999.99"},
		{"vc", `"üüü"`, "üüü"}, {"vc", `"a "`, "a "}, {"ch", `"ab"`, "ab"}, {"vb", `"abc"`, "abc"}, {"tx", `"` + long + `"`, long},
		{"dt", `"2024-02-29"`, "2024-02-29"}, {"dtm", `"2024-02-29 23:59:59.999"`, "2024-02-29 23:59:59.999"},
		{"dtm", `"2024-01-01T01:00:00.5+01:00"`, "2024-01-01 00:00:00.500"}, {"dtm", `"1000-01-01"`, "1000-01-01 00:00:00.000"},
		{"j", `{"a":[1,2]}`, `{"a":[1,2]}`}, {"j", `"s"`, `"s"`}, {"j", `12.50`, "12.50"},
		{"ti", `null`, "NULL"},
	} {
		rec := `{"nn":"v","` + c.col + `":` + c.json + `}`
		r, err := q.Row([]byte(rec), sqljob.Meta{})
		if err != nil {
			t.Errorf("%s: %v", rec, err)
			continue
		}
		if got := insertRow(t, conn, q, r, c.col); got != c.want {
			t.Errorf("%s: reads back %q, want %q", rec, got, c.want)
		}
		// The row holds the text the server gives back (verify --sql
		// compares the two as text): "-1.50", not "-1.5".
		for i, col := range q.Upsert().Values {
			if col == c.col && r.Values[i] != nil && fmt.Sprint(r.Values[i]) != c.want {
				t.Errorf("%s: the row holds %q, the table gives back %q", rec, fmt.Sprint(r.Values[i]), c.want)
			}
		}
	}
	for _, c := range []struct{ col, json, want string }{
		{"ti", `128`, "out of the range of TINYINT"}, {"ti", `-129`, "out of the range"}, {"tu", `-1`, "UNSIGNED (0 to 255)"},
		{"ti", `1.5`, "1.5 has digits after the point; the column is TINYINT"}, {"ti", `"abc"`, `"abc" is not a number`}, {"ti", `[1]`, "not a number"},
		{"bi", `9223372036854775808`, "out of the range of BIGINT"}, {"bu", `18446744073709551616`, "out of the range"},
		{"d", `1.234`, "more than 2 digits after the point"}, {"d", `1234`, "more than 3 digits before the point"}, {"du", `-1`, "is negative"},
		{"vc", `"abcd"`, "is 4 characters; the column is VARCHAR(3)"}, {"ch", `"a "`, "ends with a space"}, {"vb", `"abcd"`, "is 4 bytes"},
		{"tx", `"` + long + `b"`, "is 256 bytes"}, {"dt", `"2023-02-29"`, "not a valid date"}, {"dt", `"2024-01-01 10:00:00"`, "has a time of day"},
		{"dt", `"0000-00-00"`, "not a valid date"}, {"dtm", `"2024-01-01 00:00:00.1234"`, "more than 3 digits after the second"}, {"dtm", `1700000000000`, "not a time's text"},
		{"dtm", `"0999-12-31"`, "outside the years 1000 to 9999"}, {"nn", `null`, "NOT NULL"},
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
}

// The table a row job creates takes its rows, and an existing table that
// doesn't fit is refused at start with the reason.
func TestRowJobTableMySQL(t *testing.T) {
	dsn := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q, err := sqljob.Compile("REPLACE INTO users (PRIMARY KEY (id)) SELECT _key AS id, name, CAST(age AS SIGNED) AS age, CAST(bal AS DECIMAL(10,2)) AS bal, CAST(seen AS DATETIME(3)) AS seen, CAST(tags AS JSON) AS tags, CAST(name AS CHAR(5)) AS short, _partition AS p, _offset AS o, _timestamp AS ts FROM u", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatalf("EnsureTable: %v\n%s", err, q.DDL())
	}
	conn := strictConn(t, w.DB().DB)
	r, err := q.Row([]byte(`{"name":"Zoë","age":41,"bal":"3.5","seen":"2024-02-29 10:00:00.25","tags":["a","b"]}`), meta)
	if err != nil {
		t.Fatal(err)
	}
	for col, want := range map[string]string{"id": "k1", "name": "Zoë", "age": "41", "bal": "3.50", "seen": "2024-02-29 10:00:00.250", "tags": `["a","b"]`, "short": "Zoë", "p": "3", "o": "42", "ts": "2023-11-14 22:13:20.123"} {
		if got := insertRow(t, conn, q, r, col); got != want {
			t.Errorf("column %s reads back %q, want %q", col, got, want)
		}
	}
	if _, err := q.Row([]byte(`{"name":"Zoë","bal":1.005}`), meta); !sqljob.IsRejection(err) {
		t.Errorf("1.005 into DECIMAL(10,2): %v", err)
	}
	for ddl, want := range map[string]string{
		"CREATE TABLE users (id VARBINARY(100) NOT NULL, name TEXT, age BIGINT, bal DECIMAL(10,2), seen DATETIME(3), tags JSON, short VARCHAR(5), p INT, o BIGINT, ts DATETIME(3), PRIMARY KEY (p))":                           "primary key is (p); want (id)",
		"CREATE TABLE users (id VARBINARY(100) NOT NULL, name TEXT, age BIGINT, bal DECIMAL(10,2), seen DATETIME(3), tags JSON, short VARCHAR(5), p INT, o BIGINT, ts TIMESTAMP(3) NULL, PRIMARY KEY (id))":                    "TIMESTAMP",
		"CREATE TABLE users (id VARBINARY(100) NOT NULL, name TEXT, age BIGINT, bal DOUBLE, seen DATETIME(3), tags JSON, short VARCHAR(5), p INT, o BIGINT, ts DATETIME(3), PRIMARY KEY (id))":                                 "rounds decimals",
		"CREATE TABLE users (id VARBINARY(100) NOT NULL, name TEXT CHARACTER SET latin1, age BIGINT, bal DECIMAL(10,2), seen DATETIME(3), tags JSON, short VARCHAR(5), p INT, o BIGINT, ts DATETIME(3), PRIMARY KEY (id))":     "character set latin1",
		"CREATE TABLE users (id VARCHAR(100) COLLATE utf8mb4_general_ci NOT NULL, name TEXT, age BIGINT, bal DECIMAL(10,2), seen DATETIME(3), tags JSON, short VARCHAR(5), p INT, o BIGINT, ts DATETIME(3), PRIMARY KEY (id))": "merges keys that differ in case",
		"CREATE TABLE users (id VARBINARY(100) NOT NULL, name TEXT, age BIGINT CHECK (age > 0), bal DECIMAL(10,2), seen DATETIME(3), tags JSON, short VARCHAR(5), p INT, o BIGINT, ts DATETIME(3), PRIMARY KEY (id))":          "could refuse a row",
		"CREATE TABLE users (id VARBINARY(100) NOT NULL, name TEXT, bal DECIMAL(10,2), seen DATETIME(3), tags JSON, short VARCHAR(5), p INT, o BIGINT, ts DATETIME(3), PRIMARY KEY (id))":                                      "no column age",
	} {
		w.DB().ExecContext(ctx, "DROP TABLE users")
		if _, err := w.DB().ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		if err := q.EnsureTable(ctx, w.DB()); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "doesn't fit the query") {
			t.Errorf("%s\n got  %v\n want it refused saying %q", ddl, err, want)
		}
	}
	// An append: a unique key of the job's columns would fail a batch
	// with a duplicate; an auto-increment key is the table's own.
	a, err := sqljob.Compile("INSERT INTO events SELECT id, v FROM e", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for ddl, want := range map[string]string{
		"CREATE TABLE events (id BIGINT NOT NULL PRIMARY KEY, v TEXT)":                                  "unique key PRIMARY (id)",
		"CREATE TABLE events (n INT AUTO_INCREMENT PRIMARY KEY, id BIGINT, v TEXT)":                     "",
		"CREATE TABLE events (n INT AUTO_INCREMENT PRIMARY KEY, id BIGINT, v TEXT, UNIQUE (id, v(10)))": "unique key id",
	} {
		w.DB().ExecContext(ctx, "DROP TABLE events")
		if _, err := w.DB().ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		err := a.EnsureTable(ctx, w.DB())
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s\n got  %v\n want %q", ddl, err, want)
		}
	}
}

// SQLite: a created table takes exact text; an existing NUMERIC column
// takes integers and text that isn't a number, and refuses a decimal it
// would keep as a floating-point number.
func TestRowJobTableSQLite(t *testing.T) {
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, "sqlite://"+t.TempDir()+"/s.db")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q, err := sqljob.Compile("INSERT INTO ev SELECT n, d, CAST(x AS DECIMAL(5,2)) AS x FROM e", sqljob.Options{SQLite: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.DB().ExecContext(ctx, "CREATE TABLE ev (n INTEGER NOT NULL, d NUMERIC, x TEXT)"); err != nil {
		t.Fatal(err)
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatal(err)
	}
	for rec, want := range map[string]string{
		`{"n":1,"d":"2024-01-01 00:00:00.000","x":1.5}`: "",
		`{"n":1,"d":7,"x":"1"}`:                         "",
		`{"n":1.5}`:                                     "digits after the point",
		`{"d":1}`:                                       "NOT NULL",
		`{"n":1,"d":1.10}`:                              "floating-point",
		`{"n":1,"d":"007"}`:                             "floating-point",
	} {
		_, err := q.Row([]byte(rec), sqljob.Meta{})
		if want == "" && err != nil || want != "" && (!sqljob.IsRejection(err) || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", rec, err, want)
		}
	}
}
