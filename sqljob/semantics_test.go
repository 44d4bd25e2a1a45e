package sqljob

import (
	"strings"
	"testing"
)

func addAll(t *testing.T, a *Aggregate, recs ...string) {
	t.Helper()
	for _, r := range recs {
		if err := a.Add([]byte(r)); err != nil {
			t.Fatalf("Add(%s): %v", r, err)
		}
	}
}

// Keys that a collation, a trim or a normalisation would merge stay apart:
// they are compared as bytes.
func TestTrickyKeysStayDistinct(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT k, COUNT(*) AS n FROM x GROUP BY k", Options{})
	long := strings.Repeat("ü", 200) // 200 characters, 400 bytes
	keys := []string{"a", "A", "a ", " a", "é", "e\u0301", "ﬁ", "fi", "ß", "ss", long, long[:len(long)-2] + "u"}
	a := q.NewAggregate()
	for _, k := range keys {
		addAll(t, a, `{"k":"`+k+`"}`)
	}
	addAll(t, a, `{"k":"\u00e9"}`) // the same text as "é", escaped: one group
	rows := a.Rows()
	if len(rows) != len(keys) {
		t.Fatalf("%d groups, want %d: %v", len(rows), len(keys), rowsText(rows))
	}
	got := map[string]int64{}
	for _, r := range rows {
		got[r[0].(string)] = r[1].(int64)
	}
	for _, k := range keys {
		want := int64(1)
		if k == "é" {
			want = 2
		}
		if got[k] != want {
			t.Errorf("key %q: count %d, want %d", k, got[k], want)
		}
	}
}

func TestNumbersAsKeysKeepTheirText(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT k, COUNT(*) AS n FROM x GROUP BY k", Options{})
	a := q.NewAggregate()
	addAll(t, a, `{"k":1}`, `{"k":1.0}`, `{"k":"1"}`, `{"k":true}`, `{"k":123456789012345678901234567890}`)
	if got, want := rowsText(a.Rows()), "1|2\n1.0|1\n123456789012345678901234567890|1\ntrue|1\n"; got != want {
		t.Fatalf("rows:\n%s\nwant:\n%s", got, want)
	}
}

