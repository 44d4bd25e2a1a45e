package sqljob

import (
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// TestEnsureTableMariaDB: the table EnsureTable creates passes its own
// check (a window's DATETIME(3) included, whose precision MySQL reports as
// DATETIME_PRECISION, not NUMERIC_SCALE), a second EnsureTable accepts it,
// and a window column of whole seconds is refused.
func TestEnsureTableMariaDB(t *testing.T) {
	dsn := testutil.FreshMySQLDatabase(t, testutil.NeedServer(t, testutil.EnvMySQL))
	w, err := sqlsink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q := mustCompile(t, "INSERT INTO per_minute SELECT TUMBLE(ts, '1m') AS minute, `key`, COUNT(*) AS events, "+
		"SUM(amount) AS amount, MIN(amount) AS smallest, MAX(amount) AS largest FROM events GROUP BY minute, `key`", Options{})
	for i := range 2 { // creates it, then finds it
		if err := q.EnsureTable(t.Context(), w.DB()); err != nil {
			t.Fatalf("EnsureTable #%d: %v", i+1, err)
		}
	}

	if _, err := w.DB().Exec("CREATE TABLE whole_seconds (minute DATETIME NOT NULL, `key` VARBINARY(1024) NOT NULL, " +
		"events BIGINT NOT NULL, PRIMARY KEY (minute, `key`))"); err != nil {
		t.Fatal(err)
	}
	q = mustCompile(t, "INSERT INTO whole_seconds SELECT TUMBLE(ts, '1m') AS minute, `key`, COUNT(*) AS events "+
		"FROM events GROUP BY minute, `key`", Options{})
	err = q.EnsureTable(t.Context(), w.DB())
	if err == nil || !strings.Contains(err.Error(), "window column minute") {
		t.Fatalf("EnsureTable on a DATETIME window column = %v, want it refused naming the column", err)
	}
}
