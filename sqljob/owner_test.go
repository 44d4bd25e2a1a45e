package sqljob_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

const ownedQuery = "INSERT INTO owned SELECT kind, COUNT(*) AS n, SUM(qty) AS total FROM `shop-orders` WHERE qty > 0 GROUP BY kind"

func mustFingerprint(t *testing.T, sql string, opts sqljob.Options) string {
	t.Helper()
	q, err := sqljob.Compile(sql, opts)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return q.Fingerprint()
}

// The fingerprint is the table's content: the same for the statement
// reformatted, another for anything that changes a row.
func TestFingerprint(t *testing.T) {
	base := mustFingerprint(t, ownedQuery, sqljob.Options{})
	if len(base) != 64 {
		t.Fatalf("fingerprint %q: want 64 hex digits", base)
	}
	same := []string{
		"insert into owned\n  select kind,\tcount(*) as n, sum(qty) as total\n  from `shop-orders`\n  where qty>0\n  group by kind",
		"INSERT  INTO owned SELECT kind , COUNT( * ) AS n , SUM( qty ) AS total FROM `shop-orders` WHERE (qty > 0) GROUP BY kind",
		"INSERT INTO owned SELECT kind, COUNT(*) AS N, SUM(qty) AS Total FROM `shop-orders` WHERE qty > 0 GROUP BY kind",
	}
	for _, s := range same {
		if got := mustFingerprint(t, s, sqljob.Options{}); got != base {
			t.Errorf("%s\nfingerprint %s, want the original's %s", s, got, base)
		}
	}
	differ := map[string]string{
		"WHERE":     strings.Replace(ownedQuery, "qty > 0", "qty > 1", 1),
		"no WHERE":  strings.Replace(ownedQuery, "WHERE qty > 0 ", "", 1),
		"alias":     strings.Replace(ownedQuery, "AS total", "AS amount", 1),
		"column":    strings.Replace(ownedQuery, "SUM(qty)", "SUM(price)", 1),
		"aggregate": strings.Replace(ownedQuery, "SUM(qty)", "MAX(qty)", 1),
		"count":     strings.Replace(ownedQuery, "COUNT(*)", "COUNT(qty)", 1),
		"table":     strings.Replace(ownedQuery, "INTO owned", "INTO owned2", 1),
		"topic":     strings.Replace(ownedQuery, "shop-orders", "shop-orders2", 1),
		"key":       strings.Replace(strings.Replace(ownedQuery, "SELECT kind", "SELECT shop", 1), "BY kind", "BY shop", 1),
		"window":    "INSERT INTO owned SELECT kind, TUMBLE(ts, '1m') AS m, COUNT(*) AS n, SUM(qty) AS total FROM `shop-orders` WHERE qty > 0 GROUP BY kind, m",
		"window2":   "INSERT INTO owned SELECT kind, TUMBLE(ts, '5m') AS m, COUNT(*) AS n, SUM(qty) AS total FROM `shop-orders` WHERE qty > 0 GROUP BY kind, m",
		"a column":  strings.Replace(ownedQuery, "SUM(qty) AS total", "SUM(qty) AS total, MIN(qty) AS lo", 1),
	}
	seen := map[string]string{base: "the original"}
	for what, s := range differ {
		got := mustFingerprint(t, s, sqljob.Options{})
		if prev, ok := seen[got]; ok {
			t.Errorf("changed %s: same fingerprint as %s\n%s", what, prev, s)
		}
		seen[got] = what
	}
	if mustFingerprint(t, ownedQuery, sqljob.Options{IntegerSums: true}) == base {
		t.Error("IntegerSums: same fingerprint as without (its sums are kept otherwise)")
	}
}

