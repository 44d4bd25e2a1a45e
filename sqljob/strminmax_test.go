package sqljob_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// strRecords: names that a collation would order otherwise (case, accents,
// a trailing space, a prefix, an empty string), and a numeric-looking
// "1.50" that must stay that text.
var strRecords = []string{
	`{"k":"a","name":"b"}`, `{"k":"a","name":"B"}`, `{"k":"a","name":"a "}`, `{"k":"a","name":"a"}`,
	`{"k":"a","name":"é"}`, `{"k":"a","name":"z"}`, `{"k":"b","name":"1.50"}`, `{"k":"b","name":"10"}`,
	`{"k":"b","name":""}`, `{"k":"b","name":null}`, `{"k":"c","name":null}`, `{"k":"b","name":"ab"}`,
}

const strQuery = "INSERT INTO %s SELECT k, MIN(CAST(name AS CHAR)) AS lo, MAX(CAST(name AS CHAR)) AS hi, MAX(UPPER(name)) AS up, COUNT(*) AS n FROM e GROUP BY k"

// MIN and MAX of a string keep the least and greatest in byte order, in
// one batch, across batches (Merge, Evaluate) and in the sink's merge.
func TestStringMinMax(t *testing.T) {
	q, err := sqljob.Compile(fmt.Sprintf(strQuery, "t"), sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "[[a B é É 6] [b  ab AB 5] [c <nil> <nil> <nil> 1]]"
	a := q.NewAggregate()
	for _, r := range strRecords {
		if err := a.Add([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(a.Rows()); got != want {
		t.Errorf("one batch: %s, want %s", got, want)
	}
	// Half and half, merged; and through Evaluate (checkpoint mode).
	x, y := q.NewAggregate(), q.NewAggregate()
	for i, r := range strRecords {
		ev, err := q.Evaluate([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			x.AddEvaluated(ev)
		} else {
			y.AddEvaluated(ev)
		}
	}
	x.Merge(y)
	if got := fmt.Sprint(x.Rows()); got != want {
		t.Errorf("merged: %s, want %s", got, want)
	}
	if ddl := q.DDL(); !strings.Contains(ddl, "`lo` VARBINARY(1024) NULL") {
		t.Errorf("DDL:\n%s", ddl)
	}
	// A bare field is a number: a string there says what to write.
	q2, err := sqljob.Compile("INSERT INTO t SELECT k, MIN(name) AS lo FROM e GROUP BY k", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = q2.NewAggregate().Add([]byte(`{"k":"a","name":"x"}`))
	if !sqljob.IsRejection(err) || !strings.Contains(err.Error(), "write MIN(CAST(name AS CHAR))") {
		t.Errorf("MIN(name) of a string: %v", err)
	}
	// SQLite compares text by bytes: allowed there; numbers still refused.
	if _, err := sqljob.Compile(fmt.Sprintf(strQuery, "t"), sqljob.Options{SQLite: true}); err != nil {
		t.Errorf("string MIN/MAX on SQLite: %v", err)
	}
	if _, err := sqljob.Compile("INSERT INTO t SELECT k, MIN(x) AS lo FROM e GROUP BY k", sqljob.Options{SQLite: true}); err == nil {
		t.Errorf("numeric MIN on SQLite compiled")
	}
	// Too long for the column: dead-lettered, never cut.
	err = a.Add([]byte(`{"k":"a","name":"` + strings.Repeat("x", 1025) + `"}`))
	if !sqljob.IsRejection(err) || !strings.Contains(err.Error(), "the column holds 1024") {
		t.Errorf("a 1025-byte MIN: %v", err)
	}
}

// testStringMinMaxSink upserts the records in two batches (the second
// merged by the sink) and reads the table back.
func testStringMinMaxSink(t *testing.T, dsn string, opts sqljob.Options) string {
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	q, err := sqljob.Compile(fmt.Sprintf(strQuery, "names"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatal(err)
	}
	for _, half := range [][]string{strRecords[:5], strRecords[5:]} {
		a := q.NewAggregate()
		for _, r := range half {
			if err := a.Add([]byte(r)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Upsert(ctx, q.Upsert(), a.Rows()); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := w.DB().QueryContext(ctx, "SELECT k, lo, hi, up, n FROM names ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	return strRows(t, rows)
}

// strRows reads rows of (k, lo, hi, up, n) as text, the bytes quoted.
func strRows(t *testing.T, rows *sql.Rows) string {
	t.Helper()
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k, lo, hi, up []byte
		var n int64
		if err := rows.Scan(&k, &lo, &hi, &up, &n); err != nil {
			t.Fatal(err)
		}
		show := func(b []byte) string {
			if b == nil {
				return "NULL"
			}
			return fmt.Sprintf("%q", b)
		}
		out = append(out, fmt.Sprintf("%s %s %s %s %d", k, show(lo), show(hi), show(up), n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "; ")
}

const strSinkWant = `a "B" "é" "É" 6; b "" "ab" "AB" 5; c NULL NULL NULL 1`

func TestStringMinMaxSQLite(t *testing.T) {
	if got := testStringMinMaxSink(t, "sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqljob.Options{SQLite: true}); got != strSinkWant {
		t.Errorf("table %s, want %s", got, strSinkWant)
	}
}

// On PostgreSQL (BYTEA columns, compared byte by byte) the table merges
// as the job does.
func TestStringMinMaxPostgres(t *testing.T) {
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	if got := testStringMinMaxSink(t, dsn, sqljob.Options{Postgres: true}); got != strSinkWant {
		t.Errorf("table %s, want %s", got, strSinkWant)
	}
}

// On MariaDB the table merges as the job does, and MariaDB's own MIN and
// MAX over the same strings in a VARBINARY column agree (the differential
// check of string MIN/MAX).
func TestStringMinMaxMariaDB(t *testing.T) {
	dsn := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	if got := testStringMinMaxSink(t, dsn, sqljob.Options{}); got != strSinkWant {
		t.Errorf("table %s, want %s", got, strSinkWant)
	}
	w, err := sqlsink.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	db := w.DB()
	if _, err := db.Exec("CREATE TABLE raw (k VARBINARY(10), name VARBINARY(1024))"); err != nil {
		t.Fatal(err)
	}
	for _, r := range strRecords {
		var k, name string
		fmt.Sscanf(r, `{"k":%q`, &k)
		i := strings.Index(r, `"name":`)
		v := strings.TrimSuffix(r[i+7:], "}")
		if v == "null" {
			db.Exec("INSERT INTO raw VALUES (?, NULL)", k)
			continue
		}
		fmt.Sscanf(v, "%q", &name)
		if _, err := db.Exec("INSERT INTO raw VALUES (?, ?)", k, name); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Query("SELECT k, MIN(name), MAX(name), MAX(UPPER(CONVERT(name USING utf8mb4) COLLATE utf8mb4_bin)), COUNT(*) FROM raw GROUP BY k ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	if got := strRows(t, rows); got != strSinkWant {
		t.Errorf("MariaDB's MIN/MAX %s, the job's %s", got, strSinkWant)
	}
}
