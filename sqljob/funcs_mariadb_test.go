package sqljob_test

// The differential test of the scalar functions: every value a SQL job's
// function accepts is what MariaDB's gives for the same values as
// literals, without a warning (MariaDB warns where it rounds, truncates
// or guesses; those the job must dead-letter instead).

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// funcCase is an expression over fields a, b, c (written {a}, {b}, {c})
// and a record giving them.
type funcCase struct{ expr, rec string }

var funcCases = []funcCase{
	{"LOWER({a})", `{"a":"AbC xYz"}`},
	{"UPPER({a})", `{"a":"AbC éü ß ÿ ſ"}`},
	{"LOWER({a})", `{"a":"ÀÉÎÕÜ ΣΑΒ ДЖЯ Ё"}`},
	{"UPPER({a})", `{"a":"àéîõü σαβ джя ё ς"}`},
	{"LOWER({a})", `{"a":"中文 😀 ٣"}`},
	{"LOWER({a})", `{"a":null}`},
	{"LOWER({a})", `{"a":12}`},
	{"CONCAT({a}, '-', {b})", `{"a":"x","b":"y"}`},
	{"CONCAT({a}, {b})", `{"a":"x","b":1.50}`},
	{"CONCAT({a}, {b})", `{"a":"x","b":-7}`},
	{"CONCAT({a}, {b})", `{"a":"x","b":null}`},
	{"CONCAT({a}, {b})", `{"a":"x","b":1e2}`},
	{"CONCAT({a}, {b})", `{"a":"x","b":true}`},
	{"CONCAT({a}, 1.50, -3)", `{"a":""}`},
	{"SUBSTRING({a}, {b})", `{"a":"héllo wörld","b":2}`},
	{"SUBSTRING({a}, {b})", `{"a":"héllo wörld","b":-5}`},
	{"SUBSTRING({a}, {b})", `{"a":"héllo","b":0}`},
	{"SUBSTRING({a}, {b})", `{"a":"héllo","b":6}`},
	{"SUBSTRING({a}, {b})", `{"a":"héllo","b":-6}`},
	{"SUBSTRING({a}, {b})", `{"a":"héllo","b":-5}`},
	{"SUBSTRING({a}, {b}, {c})", `{"a":"héllo wörld","b":2,"c":3}`},
	{"SUBSTRING({a}, {b}, {c})", `{"a":"héllo wörld","b":-3,"c":2}`},
	{"SUBSTRING({a}, {b}, {c})", `{"a":"héllo wörld","b":2,"c":0}`},
	{"SUBSTRING({a}, {b}, {c})", `{"a":"héllo wörld","b":2,"c":-1}`},
	{"SUBSTRING({a}, {b}, {c})", `{"a":"héllo wörld","b":3,"c":100}`},
	{"SUBSTRING({a}, {b}, {c})", `{"a":"héllo","b":1.5,"c":1}`},
	{"SUBSTRING({a}, {b})", `{"a":"héllo","b":null}`},
	{"SUBSTRING({a} FROM {b} FOR {c})", `{"a":"😀a😀b","b":2,"c":2}`},
	{"IF({a} > 1, 'big', 'small')", `{"a":2}`},
	{"IF({a} > 1, 'big', 'small')", `{"a":1}`},
	{"IF({a} > 1, 'big', 'small')", `{"a":null}`},
	{"IF({a}, {b}, {c})", `{"a":0,"b":"x","c":"y"}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":5,"b":1,"c":10}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":5,"b":5,"c":5}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":0.5,"b":1,"c":10}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":5,"b":null,"c":10}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":50,"b":null,"c":10}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":0,"b":1,"c":null}`},
	{"{a} NOT BETWEEN {b} AND {c}", `{"a":5,"b":1,"c":10}`},
	{"{a} NOT BETWEEN {b} AND {c}", `{"a":50,"b":null,"c":10}`},
	{"{a} NOT BETWEEN {b} AND {c}", `{"a":5,"b":null,"c":10}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":"b","b":"a","c":"c"}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":"B","b":"a","c":"c"}`},
	{"{a} BETWEEN {b} AND {c}", `{"a":null,"b":1,"c":2}`},
	{"CAST({a} AS SIGNED)", `{"a":42}`},
	{"CAST({a} AS SIGNED)", `{"a":-42}`},
	{"CAST({a} AS SIGNED)", `{"a":1.5}`},
	{"CAST({a} AS SIGNED)", `{"a":2.0}`},
	{"CAST({a} AS SIGNED)", `{"a":"17"}`},
	{"CAST({a} AS SIGNED)", `{"a":"-17"}`},
	{"CAST({a} AS SIGNED)", `{"a":"17x"}`},
	{"CAST({a} AS SIGNED)", `{"a":" 17"}`},
	{"CAST({a} AS SIGNED)", `{"a":"99999999999999999999"}`},
	{"CAST({a} AS SIGNED)", `{"a":null}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":1.5}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":1.25}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":1.255}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":-999.99}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":1000}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":"12.3"}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":"12.345"}`},
	{"CAST({a} AS DECIMAL(5,2))", `{"a":"abc"}`},
	{"CAST({a} AS DECIMAL)", `{"a":12345}`},
	{"CAST({a} AS DECIMAL)", `{"a":12345.5}`},
	{"CAST({a} AS DECIMAL(38,9))", `{"a":-1234567890.123456789}`},
	{"CAST({a} AS DECIMAL(3))", `{"a":999}`},
	{"CAST({a} AS DECIMAL(3))", `{"a":1000}`},
	{"CAST({a} AS CHAR)", `{"a":1.50}`},
	{"CAST({a} AS CHAR)", `{"a":-0.0}`},
	{"CAST({a} AS CHAR)", `{"a":"héllo"}`},
	{"CAST({a} AS CHAR)", `{"a":1e2}`},
	{"CAST({a} AS CHAR(3))", `{"a":"héllo"}`},
	{"CAST({a} AS CHAR(5))", `{"a":"héllo"}`},
	{"CAST(CAST({a} AS DECIMAL(6,3)) AS CHAR)", `{"a":1.5}`},
	{"CAST({a} + 1 AS CHAR)", `{"a":1.5}`},
	{"CONCAT(CAST({a} AS SIGNED), 'x')", `{"a":"0012"}`},
	{"CONCAT(-{a}, 'x')", `{"a":5}`},
	{"CONCAT(UPPER(SUBSTRING({a}, 1, 1)), LOWER(SUBSTRING({a}, 2)))", `{"a":"éCOLE"}`},
	{"COALESCE(IF({a} BETWEEN 1 AND 3, CAST({a} AS CHAR), NULL), 'none')", `{"a":2}`},
	{"COALESCE(IF({a} BETWEEN 1 AND 3, CAST({a} AS CHAR), NULL), 'none')", `{"a":7}`},
}