// Claim gives a table to the first job; another job, the same job with
// another query, and the job on another table are refused with an
// *OwnerError naming both; the owner's restart with the statement
// reformatted passes.
func testClaim(t *testing.T, dsn string, opts sqljob.Options) {
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	compile := func(s string) *sqljob.Query {
		q, err := sqljob.Compile(s, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.EnsureTable(ctx, w.DB()); err != nil {
			t.Fatal(err)
		}
		return q
	}
	q := compile(ownedQuery)
	if err := q.Claim(ctx, w.DB(), "a"); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	reformatted := compile(strings.ToLower(strings.ReplaceAll(ownedQuery, " ", "\n  ")))
	if err := reformatted.Claim(ctx, w.DB(), "a"); err != nil {
		t.Fatalf("the owner again, reformatted: %v", err)
	}
	refused := func(q *sqljob.Query, job string, want ...string) {
		t.Helper()
		err := q.Claim(ctx, w.DB(), job)
		var oe *sqljob.OwnerError
		if !errors.Is(err, sqljob.ErrTableOwned) || !errors.As(err, &oe) {
			t.Fatalf("job %s: %v, want an OwnerError", job, err)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Errorf("message of more than one line: %q", msg)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("message %q: want %q in it", msg, w)
			}
		}
	}
	refused(q, "b", `table owned belongs to job "a", not to job "b"`)
	refused(compile(strings.Replace(ownedQuery, "qty > 0", "qty > 5", 1)), "a", `table owned of job "a" holds the results of another query`, "> 0", "> 5")
	refused(compile(strings.Replace(ownedQuery, "INTO owned", "INTO owned_too", 1)), "a", `job "a" writes table owned, not owned_too`)
	// A record whose fingerprint another version computed: the recorded
	// text, compiled now, is this query.
	if _, err := w.DB().ExecContext(ctx, "UPDATE mb_sql_tables SET fingerprint = 'of-an-older-version'"); err != nil {
		t.Fatal(err)
	}
	if err := q.Claim(ctx, w.DB(), "a"); err != nil {
		t.Fatalf("the owner's query, recorded with another version's fingerprint: %v", err)
	}
	refused(compile(strings.Replace(ownedQuery, "qty > 0", "qty > 5", 1)), "a", "holds the results of another query")
	if _, err := w.DB().ExecContext(ctx, "UPDATE mb_sql_tables SET fingerprint = ?", q.Fingerprint()); err != nil {
		t.Fatal(err)
	}
	own, found, err := sqljob.TableOwner(ctx, w.DB(), "owned")
	if err != nil || !found || own.Job != "a" || own.Fingerprint != q.Fingerprint() || own.Query != ownedQuery {
		t.Fatalf("owner record %+v, found %t, %v", own, found, err)
	}

	// Emptying the table with its record frees it for another job.
	if _, err := w.DB().ExecContext(ctx, "INSERT INTO owned (kind, n, total) VALUES ('x', 1, 2)"); err != nil {
		t.Fatal(err)
	}
	tx, err := w.DB().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqljob.DisownTable(ctx, tx, "owned", "b"); !errors.Is(err, sqljob.ErrTableOwned) {
		t.Fatalf("job b disowning job a's table: %v, want ErrTableOwned", err)
	}
	if n, err := sqljob.DisownTable(ctx, tx, "owned", "a"); err != nil || n != 1 {
		t.Fatalf("DisownTable: %d rows, %v; want 1", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := w.DB().GetContext(ctx, &rows, "SELECT COUNT(*) FROM owned"); err != nil || rows != 0 {
		t.Fatalf("rows after DisownTable: %d, %v", rows, err)
	}
	if err := q.Claim(ctx, w.DB(), "b"); err != nil {
		t.Fatalf("job b after the table was disowned: %v", err)
	}
}

func TestClaimSQLite(t *testing.T) {
	testClaim(t, "sqlite://"+t.TempDir()+"/t.db", sqljob.Options{SQLite: true})
}

func TestClaimPostgres(t *testing.T) {
	testClaim(t, testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres)), sqljob.Options{Postgres: true})
}

func TestClaimMySQL(t *testing.T) {
	testClaim(t, testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL)), sqljob.Options{})
}
