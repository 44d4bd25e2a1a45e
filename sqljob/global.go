package sqljob

import (
	"strings"
)

// A query without GROUP BY whose columns are all aggregates
// (SELECT COUNT(*) AS n, SUM(x) AS s FROM t) keeps one row. The sinks
// merge rows by key (ON DUPLICATE KEY UPDATE, ON CONFLICT, a Redis hash
// field per row), so its table gets one key column of its own, GlobalKey,
// holding GlobalKeyValue in its only row: the table is
// (mb_all VARBINARY(8) PRIMARY KEY, n BIGINT, s DECIMAL(38,9)).
const (
	GlobalKey      = "mb_all"
	GlobalKeyValue = "all"
)

// globalKeyWidth is the key column's size: GlobalKeyValue fits.
const globalKeyWidth = 8

// addGlobalKey makes q's table one row: GlobalKey as its only key column,
// first. It refuses a column of that name.
func (c *compiler) addGlobalKey(pos int) error {
	q := c.q
	q.fields, q.keyW = c.paths, globalKeyWidth
	for _, col := range q.cols {
		if strings.EqualFold(col.Name, GlobalKey) {
			return c.errAt(pos, "column "+GlobalKey, "is the key column of a query without GROUP BY (its one row): name the column otherwise")
		}
	}
	v := strVal([]byte(GlobalKeyValue))
	key := Column{Name: GlobalKey, Expr: "'" + GlobalKeyValue + "'", Key: true, eval: func(*env) (val, error) { return v, nil }}
	q.cols = append([]Column{key}, q.cols...)
	q.keys = []int{0}
	for i := range q.vals {
		q.vals[i]++
	}
	return nil
}

// Global reports whether q has no GROUP BY: its table is one row, keyed
// by GlobalKey.
func (q *Query) Global() bool {
	return len(q.keys) == 1 && q.cols[q.keys[0]].Name == GlobalKey && q.keyW == globalKeyWidth
}