// mariaLiteral is a JSON value as a MariaDB literal: strings as utf8mb4
// with a binary collation (a JSON string's), numbers as written.
func mariaLiteral(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case bool:
		if x {
			return "TRUE"
		}
		return "FALSE"
	case json.Number:
		return "(" + x.String() + ")"
	case string:
		return "(CONVERT(X'" + hex.EncodeToString([]byte(x)) + "' USING utf8mb4) COLLATE utf8mb4_bin)"
	}
	panic(fmt.Sprintf("%T", v))
}

var fieldRE = regexp.MustCompile(`\{([abc])\}`)

// ourValue is expr over rec as a SQL job computes it: its text ("NULL"
// for NULL; booleans 1 and 0, as MariaDB prints them), or the record's
// dead-letter reason.
func ourValue(t *testing.T, expr, rec string) (string, string) {
	t.Helper()
	q, err := sqljob.Compile("INSERT INTO t SELECT "+expr+" AS v, COUNT(*) AS n FROM e GROUP BY v", sqljob.Options{})
	if err != nil {
		t.Fatalf("Compile(%s): %v", expr, err)
	}
	a := q.NewAggregate()
	if err := a.Add([]byte(rec)); err != nil {
		if strings.Contains(err.Error(), "is missing or null") {
			return "NULL", ""
		}
		return "", err.Error()
	}
	v := a.Rows()[0][0].(string)
	switch v {
	case "true":
		v = "1"
	case "false":
		v = "0"
	}
	return v, ""
}

