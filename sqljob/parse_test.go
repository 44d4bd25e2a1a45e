package sqljob

import (
	"flag"
	"strings"
	"testing"
)

// Every OVER is refused at its place: SUM(qty) OVER () is not the
// group's SUM (issue 24, item 1).
func TestWindowFunctionsRefused(t *testing.T) {
	for _, sql := range []string{
		"INSERT INTO t SELECT kind, SUM(qty) OVER () AS s FROM e GROUP BY kind",
		"INSERT INTO t SELECT kind, SUM(qty) OVER (PARTITION BY kind) AS s FROM e GROUP BY kind",
		"INSERT INTO t SELECT kind, MAX(qty) OVER () AS s FROM e GROUP BY kind",
		"INSERT INTO t SELECT kind, COUNT(qty) OVER () AS s FROM e GROUP BY kind",
		"INSERT INTO t SELECT kind, COUNT(*) OVER () AS s FROM e GROUP BY kind",
	} {
		_, err := Compile(sql, Options{})
		col := strings.Index(sql, "OVER") + 1
		want := "sql: OVER at line 1, column " + itoa(col) + ": window functions are not supported"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%q)\n got  %v\n want %q", sql, err, want)
		}
	}
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

// A three-part name whose first part is FROM's alias or the topic reads
// the field after it (issue 24, item 3), as two-part names do.
func TestQualifiedNamesReadTheirField(t *testing.T) {
	for _, sql := range []string{
		"INSERT INTO t SELECT c.customer.id AS uid, COUNT(*) AS n FROM `audit-clicks` AS c GROUP BY uid",
		"INSERT INTO t SELECT `audit-clicks`.customer.id AS uid, COUNT(*) AS n FROM `audit-clicks` GROUP BY uid",
		"INSERT INTO t SELECT c.customer->>'$.id' AS uid, COUNT(*) AS n FROM `audit-clicks` c GROUP BY uid",
		"INSERT INTO t SELECT customer.id AS uid, COUNT(*) AS n FROM `audit-clicks` c GROUP BY uid",
		"INSERT INTO t SELECT c.customer.id AS uid, COUNT(*) AS n FROM `audit-clicks` AS c GROUP BY c.customer.id",
		"INSERT INTO t SELECT c.customer.id AS uid, COUNT(*) AS n FROM `audit-clicks` AS c GROUP BY customer.id",
	} {
		q := mustCompile(t, sql, Options{})
		a := q.NewAggregate()
		addAll(t, a, `{"customer":{"id":"u1"},"c":{"customer":{"id":"wrong"}}}`, `{"customer":{"id":"u1"}}`)
		if got := rowsText(a.Rows()); got != "u1|2\n" {
			t.Errorf("%s: rows %q, want u1|2", sql, got)
		}
	}
}

