package sqlsink

import (
	"context"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/writers"
)

// Every parsed MySQL DSN carries the strict sql_mode, unless it sets one.
func TestParseDSNStrictSQLMode(t *testing.T) {
	for dsn, want := range map[string]string{
		"mysql://u:p@h/db":                           "'" + StrictSQLMode + "'",
		"u:p@tcp(h:1)/db":                            "'" + StrictSQLMode + "'",
		"mysql://u:p@h/db?sql_mode=%27ANSI%27":       "'ANSI'",
		"u:p@tcp(h:1)/db?sql_mode=%27TRADITIONAL%27": "'TRADITIONAL'",
	} {
		got, err := ParseDSN(dsn)
		if err != nil {
			t.Fatalf("ParseDSN(%q): %v", dsn, err)
		}
		cfg, err := mysql.ParseDSN(got.DataSource)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Params["sql_mode"] != want {
			t.Errorf("ParseDSN(%q): sql_mode %q, want %q", dsn, cfg.Params["sql_mode"], want)
		}
	}
}

// A server whose global sql_mode is empty (not strict) truncates a
// too-long string with a warning; a sink's session refuses it. The
// global mode is a server's setting shared with every other test on it:
// it is empty only while the writer opens its connection (a session
// takes the global mode when it connects) and restored at once.
func TestSQLSessionStrictWhateverTheServer(t *testing.T) {
	dsn := mysqlDSN(t)
	ctx := t.Context()
	admin := openSink(t, dsn)
	var global string
	if err := admin.DB().QueryRowContext(ctx, "SELECT @@GLOBAL.sql_mode").Scan(&global); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if _, err := admin.DB().ExecContext(context.Background(), "SET GLOBAL sql_mode = ?", global); err != nil {
			t.Errorf("restoring the global sql_mode %q: %v", global, err)
		}
	}
	table := "strict_" + strings.ReplaceAll(uniqueJob(t)[len(t.Name())+1:], "-", "")
	if _, err := admin.DB().ExecContext(ctx, "CREATE TABLE "+table+" (s VARCHAR(3) NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.DB().ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) })

	if _, err := admin.DB().ExecContext(ctx, "SET GLOBAL sql_mode = ''"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restore)
	w, err := Open(ctx, dsn)
	if err != nil {
		restore()
		t.Fatal(err)
	}
	defer w.Close()
	conn, err := w.DB().Conn(ctx) // opened (by Open's ping) under the empty global mode
	restore()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var serverDefault, session string
	if err := conn.QueryRowContext(ctx, "SELECT @@GLOBAL.sql_mode, @@SESSION.sql_mode").Scan(&serverDefault, &session); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(session, "STRICT_ALL_TABLES") {
		t.Errorf("session sql_mode %q, want strict (global was %q when it connected)", session, "")
	}
	_, err = conn.ExecContext(ctx, "INSERT INTO "+table+" (s) VALUES (?)", "abcdef")
	var stored string
	_ = conn.QueryRowContext(ctx, "SELECT s FROM "+table).Scan(&stored)
	if err == nil {
		t.Fatalf("a 6-character string went into VARCHAR(3) without an error; stored %q", stored)
	}
	if n := mysqlErrNo(err); n != 1406 { // ER_DATA_TOO_LONG
		t.Fatalf("too long a string: %v (error %d), want error 1406", err, n)
	}
	// So is one in a row job's prepared multi-row INSERT (insertRowsPer).
	rows := make([][]any, 2*rowsPerStatement+1)
	for i := range rows {
		rows[i] = []any{"abc"}
	}
	rows[rowsPerStatement+7][0] = "abcd"
	err = w.insertRows(ctx, conn, writers.Upsert{Table: table, Values: []string{"s"}, Merge: writers.MergeAppend}, rows)
	if n := mysqlErrNo(err); n != 1406 {
		t.Fatalf("too long a string in a prepared INSERT: %v (error %d), want error 1406", err, n)
	}
}
