package sqljob

import (
	"bytes"
	"strings"

	"github.com/microbatch/microbatch/writers"
)

// MIN and MAX of strings. JSON has no schema, so a column's type comes
// from the query: MIN or MAX whose argument is statically a string
// (staticKindOf: CAST(x AS CHAR), LOWER, UPPER, CONCAT, SUBSTRING, a
// string literal, IF/CASE/COALESCE of strings) keeps the least or the
// greatest string in byte order, as the keys compare, in a VARBINARY
// column (TEXT on SQLite, compared by memcmp; a Redis field compared byte
// by byte). MIN or MAX of anything else takes numbers, and a record whose
// value is a string is dead-lettered with the reason, saying to write
// MIN(CAST(x AS CHAR)).

// textWidth is the bytes of a MIN/MAX text column: a longer value is
// dead-lettered, never cut.
const textWidth = 1024

// Text reports whether the column is MIN or MAX of strings: its values are
// text compared byte by byte (VARBINARY), not numbers.
func (c Column) Text() bool { return c.str }

func textMerge(k aggKind) writers.Merge {
	if k == aggMin {
		return writers.MergeMinBytes
	}
	return writers.MergeMaxBytes
}

// addText keeps v's text in ac if it is the least (MIN) or the greatest
// (MAX) so far.
func (ac *acc) addText(k aggKind, s []byte) {
	if ac.str == nil {
		ac.str, ac.seen = append([]byte{}, s...), true
		return
	}
	r := bytes.Compare(s, ac.str)
	if (k == aggMin && r < 0) || (k == aggMax && r > 0) {
		ac.str = append(ac.str[:0], s...)
	}
}

// aggArgText is the argument's text of an aggregate's printed form:
// min(`name`) -> `name`.
func aggArgText(x string) string {
	i := strings.IndexByte(x, '(')
	if i < 0 || !strings.HasSuffix(x, ")") {
		return x
	}
	return x[i+1 : len(x)-1]
}
