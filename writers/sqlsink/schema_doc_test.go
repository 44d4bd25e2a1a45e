package sqlsink

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/sqljob"
	"github.com/microbatch/microbatch/writers"
)

// docs/tables.md is the contract users read: table names,
// columns and keys. These tests hold it to the CREATE TABLE statements the
// code runs, in both dialects.

// tableDDLs is every mb_* table the library creates, by dialect (the XA
// table exists in MySQL/MariaDB only: SQLite has no XA).
func tableDDLs(d offsets.Dialect) map[string]string {
	m := map[string]string{
		writers.TotalsTable: totalsDDL(d, writers.TotalsTable),
		"mb_dead_letters":   deadLettersDDL(d),
		offsets.Table:       offsets.Schema(d),
		offsets.SourceTable: offsets.SourceSchema(d),
		WALTable:            walDDL(d),
		sqljob.OwnersTable:  sqljob.OwnersSchema(d == offsets.SQLite),
	}
	if d == offsets.MySQL {
		m[XATable] = xaDDL
	}
	return m
}

type tableShape struct {
	columns, key []string
}

var (
	ddlTableRE = regexp.MustCompile(`(?s)CREATE TABLE IF NOT EXISTS (\w+) \((.*)\)`)
	keyRE      = regexp.MustCompile(`PRIMARY KEY \(([^)]*)\)`)
)

// ddlShape reads the columns and primary key of a CREATE TABLE statement
// (one column or key a line, as the code writes them).
func ddlShape(t *testing.T, ddl string) (string, tableShape) {
	t.Helper()
	m := ddlTableRE.FindStringSubmatch(ddl)
	if m == nil {
		t.Fatalf("not a CREATE TABLE statement: %s", ddl)
	}
	body := m[2]
	if i := strings.LastIndex(body, ")"); i >= 0 && strings.Contains(body[i:], "ENGINE") {
		body = body[:i]
	}
	var s tableShape
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSuffix(strings.TrimSpace(line), ",")
		switch {
		case line == "", strings.HasPrefix(line, "UNIQUE"):
		case strings.HasPrefix(line, "PRIMARY KEY"):
			s.key = splitList(keyRE.FindStringSubmatch(line)[1])
		default:
			s.columns = append(s.columns, strings.Fields(line)[0])
		}
	}
	return m[1], s
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(f))
	}
	return out
}

var readmeTableRE = regexp.MustCompile(`(?s)^(mb_\w+)\s*\(([^)]*)\)\s*PRIMARY KEY \(([^)]*)\)`)

// tablesDoc is the page that documents the tables, from this package.
var tablesDoc = filepath.Join("..", "..", "docs", "tables.md")

