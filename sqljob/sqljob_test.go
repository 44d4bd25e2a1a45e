package sqljob

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const issueQuery = `INSERT INTO user_stats
         SELECT customer->>'$.id' AS user_id, kind,
                COUNT(*) AS n, SUM(qty) AS qty, SUM(price) AS revenue,
                MIN(ts) AS first_ts, MAX(ts) AS last_ts
         FROM clicks WHERE qty > 0 AND kind IN ('buy', 'view')
         GROUP BY user_id, kind`

func mustCompile(t *testing.T, sql string, opts Options) *Query {
	t.Helper()
	q, err := Compile(sql, opts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return q
}

func rowsText(rows [][]any) string {
	var b strings.Builder
	for _, r := range rows {
		for i, v := range r {
			if i > 0 {
				b.WriteByte('|')
			}
			if v == nil {
				b.WriteString("NULL")
				continue
			}
			fmt.Fprint(&b, v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestIssueQuery(t *testing.T) {
	q := mustCompile(t, issueQuery, Options{})
	if q.Topic() != "clicks" || q.Table() != "user_stats" {
		t.Fatalf("topic %q table %q", q.Topic(), q.Table())
	}
	a := q.NewAggregate()
	recs := []string{
		`{"customer":{"id":"u1"},"kind":"buy","qty":2,"price":1.10,"ts":1000}`,
		`{"customer": {"id": "u1", "x": [1,{"id":"no"}]}, "kind": "buy", "qty": 1, "price": 2.205, "ts": 500}`,
		`{"customer":{"id":"u1"},"kind":"buy","qty":0,"price":1,"ts":1}`,   // filtered
		`{"customer":{"id":"u2"},"kind":"view","qty":3,"ts":7}`,            // price missing: SUM skips
		`{"customer":{"id":"u2"},"kind":"click","qty":3,"price":1,"ts":7}`, // filtered
	}
	for _, r := range recs {
		if err := a.Add([]byte(r)); err != nil {
			t.Fatalf("Add(%s): %v", r, err)
		}
	}
	got := rowsText(a.Rows())
	want := "u1|buy|2|3|3.305|500|1000\nu2|view|1|3|NULL|7|7\n"
	if got != want {
		t.Fatalf("rows:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{
		`not json`, `[1]`, `{"customer":{"id":"u1"},"kind":"buy","qty":"2"}`,
		`{"kind":"buy","qty":1}`, `{"customer":{"id":"u1"},"customer":{"id":"u2"},"kind":"buy","qty":1}`,
		`{"customer":{"id":"\ud800"},"kind":"buy","qty":1}`, "{\"customer\":{\"id\":\"a\xff\"},\"kind\":\"buy\",\"qty\":1}",
		`{"customer":{"id":"u1"},"kind":"buy","qty":1,"price":1.0000000001}`,
	} {
		err := a.Add([]byte(bad))
		if !IsRejection(err) {
			t.Errorf("Add(%s) = %v, want a rejection", bad, err)
		} else {
			t.Logf("%s -> %v", bad, err)
		}
	}
	if got2 := rowsText(a.Rows()); got2 != want {
		t.Fatalf("rejected records changed the rows:\n%s", got2)
	}
	t.Log(q.Plan())
}

func TestRefused(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"INSERT INTO t SELECT k, AVG(x) AS a FROM e GROUP BY k", "AVG at line 1, column 25"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k HAVING n > 1", "HAVING at line 1"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k\nORDER BY k", "ORDER BY at line 2, column 1"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k LIMIT 3", "LIMIT"},
		{"INSERT INTO t SELECT DISTINCT k, COUNT(*) AS n FROM e GROUP BY k", "DISTINCT"},
		{"INSERT INTO t SELECT e.k, COUNT(*) AS n FROM e JOIN f ON e.a = f.a GROUP BY e.k", "JOIN"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM (SELECT * FROM e) AS s GROUP BY k", "subquery"},
		{"INSERT INTO t SELECT k, v, COUNT(*) AS n FROM e GROUP BY k", "v at line 1, column 25: is neither aggregated nor in GROUP BY"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e", "GROUP BY"},
		{"INSERT INTO t SELECT k, SUM(x) / COUNT(*) AS n FROM e GROUP BY k", "aggregate inside an expression"},
		{"INSERT INTO t SELECT k, SUM(x / 2) AS n FROM e GROUP BY k", "operator /"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE k IN (SELECT k FROM f) GROUP BY k", "subquery"},
		{"INSERT INTO t SELECT key, COUNT(*) AS n FROM e GROUP BY key", "syntax error at line 1, column 22: near \"key\", a reserved word"},
		{"SELECT k FROM e", "statement"},
	} {
		_, err := Compile(c.sql, Options{})
		if err == nil || !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%q) = %v, want an ErrQuery containing %q", c.sql, err, c.want)
		}
	}
}

func TestWindowAndExpressions(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT TUMBLE(ts, '1m') AS minute, COALESCE(kind, 'none') AS kind, "+
		"SUM(CASE WHEN name LIKE 'a%' THEN 1 ELSE 0 END) AS a_names, SUM(price * qty) AS total, COUNT(note) AS notes "+
		"FROM `my-topic` WHERE note IS NULL OR note <> 'skip' GROUP BY minute, kind", Options{})
	a := q.NewAggregate()
	for _, r := range []string{
		`{"ts":1800000060001,"name":"abc","price":1.5,"qty":2}`,
		`{"ts":"2027-01-15T08:01:30Z","kind":"k","name":"b","price":0.25,"qty":4,"note":"x"}`,
		`{"ts":1800000119999,"name":"a","price":1,"qty":1,"note":"skip"}`,
	} {
		if err := a.Add([]byte(r)); err != nil {
			t.Fatalf("Add(%s): %v", r, err)
		}
	}
	got := rowsText(a.Rows())
	want := "2027-01-15 08:01:00.000|k|0|1|1\n2027-01-15 08:01:00.000|none|1|3|0\n"
	if got != want {
		t.Fatalf("rows:\n%s\nwant:\n%s", got, want)
	}
}
