package sqljob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Fingerprint identifies what the query writes into its table: the table,
// the topic, the WHERE, and each column's name, role (group key or
// aggregate), expression and window, with the Options that decide how
// values are kept. Two statements that differ only in whitespace, keyword
// case or comments have the same fingerprint; a changed filter, column,
// alias or aggregate changes it. It is 64 hex digits, a SHA-256
// of a canonical description (canonical).
//
// It hashes the parser's printing of the expressions, which another
// version may print differently: Claim then compiles the recorded query's
// text and compares the fingerprints of the same version.
//
// The table's owner record (Claim) keeps it: a table's rows are the
// results of one query, and rows of two queries merged into one table
// would be neither's.
func (q *Query) Fingerprint() string {
	sum := sha256.Sum256([]byte(q.canonical()))
	return hex.EncodeToString(sum[:])
}

// canonical is the text Fingerprint hashes: one line per part, each value
// quoted so that no text can pass for another line. The expressions are
// the parser's printing (Column.Expr, the WHERE), not the user's text.
// Column names are compared as MySQL does, without case.
func (q *Query) canonical() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table %q\ntopic %q\nwhere %q\n", tableKey(q.table, q.opts.SQLite), q.topic, q.whereS)
	fmt.Fprintf(&b, "options integer-sums=%t sqlite=%t", q.opts.IntegerSums, q.opts.SQLite)
	if q.opts.Postgres { // only then: the fingerprints of the other sinks' queries stay as they were
		b.WriteString(" postgres=true")
	}
	b.WriteString("\n")
	for _, c := range q.cols {
		role := "key"
		if !c.Key {
			role = c.Aggregate()
		}
		fmt.Fprintf(&b, "column %q %s %q window=%d\n", strings.ToLower(c.Name), role, c.Expr, c.Window)
	}
	return b.String()
}
