package sqljob_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/sqljob"
)

// An integer TUMBLE takes is epoch milliseconds of this era: a smaller one
// (epoch seconds, most likely) is dead-lettered with what to write;
// FROM_UNIXTIME reads seconds; MySQL's DATETIME text is UTC.
func TestTumbleUnits(t *testing.T) {
	for _, c := range []struct{ sql, rec, want string }{
		{"TUMBLE(ts, '1m')", `{"ts":1796119230000}`, "2026-12-01 10:00:00.000"},
		{"TUMBLE(ts, '1m')", `{"ts":1796119230}`, "reject:for epoch seconds write TUMBLE(FROM_UNIXTIME(ts), …)"},
		{"TUMBLE(ts, '1m')", `{"ts":99999999999}`, "reject:before 1973-03-03"},
		{"TUMBLE(ts, '1m')", `{"ts":100000000000}`, "1973-03-03 09:46:00.000"},
		{"TUMBLE(FROM_UNIXTIME(ts), '1m')", `{"ts":1796119230}`, "2026-12-01 10:00:00.000"},
		{"TUMBLE(FROM_UNIXTIME(ts), '1s')", `{"ts":1796119230.9999}`, "2026-12-01 10:00:30.000"},
		{"TUMBLE(FROM_UNIXTIME(ts), '1m')", `{"ts":1796119230000}`, "reject:for epoch milliseconds write TUMBLE(ts, …)"},
		{"TUMBLE(FROM_UNIXTIME(ts), '1m')", `{"ts":"2026-12-01 10:00:00"}`, "reject:not epoch seconds"},
		{"TUMBLE(ts, '1m')", `{"ts":"2026-12-01 10:00:59.999"}`, "2026-12-01 10:00:00.000"},
		{"TUMBLE(ts, '1h')", `{"ts":"2026-12-01 10:20:00"}`, "2026-12-01 10:00:00.000"},
		{"TUMBLE(ts, '1m')", `{"ts":"2026-12-01T10:01:00+01:00"}`, "2026-12-01 09:01:00.000"},
		{"TUMBLE(ts, '1m')", `{"ts":"2026-12-01"}`, "reject:'YYYY-MM-DD HH:MM:SS[.fff]'"},
	} {
		q, err := sqljob.Compile("INSERT INTO t SELECT "+c.sql+" AS w, COUNT(*) AS n FROM e GROUP BY w", sqljob.Options{})
		if err != nil {
			t.Fatal(err)
		}
		a := q.NewAggregate()
		err = a.Add([]byte(c.rec))
		if want, ok := strings.CutPrefix(c.want, "reject:"); ok {
			if !sqljob.IsRejection(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s over %s: %v, want a rejection saying %q", c.sql, c.rec, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s over %s: %v", c.sql, c.rec, err)
			continue
		}
		if got := a.Rows()[0][0]; got != c.want {
			t.Errorf("%s over %s = %v, want %s", c.sql, c.rec, got, c.want)
		}
	}
}

func TestFuncsRefused(t *testing.T) {
	for sql, want := range map[string]string{
		"CAST(x AS DECIMAL(40,2))":  "DECIMAL(40,2) is more than the columns hold (DECIMAL(38,9)): want p ≤ 38 and s ≤ 9",
		"CAST(x AS DECIMAL(20,10))": "want p ≤ 38 and s ≤ 9",
		"CAST(x AS DECIMAL(5,6))":   "is not a MySQL type",
		"CAST(x AS UNSIGNED)":       "write CAST(x AS SIGNED)",
		"CAST(x AS BINARY)":         "SIGNED, DECIMAL(p,s), CHAR, DATETIME(3) and JSON are",
		"CONVERT(x, SIGNED)":        "write CAST(x AS type)",
		"FROM_UNIXTIME(x)":          "only inside TUMBLE",
		"LOWER(x, y)":               "takes one argument",
		"IF(x, y)":                  "takes three arguments",
	} {
		_, err := sqljob.Compile("INSERT INTO t SELECT "+sql+" AS v, COUNT(*) AS n FROM e GROUP BY v", sqljob.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", sql, err, want)
		}
	}
}

// A query without GROUP BY keeps one row, keyed by the hidden GlobalKey
// column; one without aggregates is a row job (rowjob_test.go).
func TestGlobalAggregate(t *testing.T) {
	q, err := sqljob.Compile("INSERT INTO totals SELECT COUNT(*) AS n, SUM(x) AS s, MAX(x) AS hi FROM e WHERE x > 0", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := q.NewAggregate()
	for _, r := range []string{`{"x":1}`, `{"x":2.5}`, `{"x":-1}`, `{"y":1}`} {
		if err := a.Add([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	b := q.NewAggregate()
	if err := b.Add([]byte(`{"x":7}`)); err != nil {
		t.Fatal(err)
	}
	a.Merge(b)
	if got, want := fmt.Sprint(a.Rows()), "[[all 3 10.5 7]]"; got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
	u := q.Upsert()
	if strings.Join(u.Keys, ",") != sqljob.GlobalKey || strings.Join(u.Values, ",") != "n,s,hi" || !q.Global() {
		t.Errorf("upsert %+v, global %v", u, q.Global())
	}
	if ddl := q.DDL(); !strings.Contains(ddl, "`mb_all` VARBINARY(8) NOT NULL") || !strings.Contains(ddl, "PRIMARY KEY (`mb_all`)") {
		t.Errorf("DDL:\n%s", ddl)
	}
	for sql, want := range map[string]string{
		"INSERT INTO t SELECT k, COUNT(*) AS n FROM e":   "sql: k at line 1, column 22: is not an aggregate: without GROUP BY every column is one (the table is one row); add GROUP BY k",
		"INSERT INTO t SELECT COUNT(*) AS mb_all FROM e": "column mb_all",
	} {
		_, err := sqljob.Compile(sql, sqljob.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", sql, err, want)
		}
	}
}
