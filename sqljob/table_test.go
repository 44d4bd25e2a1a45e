package sqljob_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

const tableQuery = "INSERT INTO stats SELECT `key`, TUMBLE(ts, '1m') AS minute, COUNT(*) AS n, SUM(amount) AS amount FROM events GROUP BY `key`, minute"

// The table EnsureTable creates takes the rows of Aggregate.Rows through
// the sink's upsert (twice: merged), keeps keys that differ in case and
// trailing spaces apart, and a table that doesn't fit is refused with the
// reason.
func testEnsureTable(t *testing.T, dsn string, opts sqljob.Options, misfits []string) {
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q, err := sqljob.Compile(tableQuery, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil {
		t.Fatalf("EnsureTable: %v\n%s", err, q.DDL())
	}
	if err := q.EnsureTable(ctx, w.DB()); err != nil { // an existing table that fits
		t.Fatalf("EnsureTable again: %v", err)
	}
	a := q.NewAggregate()
	long := strings.Repeat("ü", 200) // 200 characters, 400 bytes
	for _, r := range []string{`{"key":"a","ts":1800000060000,"amount":9223372036854775807}`, `{"key":"A","ts":1800000060001,"amount":2}`, `{"key":"a ","ts":1800000000001,"amount":3}`,
		`{"key":"é","ts":1800000000001,"amount":1}`, `{"key":"e\u0301","ts":1800000000001,"amount":1}`, `{"key":"` + long + `","ts":1800000000001,"amount":1}`, `{"key":"` + long[:398] + `u","ts":1800000000001,"amount":1}`} {
		if err := a.Add([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := w.Upsert(ctx, q.Upsert(), a.Rows()); err != nil {
			t.Fatalf("Upsert: %v", err)
		}
	}
	sel := "SELECT `key`, minute, n, amount FROM stats ORDER BY `key`" // bytes order
	if opts.Postgres {
		sel = strings.ReplaceAll(sel, "`", `"`)
	}
	rows, err := w.DB().QueryContext(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var k, m []byte
		var n, amount any
		if err := rows.Scan(&k, &m, &n, &amount); err != nil {
			t.Fatal(err)
		}
		if tm, err := time.Parse(time.RFC3339Nano, string(m)); err == nil { // MySQL with parseTime
			m = []byte(tm.UTC().Format(sqljob.WindowLayout))
		}
		got = append(got, string(k)+"|"+string(m)+"|"+sqljob.Canonical(n)+"|"+sqljob.Canonical(amount))
	}
	rows.Close()
	want := "A|2027-01-15 08:01:00.000|2|4\na|2027-01-15 08:01:00.000|2|18446744073709551614\na |2027-01-15 08:00:00.000|2|6\n" +
		"e\u0301|2027-01-15 08:00:00.000|2|2\né|2027-01-15 08:00:00.000|2|2\n" +
		long[:398] + "u|2027-01-15 08:00:00.000|2|2\n" + long + "|2027-01-15 08:00:00.000|2|2"
	if g := strings.Join(got, "\n"); g != want {
		t.Fatalf("table:\n%s\nwant:\n%s", g, want)
	}
	for _, ddl := range misfits {
		w.DB().ExecContext(ctx, "DROP TABLE stats")
		if _, err := w.DB().ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		err := q.EnsureTable(ctx, w.DB())
		if err == nil || !strings.Contains(err.Error(), "doesn't fit the query") {
			t.Errorf("EnsureTable on %s = %v, want it refused", ddl, err)
		} else {
			t.Logf("%s -> %v", ddl, err)
		}
	}
}

func TestEnsureTableSQLite(t *testing.T) {
	testEnsureTable(t, "sqlite://"+t.TempDir()+"/t.db", sqljob.Options{SQLite: true}, []string{
		"CREATE TABLE stats (`key` TEXT COLLATE NOCASE NOT NULL, minute TEXT NOT NULL, n INTEGER NOT NULL, amount, PRIMARY KEY (`key`, minute))",
		"CREATE TABLE stats (`key` TEXT NOT NULL, minute TEXT NOT NULL, n INTEGER NOT NULL, amount INTEGER, PRIMARY KEY (`key`, minute))",
		"CREATE TABLE stats (`key` TEXT NOT NULL, minute TEXT NOT NULL, n INTEGER NOT NULL, amount, PRIMARY KEY (`key`))",
	})
	if _, err := sqljob.Compile("INSERT INTO t SELECT k, MIN(x) AS lo FROM e GROUP BY k", sqljob.Options{SQLite: true}); err == nil || !strings.Contains(err.Error(), "MIN at line 1, column 25: not supported on a SQLite sink") {
		t.Errorf("MIN on SQLite: %v", err)
	}
}

// SQLite's table names ignore case: a query naming an existing table in
// another case checks that table (reading its definition found no row).
func TestEnsureTableSQLiteNameCase(t *testing.T) {
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, "sqlite://"+t.TempDir()+"/t.db")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, sql := range []string{"INSERT INTO owned SELECT k, COUNT(*) AS n FROM e GROUP BY k", "INSERT INTO Owned SELECT k, COUNT(*) AS n FROM e GROUP BY k"} {
		q, err := sqljob.Compile(sql, sqljob.Options{SQLite: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.EnsureTable(ctx, w.DB()); err != nil {
			t.Errorf("EnsureTable for %s: %v", sql, err)
		}
	}
}

func TestEnsureTableMySQL(t *testing.T) {
	dsn := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	testEnsureTable(t, dsn, sqljob.Options{}, []string{
		"CREATE TABLE stats (`key` VARCHAR(700) COLLATE utf8mb4_bin NOT NULL, minute DATETIME(3) NOT NULL, n BIGINT NOT NULL, amount DECIMAL(38,9), PRIMARY KEY (`key`, minute))",
		"CREATE TABLE stats (`key` VARBINARY(1024) NOT NULL, minute DATETIME(3) NOT NULL, n BIGINT NOT NULL, amount DOUBLE, PRIMARY KEY (`key`, minute))",
		"CREATE TABLE stats (`key` VARBINARY(1024) NOT NULL, minute DATETIME(3) NOT NULL, n BIGINT NOT NULL, amount DECIMAL(38,9), PRIMARY KEY (`key`))",
		"CREATE TABLE stats (`key` VARBINARY(1024) NOT NULL, minute DATETIME NOT NULL, n BIGINT NOT NULL, amount DECIMAL(38,9), PRIMARY KEY (`key`, minute))",
		"CREATE TABLE stats (`key` VARBINARY(1024) NOT NULL, minute DATETIME(3) NOT NULL, n BIGINT NOT NULL, amount DECIMAL(38,9), other INT NOT NULL, PRIMARY KEY (`key`, minute))",
		// The upsert merges a row into whatever it conflicts with on any
		// unique key: a prefix key merges "abc" and "abd", a narrower
		// unique key merges two windows of one key.
		"CREATE TABLE stats (`key` VARBINARY(1024) NOT NULL, minute DATETIME(3) NOT NULL, n BIGINT NOT NULL, amount DECIMAL(38,9), PRIMARY KEY (`key`(2), minute))",
		"CREATE TABLE stats (`key` VARBINARY(1024) NOT NULL, minute DATETIME(3) NOT NULL, n BIGINT NOT NULL, amount DECIMAL(38,9), PRIMARY KEY (`key`, minute), UNIQUE (`key`))",
		// A negative sum would fail every batch that writes it.
		"CREATE TABLE stats (`key` VARBINARY(1024) NOT NULL, minute DATETIME(3) NOT NULL, n BIGINT NOT NULL, amount DECIMAL(38,9) UNSIGNED, PRIMARY KEY (`key`, minute))",
	})
}

// In PostgreSQL: BYTEA keys (byte order; a backslash is no escape),
// TIMESTAMP(3) windows, NUMERIC(38,9) sums; a table that could merge or
// round is refused.
func TestEnsureTablePostgres(t *testing.T) {
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	testEnsureTable(t, dsn, sqljob.Options{Postgres: true}, []string{
		`CREATE TABLE stats ("key" TEXT NOT NULL, minute TIMESTAMP(3) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,9), PRIMARY KEY ("key", minute))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(3) NOT NULL, n BIGINT NOT NULL, amount DOUBLE PRECISION, PRIMARY KEY ("key", minute))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(3) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,2), PRIMARY KEY ("key", minute))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(3) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,9), PRIMARY KEY ("key"))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(0) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,9), PRIMARY KEY ("key", minute))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMPTZ(3) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,9), PRIMARY KEY ("key", minute))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(3) NOT NULL, n INTEGER NOT NULL, amount NUMERIC(38,9), PRIMARY KEY ("key", minute))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(3) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,9), other INT NOT NULL, PRIMARY KEY ("key", minute))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(3) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,9), PRIMARY KEY ("key", minute), UNIQUE ("key"))`,
		`CREATE TABLE stats ("key" BYTEA NOT NULL, minute TIMESTAMP(3) NOT NULL, n BIGINT NOT NULL, amount NUMERIC(38,9) NOT NULL, PRIMARY KEY ("key", minute))`,
	})
	// MIN and MAX of strings are BYTEA; a MySQL DDL is not PostgreSQL's.
	q, err := sqljob.Compile("INSERT INTO t SELECT k, MIN(CAST(s AS CHAR)) AS lo, MAX(x) AS hi FROM e GROUP BY k", sqljob.Options{Postgres: true})
	if err != nil {
		t.Fatal(err)
	}
	if ddl := q.DDL(); strings.Contains(ddl, "`") || strings.Contains(ddl, "ENGINE") || !strings.Contains(ddl, `"lo" BYTEA NULL`) || !strings.Contains(ddl, `"hi" NUMERIC(38,9) NULL`) {
		t.Errorf("DDL:\n%s", ddl)
	}
}

var _ = strategies.SQLTransform