func mariaDB(t *testing.T) *sql.DB {
	w, err := sqlsink.Open(context.Background(), testutil.NeedServer(t, testutil.EnvMySQL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	db := w.DB().DB
	// A SELECT without tables doesn't clear the warnings of the one
	// before it: each query gets a connection of its own.
	db.SetMaxIdleConns(0)
	return db
}

// theirValue is MariaDB's text of query and how many warnings it gave.
func theirValue(t *testing.T, db *sql.DB, query string) (string, int) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET NAMES utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatal(err)
	}
	var v sql.NullString
	if err := conn.QueryRowContext(ctx, query).Scan(&v); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	var warnings int
	if err := conn.QueryRowContext(ctx, "SELECT @@warning_count").Scan(&warnings); err != nil {
		t.Fatal(err)
	}
	if !v.Valid {
		return "NULL", warnings
	}
	return v.String, warnings
}

func TestFuncsAgainstMariaDB(t *testing.T) {
	db := mariaDB(t)
	accepted := 0
	for _, c := range funcCases {
		ours, reason := ourValue(t, fieldRE.ReplaceAllString(c.expr, "$1"), c.rec)
		dec := json.NewDecoder(strings.NewReader(c.rec))
		dec.UseNumber()
		var fields map[string]any
		if err := dec.Decode(&fields); err != nil {
			t.Fatal(err)
		}
		query := "SELECT " + fieldRE.ReplaceAllStringFunc(c.expr, func(m string) string { return mariaLiteral(fields[m[1:2]]) })
		theirs, warnings := theirValue(t, db, query)
		switch {
		case reason != "":
			t.Logf("%s over %s: dead-lettered (%s); MariaDB gives %q with %d warnings", c.expr, c.rec, reason, theirs, warnings)
		case warnings > 0:
			t.Errorf("%s over %s = %q, but MariaDB warns (%d) and gives %q: it must be dead-lettered", c.expr, c.rec, ours, warnings, theirs)
		case ours != theirs:
			t.Errorf("%s over %s = %q, MariaDB gives %q", c.expr, c.rec, ours, theirs)
		default:
			accepted++
		}
	}
	t.Logf("%d of %d cases accepted and equal to MariaDB's", accepted, len(funcCases))
}

// Every letter LOWER and UPPER map (the ranges caseMapped checks) maps as
// MariaDB maps it in utf8mb4_bin; a letter outside them is dead-lettered.
func TestCaseMappingAgainstMariaDB(t *testing.T) {
	db := mariaDB(t)
	var runes []rune
	for r := rune(0x80); r < 0x500; r++ {
		if (r < 0x180 || r >= 0x370) && utf8.ValidRune(r) {
			runes = append(runes, r)
		}
	}
	runes = append(runes, '中', '😀', '٣', '\u2028')
	for _, fn := range []string{"LOWER", "UPPER"} {
		for i := 0; i < len(runes); i += 200 {
			chunk := runes[i:min(i+200, len(runes))]
			var cols []string
			for _, r := range chunk {
				cols = append(cols, fmt.Sprintf("HEX(%s(CONVERT(X'%s' USING utf8mb4) COLLATE utf8mb4_bin))", fn, hex.EncodeToString([]byte(string(r)))))
			}
			row := make([]any, len(chunk))
			out := make([]string, len(chunk))
			for j := range row {
				row[j] = &out[j]
			}
			if err := db.QueryRow("SELECT " + strings.Join(cols, ", ")).Scan(row...); err != nil {
				t.Fatal(err)
			}
			for j, r := range chunk {
				b, _ := hex.DecodeString(out[j])
				ours, reason := ourValue(t, fn+"(a)", `{"a":"`+string(r)+`"}`)
				if reason == "" && ours != string(b) {
					t.Errorf("%s(%q U+%04X) = %q, MariaDB gives %q", fn, r, r, ours, b)
				}
			}
		}
	}
}