// A field without AS is named by its last part, as MySQL names it
// (issue 24, item 19); two that would share a name need AS.
func TestQualifiedFieldNamesItsColumn(t *testing.T) {
	q := mustCompile(t, "INSERT INTO t SELECT customer.id, `audit-clicks`.kind, COUNT(*) AS n FROM `audit-clicks` GROUP BY customer.id, kind", Options{})
	var names []string
	for _, c := range q.Columns() {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "id,kind,n" {
		t.Errorf("columns %v, want id,kind,n", names)
	}
	_, err := Compile("INSERT INTO t SELECT customer.id, shop.id, COUNT(*) AS n FROM e GROUP BY customer.id, shop.id", Options{})
	if err == nil || !strings.Contains(err.Error(), "column id at line 1, column 35: named twice: give one a column name of its own with AS") {
		t.Errorf("two columns named id: %v", err)
	}
}

// Syntax errors name the right place and, where there is one, the form
// to write instead (issue 24, item 9).
func TestSyntaxErrorsSayWhatToWrite(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM page-views GROUP BY kind",
			"sql: FROM at line 1, column 47: a topic name with \"-\" is quoted with backticks: FROM `page-views`"},
		{"INSERT INTO t SELECT TUMBLE(ts, INTERVAL '1' MINUTE) AS w, COUNT(*) AS n FROM e GROUP BY w",
			"sql: INTERVAL at line 1, column 33: not supported: write a duration as a string: TUMBLE(ts, '1m')"},
		{"INSERT INTO t SELECT TUMBLE(ts, INTERVAL 5 SECOND) AS w, COUNT(*) AS n FROM e GROUP BY w", "TUMBLE(ts, '5s')"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e GROUP BY kind)",
			"sql: syntax error at line 1, column 62: unexpected \")\": no \"(\" before it is open"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n,, FROM e GROUP BY kind",
			"sql: syntax error at line 1, column 42: unexpected \",\": want an expression"},
		{"INSERT INTO t SELECT kind, SUM(x) FILTER (WHERE x > 0) AS n FROM e GROUP BY kind",
			"sql: FILTER at line 1, column 35: not supported: put the condition inside the aggregate: SUM(CASE WHEN … THEN x END)"},
		{"INSERT INTO t SELECT a.b.c.d AS k, COUNT(*) AS n FROM e GROUP BY k",
			"sql: a.b.c.d at line 1, column 22: a name has three parts at most (topic.field.member); for deeper members write a->>'$.b.c.d'"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY kind",
			"sql: WINDOW at line 1, column 49: not supported: a tumbling window (ksqlDB's WINDOW TUMBLING (SIZE 1 MINUTE)) is written as a group key: GROUP BY TUMBLE(ts, '1m')"},
		{"WITH x AS (SELECT 1) INSERT INTO t SELECT kind, COUNT(*) AS n FROM e GROUP BY kind",
			"sql: WITH at line 1, column 1: not supported"},
		{"INSERT INTO t SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), INTERVAL '1' MINUTES)) GROUP BY window_start",
			"sql: FROM TABLE(…) at line 1, column 55: not supported: FROM names the topic"},
		{"INSERT INTO t\nSELECT kind,\n  COUNT(*) AS n\nFROM e\nWHERE name REGEXP '^a'\nGROUP BY kind",
			"sql: REGEXP at line 5, column 12: not supported: match with LIKE"},
		{"CREATE TABLE t AS SELECT kind, COUNT(*) AS n FROM e GROUP BY kind EMIT CHANGES;",
			"sql: statement at line 1, column 1: CREATE TABLE … AS SELECT (ksqlDB, Flink) is written INSERT INTO <table> SELECT"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e GROUP BY kind EMIT CHANGES",
			"sql: EMIT at line 1, column 63: not supported"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e WHERE", "sql: syntax error at line 1, column 54: the statement ends too early: want an expression"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e WHERE x = 'open", "sql: syntax error at line 1, column 59: a string opened with ' is never closed"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e WHERE x <=> 1 GROUP BY kind", "sql: operator <=> at line 1, column 57"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e WHERE x = 1 || y = 2 GROUP BY kind", "sql: || at line 1, column 61: not supported: write OR"},
		{"INSERT INTO t SELECT kind, COUNT(*) AS n FROM e WHERE x IS TRUE GROUP BY kind", "sql: IS TRUE at line 1, column 57"},
		{"INSERT INTO t SELECT k, GROUP_CONCAT(x) AS n FROM e GROUP BY k", "sql: GROUP_CONCAT at line 1, column 25: this aggregate is not supported"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE SUM(x) > 1 GROUP BY k", "sql: SUM at line 1, column 52: an aggregate can't be in WHERE"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE EXISTS (SELECT 1) GROUP BY k", "sql: EXISTS at line 1, column 52"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE (k, j) = (1, 2) GROUP BY k", "sql: row constructor at line 1, column 52"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM db.e GROUP BY k", "sql: FROM at line 1, column 44: want a topic name, not db.e"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k WITH ROLLUP", "sql: WITH ROLLUP at line 1, column 62"},
		{"REPLACE INTO t SELECT k, COUNT(*) AS n FROM e GROUP BY k", "sql: REPLACE INTO at line 1, column 1"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE note = 'it''s' AND 1abc = 2 GROUP BY k", "\"1abc\" is neither a number nor a name"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE x = 1 /* open", "a comment /* is never closed"},
		{"INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300) + " GROUP BY k", "nested more than 200 deep"},
		{"", "sql: statement at line 1, column 1: empty"},
	} {
		_, err := Compile(c.sql, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%q)\n got  %v\n want it to contain %q", c.sql, err, c.want)
		}
	}
}

// What the old parser took and this one must take as well: comments,
// quoting, escapes, MySQL's precedence.
func TestParserAccepts(t *testing.T) {
	q := mustCompile(t, "-- per kind\ninsert into `t` select `kind` as k, /* all */ count(*) as n, sum(a + b * 2) as s # tail\n"+
		"from e where not x = 'it''s' and y in (1, 2) or z is not null and w not like 'a\\%%' group by k;", Options{})
	if got := q.whereS; got != "not x = 'it\\'s' and y in (1, 2) or z is not null and w not like 'a\\\\%%'" {
		t.Errorf("where printed as %s", got)
	}
	if got := q.Columns()[2].Expr; got != "sum(a + b * 2)" {
		t.Errorf("sum printed as %s", got)
	}
	a := q.NewAggregate()
	addAll(t, a, `{"kind":"x","x":"it's","y":1,"a":1,"b":2}`, `{"kind":"x","z":0,"w":"ab%","a":1,"b":1}`, `{"kind":"x","x":"no","y":1,"a":100,"b":100}`, `{"kind":"x","z":0,"w":"a%","a":10,"b":0}`)
	if got := rowsText(a.Rows()); got != "x|2|303\n" {
		t.Errorf("rows %q", got)
	}
	// (a + b) * 2 keeps its parentheses when printed.
	q = mustCompile(t, "INSERT INTO t SELECT k, SUM((a + b) * -c) AS s FROM e GROUP BY k", Options{})
	if got := q.Columns()[1].Expr; got != "sum((a + b) * -c)" {
		t.Errorf("printed as %s", got)
	}
}