// readmeTables reads the first code block of docs/tables.md (up to its
// first "## " section): per table, "name (columns…)" and "PRIMARY KEY (…)".
func readmeTables(t *testing.T) (section string, tables map[string]tableShape) {
	t.Helper()
	raw, err := os.ReadFile(tablesDoc)
	if err != nil {
		t.Fatal(err)
	}
	section, ok := strings.CutPrefix(string(raw), "# Tables\n")
	if !ok {
		t.Fatalf(`%s does not start with "# Tables"`, tablesDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "\n```\n")
	if !ok {
		t.Fatalf("%s has no code block", tablesDoc)
	}
	block, _, _ = strings.Cut(block, "\n```")
	tables = map[string]tableShape{}
	for _, entry := range regexp.MustCompile(`(?m)^mb_`).Split(block, -1)[1:] {
		m := readmeTableRE.FindStringSubmatch("mb_" + entry)
		if m == nil {
			t.Fatalf("%s: can't read the entry %q (want name (columns) PRIMARY KEY (columns))", tablesDoc, "mb_"+entry)
		}
		tables[m[1]] = tableShape{columns: splitList(m[2]), key: splitList(m[3])}
	}
	return section, tables
}

// TestReadmeTablesMatchSchema: every table the code creates is in
// docs/tables.md with the code's columns, in order, and primary key; the
// page lists no other.
func TestReadmeTablesMatchSchema(t *testing.T) {
	_, doc := readmeTables(t)
	created := map[string]bool{}
	for _, d := range []offsets.Dialect{offsets.MySQL, offsets.SQLite} {
		for name, ddl := range tableDDLs(d) {
			created[name] = true
			got, code := ddlShape(t, ddl)
			if got != name {
				t.Fatalf("%s DDL of %s creates %s", d, name, got)
			}
			readme, ok := doc[name]
			if !ok {
				t.Errorf("%s is created (%s) but not in %s", name, d, tablesDoc)
				continue
			}
			if !slices.Equal(readme.columns, code.columns) {
				t.Errorf("%s: %s lists columns %v; the %s DDL creates %v", name, tablesDoc, readme.columns, d, code.columns)
			}
			if !slices.Equal(readme.key, code.key) {
				t.Errorf("%s: %s says PRIMARY KEY %v; the %s DDL has %v", name, tablesDoc, readme.key, d, code.key)
			}
		}
	}
	created[PreparedTable] = true // PostgreSQL only: TestPostgresTablesMatchSchema
	for name := range doc {
		if !created[name] {
			t.Errorf("%s lists %s, which the code does not create", tablesDoc, name)
		}
	}
}

// TestPostgresTablesMatchSchema: the tables PostgreSQL gets have the
// columns and keys docs/tables.md lists, keys as BYTEA and amounts as
// NUMERIC(38,0), as the page says.
func TestPostgresTablesMatchSchema(t *testing.T) {
	section, doc := readmeTables(t)
	for _, want := range []string{"`k` is `BYTEA`", "`NUMERIC(38,0)`", "COLLATE \"C\""} {
		if !strings.Contains(section, want) {
			t.Errorf("%s does not say %s about PostgreSQL", tablesDoc, want)
		}
	}
	for name, ddl := range map[string]string{
		writers.TotalsTable: totalsDDL(offsets.Postgres, writers.TotalsTable),
		"mb_dead_letters":   deadLettersDDL(offsets.Postgres),
		offsets.Table:       offsets.Schema(offsets.Postgres),
		offsets.SourceTable: offsets.SourceSchema(offsets.Postgres),
		WALTable:            walDDL(offsets.Postgres),
		PreparedTable:       pgPreparedDDL,
	} {
		got, code := ddlShape(t, ddl)
		if got != name {
			t.Fatalf("the PostgreSQL DDL of %s creates %s", name, got)
		}
		if readme := doc[name]; !slices.Equal(readme.columns, code.columns) || !slices.Equal(readme.key, code.key) {
			t.Errorf("%s: %s lists %v PRIMARY KEY %v; the PostgreSQL DDL creates %v PRIMARY KEY %v", name, tablesDoc, readme.columns, readme.key, code.columns, code.key)
		}
		if strings.Contains(ddl, "ENGINE") || strings.Contains(ddl, "`") || strings.Contains(ddl, "DATETIME") {
			t.Errorf("%s: MySQL syntax in the PostgreSQL DDL:\n%s", name, ddl)
		}
	}
	if ddl := totalsDDL(offsets.Postgres, writers.TotalsTable); !strings.Contains(ddl, "k BYTEA") || !strings.Contains(ddl, "amount NUMERIC(38,0)") {
		t.Errorf("mb_totals in PostgreSQL: want k BYTEA and amount NUMERIC(38,0):\n%s", ddl)
	}
}

// TestMySQLTablesBinary: docs/tables.md promises InnoDB, utf8mb4 and a binary
// collation for every table in MySQL/MariaDB — names (jobs, keys, XA
// branch qualifiers) must never match case- or accent-insensitively. A
// table's default collation is also what a column added later gets.
func TestMySQLTablesBinary(t *testing.T) {
	section, _ := readmeTables(t)
	if !strings.Contains(section, "(InnoDB, utf8mb4, binary collation)") {
		t.Fatalf("%s no longer says \"(InnoDB, utf8mb4, binary collation)\": update this test with it", tablesDoc)
	}
	for name, ddl := range tableDDLs(offsets.MySQL) {
		for _, want := range []string{"ENGINE=InnoDB", "DEFAULT CHARSET=utf8mb4", "COLLATE=utf8mb4_bin"} {
			if !strings.Contains(ddl, want) {
				t.Errorf("%s: the MySQL DDL lacks %s", name, want)
			}
		}
	}
}
