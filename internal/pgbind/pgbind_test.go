package pgbind

import "testing"

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT 1": "SELECT 1",
		"UPDATE t SET a = ? WHERE b = ? AND c = ?": "UPDATE t SET a = $1 WHERE b = $2 AND c = $3",
		"INSERT INTO t VALUES (?, '?', ?)":         "INSERT INTO t VALUES ($1, '?', $2)",
		`SELECT "a?" FROM t WHERE x = ?`:           `SELECT "a?" FROM t WHERE x = $1`,
		"SELECT 'it''s ?', ?":                      "SELECT 'it''s ?', $1",
		"SELECT ? -- is it?\n, ?":                  "SELECT $1 -- is it?\n, $2",
		"SELECT /* ? */ ?":                         "SELECT /* ? */ $1",
		"SELECT $$a?b$$, $tag$?$tag$, ?":           "SELECT $$a?b$$, $tag$?$tag$, $1",
		"SELECT 'open ?":                           "SELECT 'open ?",
	} {
		if got := Rebind(in); got != want {
			t.Errorf("Rebind(%q) = %q, want %q", in, got, want)
		}
	}
}