// Importing sqljob registers no flag in the program's flag set (Vitess's
// parser brought glog's -v, -log_dir, … with it: issue 24, item 10).
func TestNoGlobalFlags(t *testing.T) {
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "test.") {
			t.Errorf("flag -%s is registered in the program's flag set", f.Name)
		}
	})
}

// FuzzCompile: no statement makes Compile panic, and a compiled query's
// printed WHERE parses back to the same text.
func FuzzCompile(f *testing.F) {
	f.Add(issueQuery)
	f.Add("INSERT INTO t SELECT TUMBLE(ts, '1m') AS w, COALESCE(kind, 'none') AS kind, SUM(CASE WHEN name LIKE 'a%' THEN 1 ELSE 0 END) AS a FROM `my-topic` WHERE note IS NULL OR NOT (x <> 'skip' AND -y * 2 + 1 > 3) GROUP BY w, kind")
	f.Add("INSERT INTO t SELECT c.customer.id, COUNT(*) AS n FROM `audit-clicks` AS c WHERE c.k BETWEEN 1 AND 2 GROUP BY c.customer.id")
	f.Fuzz(func(t *testing.T, sql string) {
		q, err := Compile(sql, Options{})
		if err != nil || q.where == nil {
			return
		}
		again, err := Compile("INSERT INTO t SELECT k, COUNT(*) AS n FROM e WHERE "+q.whereS+" GROUP BY k", Options{})
		if err != nil {
			t.Fatalf("the printed WHERE %q doesn't compile: %v", q.whereS, err)
		}
		if again.whereS != q.whereS {
			t.Fatalf("printed %q, then %q", q.whereS, again.whereS)
		}
	})
}

