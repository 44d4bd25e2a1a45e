package sqljob_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers"
)

func compileRow(t *testing.T, sql string, opts sqljob.Options) *sqljob.Query {
	t.Helper()
	q, err := sqljob.Compile(sql, opts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if !q.RowJob() {
		t.Fatalf("%s: not a row job", sql)
	}
	return q
}

func rowText(r sqljob.Row) string {
	var parts []string
	for _, v := range r.Values {
		switch v.(type) {
		case nil:
			parts = append(parts, "NULL")
		case int64:
			parts = append(parts, fmt.Sprintf("%d", v))
		default:
			parts = append(parts, fmt.Sprintf("%q", v))
		}
	}
	s := strings.Join(parts, "|")
	if r.Delete {
		s = "DELETE " + s
	}
	return s
}

var meta = sqljob.Meta{Key: []byte("k1"), Partition: 3, Offset: 42, Timestamp: time.UnixMilli(1700000000123)}

// An append keeps each accepted record as a row, in SELECT order; values
// without a cast are their text (a number as written, true/false, an
// object as its JSON text, null as NULL); the record's own fields are
// columns and can be filtered on.
func TestRowJobAppend(t *testing.T) {
	q := compileRow(t, "INSERT INTO orders SELECT id, customer->>'$.id' AS customer_id, total, paid, items, note, _key, _partition AS p, _offset AS o, _timestamp AS ts FROM orders_topic WHERE status <> 'test' AND _partition < 5", sqljob.Options{})
	if q.Upserting() || len(q.KeyColumns()) != 0 {
		t.Fatalf("upserting %v keys %v", q.Upserting(), q.KeyColumns())
	}
	u := q.Upsert()
	if u.Merge != writers.MergeAppend || len(u.Keys) != 0 || strings.Join(u.Values, ",") != "id,customer_id,total,paid,items,note,_key,p,o,ts" {
		t.Fatalf("upsert %+v", u)
	}
	for _, c := range []struct {
		rec  string
		m    sqljob.Meta
		want string
	}{
		{`{"id":7,"customer":{"id":"c1"},"total":12.50,"paid":true,"items":[1, {"a":2}],"note":null,"status":"new"}`, meta,
			`"7"|"c1"|"12.50"|"true"|"[1, {\"a\":2}]"|NULL|"k1"|3|42|"2023-11-14 22:13:20.123"`},
		{`{"id":"x","total":1e3,"status":"new"}`, sqljob.Meta{Partition: 1}, `"x"|NULL|"1e3"|NULL|NULL|NULL|NULL|1|0|NULL`},
		{`{"id":7,"status":"test"}`, meta, ``},                     // filtered
		{`{"id":7,"status":"new"}`, sqljob.Meta{Partition: 5}, ``}, // filtered by _partition
	} {
		r, err := q.Row([]byte(c.rec), c.m)
		if err != nil {
			t.Fatalf("Row(%s): %v", c.rec, err)
		}
		if got := rowText(r); got != c.want {
			t.Errorf("Row(%s)\n got  %s\n want %s", c.rec, got, c.want)
		}
	}
	for _, rec := range []string{`{"id":1`, `[1]`, `{"id":1,"status":2}`} {
		if _, err := q.Row([]byte(rec), meta); !sqljob.IsRejection(err) {
			t.Errorf("Row(%s): %v, want a rejection", rec, err)
		}
	}
	if _, err := q.Row(nil, meta); !sqljob.IsRejection(err) {
		t.Errorf("a tombstone in an append: %v, want a rejection", err)
	}
}

// An upsert names its key; a tombstone deletes the key when the key is
// _key; values come in Upsert's order (keys first).
func TestRowJobUpsert(t *testing.T) {
	q := compileRow(t, "REPLACE INTO users (PRIMARY KEY (id)) SELECT name, _key AS id, CAST(age AS SIGNED) AS age, CAST(balance AS DECIMAL(10,2)) AS balance, CAST(seen AS DATETIME(3)) AS seen, CAST(tags AS JSON) AS tags, CAST(name AS CHAR(5)) AS short FROM users_topic", sqljob.Options{})
	if !q.Upserting() || strings.Join(q.KeyColumns(), ",") != "id" {
		t.Fatalf("upserting %v keys %v", q.Upserting(), q.KeyColumns())
	}
	u := q.Upsert()
	if u.Merge != writers.MergeReplace || strings.Join(u.Keys, ",") != "id" || strings.Join(u.Values, ",") != "name,age,balance,seen,tags,short" {
		t.Fatalf("upsert %+v", u)
	}
	r, err := q.Row([]byte(`{"name":"Ann","age":"41","balance":3.5,"seen":"2024-02-29T23:00:00.5+01:00","tags":["a", "b"]}`), meta)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowText(r), `"k1"|"Ann"|41|"3.50"|"2024-02-29 22:00:00.500"|"[\"a\", \"b\"]"|"Ann"`; got != want {
		t.Errorf("row\n got  %s\n want %s", got, want)
	}
	r, err = q.Row([]byte(`{"name":"a\"b","tags":"t"}`), meta)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowText(r), `"k1"|"a\"b"|NULL|NULL|NULL|"\"t\""|"a\"b"`; got != want {
		t.Errorf("row\n got  %s\n want %s", got, want)
	}
	r, err = q.Row(nil, meta)
	if err != nil || rowText(r) != `DELETE "k1"|NULL|NULL|NULL|NULL|NULL|NULL` {
		t.Errorf("tombstone: %s, %v", rowText(r), err)
	}
	for rec, want := range map[string]string{
		`{"age":1.5}`:                         "digits after the point",
		`{"age":"abc"}`:                       "not an integer's text",
		`{"balance":1.234}`:                   "more than 2 digits after the point",
		`{"balance":123456789}`:               "out of the type's range",
		`{"seen":"2023-02-29 10:00:00"}`:      "not a valid date",
		`{"seen":"2023-02-28 10:00:00.1234"}`: "more than 3 digits after the second",
		`{"seen":17000}`:                      "not a time's text",
		`{"name":"abcdef"}`:                   "is 6 characters",
	} {
		_, err := q.Row([]byte(rec), meta)
		if !sqljob.IsRejection(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("Row(%s): %v, want a rejection saying %q", rec, err, want)
		}
	}
	if _, err := q.Row([]byte(`{"name":"x"}`), sqljob.Meta{}); err == nil || !strings.Contains(err.Error(), "key column id (_key) is missing or null") {
		t.Errorf("no key: %v", err)
	}
	if _, err := q.Row(nil, sqljob.Meta{}); !sqljob.IsRejection(err) {
		t.Errorf("a tombstone without a key: %v", err)
	}
	// A key that isn't _key: a tombstone is bad input.
	q2 := compileRow(t, "REPLACE INTO users (PRIMARY KEY (id)) SELECT id, name FROM users_topic", sqljob.Options{})
	if _, err := q2.Row(nil, meta); !sqljob.IsRejection(err) {
		t.Errorf("a tombstone with a key from the value: %v, want a rejection", err)
	}
}

// The table a row job creates: each column's type, the key, the DDL and
// the plan.
func TestRowJobDDL(t *testing.T) {
	q := compileRow(t, "REPLACE INTO t (PRIMARY KEY (k, p)) SELECT _key AS k, _partition AS p, _offset AS o, _timestamp AS ts, x, CAST(n AS SIGNED) AS n, CAST(d AS DECIMAL(12,3)) AS d, CAST(s AS CHAR(20)) AS s, CAST(j AS JSON) AS j, CAST(w AS DATETIME(3)) AS w FROM e", sqljob.Options{})
	want := "CREATE TABLE IF NOT EXISTS `t` (\n  `k` VARBINARY(1024) NOT NULL,\n  `p` INT NOT NULL,\n  `o` BIGINT NULL,\n  `ts` DATETIME(3) NULL,\n  `x` MEDIUMTEXT NULL,\n  `n` BIGINT NULL,\n  `d` DECIMAL(12,3) NULL,\n  `s` VARCHAR(20) NULL,\n  `j` JSON NULL,\n  `w` DATETIME(3) NULL,\n  PRIMARY KEY (`k`, `p`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
	if got := q.DDL(); got != want {
		t.Errorf("DDL\n%s\nwant\n%s", got, want)
	}
	plan := q.Plan()
	for _, s := range []string{"mode:   upsert", "key:    k, p", "INSERT INTO `t` (`k`, `p`, `o`, `ts`, `x`, `n`, `d`, `s`, `j`, `w`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (…) ON DUPLICATE KEY UPDATE", fmt.Sprintf("up to %d rows per statement", sqljob.RowBatch), "x                MEDIUMTEXT"} {
		if !strings.Contains(plan, s) {
			t.Errorf("plan lacks %q:\n%s", s, plan)
		}
	}
	a := compileRow(t, "INSERT INTO t SELECT x, _offset AS o FROM e", sqljob.Options{SQLite: true})
	if got, want := a.DDL(), "CREATE TABLE IF NOT EXISTS `t` (\n  `x` TEXT NULL,\n  `o` INTEGER NULL\n)"; got != want {
		t.Errorf("SQLite DDL\n%s\nwant\n%s", got, want)
	}
	if p := a.Plan(); !strings.Contains(p, "mode:   append") || !strings.Contains(p, "key:    none") {
		t.Errorf("append plan:\n%s", p)
	}
}

// What a row job refuses, with the form to write.
func TestRowJobRefused(t *testing.T) {
	for sql, want := range map[string]string{
		"REPLACE INTO t SELECT id, x FROM e":                                         "REPLACE INTO t (PRIMARY KEY (id)) SELECT id",
		"REPLACE INTO t (PRIMARY KEY (k)) SELECT k, COUNT(*) AS n FROM e GROUP BY k": "not with GROUP BY or aggregates",
		"INSERT INTO t (PRIMARY KEY (id)) SELECT id, x FROM e":                       "write REPLACE INTO t (PRIMARY KEY (id))",
		"REPLACE INTO t (PRIMARY KEY (nope)) SELECT id, x FROM e":                    "nope is not a column of the SELECT",
		"REPLACE INTO t (PRIMARY KEY (id, id)) SELECT id, x FROM e":                  "id is named twice",
		"REPLACE INTO t (PRIMARY KEY (id)) SELECT id FROM e":                         "select a column besides the key",
		"REPLACE INTO t (PRIMARY KEY id) SELECT id, x FROM e":                        "syntax error",
		"INSERT INTO t (a, b) SELECT id, x FROM e":                                   "INSERT column list",
		"INSERT INTO t SELECT CAST(x AS DATETIME(7)) AS y FROM e":                    "0 to 6 digits",
	} {
		_, err := sqljob.Compile(sql, sqljob.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s\n got  %v\n want an error saying %q", sql, err, want)
		}
	}
}

// The record's fields in an aggregate job: GROUP BY _partition, and a
// JSON field of the same name read with the alias.
func TestRecordFieldsInAggregate(t *testing.T) {
	q, err := sqljob.Compile("INSERT INTO t SELECT _partition AS p, e._key AS jk, COUNT(*) AS n FROM e GROUP BY p, jk", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := q.NewAggregate()
	for i, r := range []string{`{"_key":"a"}`, `{"_key":"a"}`, `{"_key":"b"}`} {
		if err := a.AddRecord([]byte(r), sqljob.Meta{Partition: int32(i % 2)}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmt.Sprint(a.Rows()), "[[0 a 1] [0 b 1] [1 a 1]]"; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
}