func TestSumsAreExact(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT k, SUM(x) AS s, MIN(x) AS lo, MAX(x) AS hi, COUNT(x) AS n FROM e GROUP BY k", Options{})
	a := q.NewAggregate()
	addAll(t, a, `{"k":"a","x":0.1}`, `{"k":"a","x":0.2}`, `{"k":"a","x":-0.000000001}`,
		`{"k":"b","x":9223372036854775807}`, `{"k":"b","x":9223372036854775807}`, `{"k":"b","x":1e2}`,
		`{"k":"c"}`, `{"k":"c","x":null}`)
	want := "a|0.299999999|-0.000000001|0.2|3\n" +
		"b|18446744073709551714|100|9223372036854775807|3\n" +
		"c|NULL|NULL|NULL|0\n"
	if got := rowsText(a.Rows()); got != want {
		t.Fatalf("rows:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{`{"k":"a","x":0.0000000001}`, `{"k":"a","x":"1"}`, `{"k":"a","x":true}`, `{"k":"a","x":12345678901234567890123}`} {
		if err := a.Add([]byte(bad)); !IsRejection(err) {
			t.Errorf("Add(%s) = %v, want a rejection", bad, err)
		}
	}
	// A sink that sums integers only rejects a fraction in SUM, not in MIN.
	qi := mustCompile(t, "INSERT INTO t SELECT k, SUM(x) AS s FROM e GROUP BY k", Options{IntegerSums: true})
	ai := qi.NewAggregate()
	if err := ai.Add([]byte(`{"k":"a","x":1.5}`)); !IsRejection(err) || !strings.Contains(err.Error(), "integers only") {
		t.Errorf("IntegerSums: %v", err)
	}
	addAll(t, ai, `{"k":"a","x":1.0}`, `{"k":"a","x":9223372036854775807}`, `{"k":"a","x":1}`)
	if got := rowsText(ai.Rows()); got != "a|9223372036854775809\n" {
		t.Errorf("IntegerSums rows: %s", got)
	}
}

func TestNullLogic(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE NOT (x IN (1, NULL)) OR y IS NULL GROUP BY k", Options{})
	a := q.NewAggregate()
	// x=2: NOT(NULL) = NULL, y present: NULL OR false = NULL -> filtered.
	// x=1: NOT(true) = false; y missing: true -> kept.
	addAll(t, a, `{"k":"drop","x":2,"y":1}`, `{"k":"keep","x":1}`)
	if got := rowsText(a.Rows()); got != "keep|1\n" {
		t.Fatalf("rows: %s", got)
	}
}

func TestMergeEqualsOneAggregate(t *testing.T) {
	q := mustCompile(t, issueQuery, Options{})
	recs := []string{}
	for i := range 50 {
		recs = append(recs, `{"customer":{"id":"u`+string(rune('a'+i%7))+`"},"kind":"buy","qty":`+string(rune('1'+i%9))+`,"price":1.`+string(rune('0'+i%10))+`,"ts":`+string(rune('1'+i%9))+`}`)
	}
	all := q.NewAggregate()
	addAll(t, all, recs...)
	x, y := q.NewAggregate(), q.NewAggregate()
	addAll(t, x, recs[:20]...)
	addAll(t, y, recs[20:]...)
	x.Merge(y)
	if a, b := rowsText(all.Rows()), rowsText(x.Rows()); a != b {
		t.Fatalf("merged:\n%s\none aggregate:\n%s", b, a)
	}
}

// Evaluate keeps nothing of the record, and adding what it returned later
// gives what Add gives.
func TestEvaluateThenAdd(t *testing.T) {
	q := mustCompile(t, issueQuery, Options{})
	recs := []string{
		`{"customer":{"id":"u"},"kind":"buy","qty":1,"price":1.5,"ts":3}`,
		`{"customer":{"id":"\u00fc"},"kind":"view","qty":2,"ts":7}`,
		`{"customer":{"id":"u"},"kind":"buy","qty":4,"price":0.25,"ts":1}`,
	}
	direct, later := q.NewAggregate(), q.NewAggregate()
	var evs []*Evaluated
	for _, r := range recs {
		buf := []byte(r)
		ev, err := q.Evaluate(buf)
		if ev == nil || err != nil {
			t.Fatalf("Evaluate(%s) = %v, %v", r, ev, err)
		}
		for i := range buf { // the record's buffer is reused: nothing may alias it
			buf[i] = 'x'
		}
		evs = append(evs, ev)
		addAll(t, direct, r)
	}
	for _, ev := range evs {
		later.AddEvaluated(ev)
	}
	if a, b := rowsText(direct.Rows()), rowsText(later.Rows()); a != b {
		t.Fatalf("evaluated then added:\n%s\nadded:\n%s", b, a)
	}
	if ev, err := q.Evaluate([]byte(`{"customer":{"id":"u"},"kind":"other","qty":1}`)); ev != nil || err != nil {
		t.Fatalf("filtered: Evaluate = %v, %v", ev, err)
	}
	if _, err := q.Evaluate([]byte(`{`)); !IsRejection(err) {
		t.Fatalf("bad: %v", err)
	}
}

// Every refused construct names itself and where it is.
func TestRefusedConstructs(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"INSERT INTO t SELECT k, AVG(x) AS a FROM e GROUP BY k", "sql: AVG at line 1, column 25: not supported: an average can't be merged across batches; select SUM(x) and COUNT(x) and divide when you read"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k HAVING COUNT(*) > 1", "sql: HAVING at line 1, column 57: not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k ORDER BY k", "sql: ORDER BY at line 1, column 57: not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k LIMIT 3", "sql: LIMIT at line 1, column 57: not supported"},
		{"INSERT INTO t SELECT DISTINCT k, COUNT(*) AS n FROM e GROUP BY k", "sql: DISTINCT at line 1, column 22: not supported"},
		{"INSERT INTO t SELECT a.k, COUNT(*) AS n FROM e AS a JOIN f AS b ON a.k = b.k GROUP BY a.k", "sql: JOIN at line 1, column 53: not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e, f GROUP BY k", "sql: join at line 1, column 45: not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM (SELECT k FROM e) AS s GROUP BY k", "sql: subquery at line 1, column 45: not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE k IN (SELECT k FROM f) GROUP BY k", "sql: subquery at line 1, column 58: not supported"},
		{"INSERT INTO t SELECT k,\n  v, COUNT(*) AS n FROM e GROUP BY k", "sql: v at line 2, column 3: is neither aggregated nor in GROUP BY"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e", "sql: k at line 1, column 22: is not an aggregate: without GROUP BY every column is one"},
		{"INSERT INTO t SELECT k, COUNT(DISTINCT x) AS n FROM e GROUP BY k", "sql: COUNT(DISTINCT …) at line 1, column 31: not supported"},
		{"INSERT INTO t SELECT k, SUM(x) + 1 AS n FROM e GROUP BY k", "aggregate inside an expression is not supported"},
		{"INSERT INTO t SELECT k, SUM(x / 2) AS n FROM e GROUP BY k", "sql: operator / at line 1, column 31: not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE SHA1(k) = 'A' GROUP BY k", "sql: function SHA1 at line 1, column 52: not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) FROM e GROUP BY k", "give it a column name with AS"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k, j", "sql: GROUP BY j at line 1, column 58: is not selected"},
		{"INSERT INTO t SELECT k FROM e GROUP BY k", "no aggregate"},
		{"INSERT INTO t SELECT TUMBLE(ts, 'soon') AS w, COUNT(*) AS n FROM e GROUP BY w", "window size \"soon\""},
		{"INSERT INTO t SELECT c->'$.id' AS i, COUNT(*) AS n FROM e GROUP BY i", "sql: -> at line 1, column 23: not supported: use ->>"},
		{"INSERT INTO t SELECT c->>'$[0]' AS i, COUNT(*) AS n FROM e GROUP BY i", "only member steps"},
		{"INSERT INTO mb_totals SELECT k, COUNT(*) AS n FROM e GROUP BY k", "mb_ tables are microbatch's own"},
		{"INSERT INTO t SELECT key, COUNT(*) AS n FROM e GROUP BY key", "sql: syntax error at line 1, column 22: near \"key\", a reserved word: quote it with backticks (`key`)"},
		{"UPDATE t SET a = 1", "sql: statement at line 1, column 1"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k; DELETE FROM t", "syntax error"},
	} {
		_, err := Compile(c.sql, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%q)\n got  %v\n want it to contain %q", c.sql, err, c.want)
		}
	}
}