// Predicates group as in MariaDB (and MySQL, where it accepts them): a
// comparison's right side is a whole IN, LIKE or BETWEEN, IN and LIKE bind
// tighter than BETWEEN, and BETWEEN is right-associative. Each grouping
// here is MariaDB's, checked there (TestParserAgainstMariaDB compares
// random expressions).
func TestPredicatePrecedence(t *testing.T) {
	for _, c := range []struct{ where, tree string }{
		{"1 = 2 IN (0)", "1 = (2 in (0))"},
		{"a = b LIKE 'x'", "a = (b like 'x')"},
		{"a = b BETWEEN 0 AND 1", "a = (b between 0 and 1)"},
		{"a BETWEEN 0 AND 1 IN (n)", "a between 0 and (1 in (n))"},
		{"a NOT BETWEEN 0 AND 1 NOT IN (n)", "a not between 0 and (1 not in (n))"},
		{"a BETWEEN 1 AND 3 BETWEEN 0 AND 0", "a between 1 and (3 between 0 and 0)"},
		{"a BETWEEN b BETWEEN 0 AND 1 AND 2", "a between (b between 0 and 1) and 2"},
		{"a LIKE 'x' BETWEEN 0 AND 1", "(a like 'x') between 0 and 1"},
		{"a LIKE 'x' IN (1) LIKE 'y'", "((a like 'x') in (1)) like 'y'"},
		{"a BETWEEN 0 AND 1 = TRUE", "a between 0 and 1 = true"},
		{"a = 1 IS NULL = FALSE", "(a = 1) is null = false"},
		{"NOT a = 1 IN (TRUE) AND b", "not a = (1 in (true)) and b"},
	} {
		st, err := parse("INSERT INTO t SELECT COUNT(*) AS n FROM e WHERE " + c.where)
		if err != nil {
			t.Errorf("%s: %v", c.where, err)
			continue
		}
		if got := exprText(st.sel.where); got != c.tree {
			t.Errorf("%s reads as %s, want %s", c.where, got, c.tree)
		}
	}
	// MariaDB and MySQL take nothing but a comparison or IS after IS.
	sql := "INSERT INTO t SELECT COUNT(*) AS n FROM e WHERE a IS NULL IN (TRUE)"
	_, err := Compile(sql, Options{})
	want := "sql: syntax error at line 1, column 59: MySQL takes no IN right after IS …: put the IS test in parentheses"
	if err == nil || err.Error() != want {
		t.Errorf("Compile(%q)\n got  %v\n want %s", sql, err, want)
	}
}

// The lexer reads what MySQL reads: -- before a tab or \r is a comment
// (1 --\t5 is 1, not 1 - -5), and the forms it doesn't read — x'41',
// _utf8mb4'b', N'a', 0x41, /*! … */ — are refused, not read as a column
// with an alias or a comment MySQL would run.
func TestLexerReadsAsMySQL(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"a --\tb\n", "1"},
		{"a --\r\n+ c", "3"},
		{"a --", "1"},
		{"a --b", "6"},
		{"--a", "1"},
		{"c # + a", "2"},
	} {
		q := mustCompile(t, "INSERT INTO t SELECT "+c.expr+"\n AS v, COUNT(*) AS n FROM e GROUP BY v", Options{})
		a := q.NewAggregate()
		addAll(t, a, `{"a":1,"b":5,"c":2}`)
		if got := rowsText(a.Rows()); got != c.want+"|1\n" {
			t.Errorf("%q: rows %q, want %s|1", c.expr, got, c.want)
		}
	}
	for _, c := range []struct{ expr, want string }{
		{"x'41'", "column 22: hexadecimal and bit literals (x'…') are not supported"},
		{"B'01'", "column 22: hexadecimal and bit literals (B'…') are not supported"},
		{"0x41", "column 22: hexadecimal and bit literals (0x…, 0b…) are not supported"},
		{"_utf8mb4'b'", "column 22: a character set before a string (_utf8mb4'…') is not supported"},
		{"N'a'", "column 22: a character set before a string (N'…') is not supported"},
		{"1 /*! + 1 */", "column 24: MySQL runs the SQL in an executable comment"},
		{"1 /*M! + 1 */", "column 24: MySQL runs the SQL in an executable comment"},
	} {
		sql := "INSERT INTO t SELECT " + c.expr + ", COUNT(*) AS n FROM e GROUP BY 1"
		_, err := Compile(sql, Options{})
		if err == nil || !strings.Contains(err.Error(), "syntax error at line 1, "+c.want) {
			t.Errorf("Compile(%q)\n got  %v\n want …%s…", sql, err, c.want)
		}
	}
}
