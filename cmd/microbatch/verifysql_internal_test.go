package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/sqljob"
)

// TestComparisonAbsentGroups: a group the sink has no row for is missing,
// except in Redis when every value the recomputation gives it is NULL —
// such a group has no field in any hash, which is all Redis can hold of
// it. A decimal matches whatever trailing zeros the sink writes.
func TestComparisonAbsentGroups(t *testing.T) {
	q, err := sqljob.Compile("INSERT INTO t SELECT k, SUM(x) AS s, MAX(x) AS m FROM events GROUP BY k", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := q.NewAggregate()
	for _, rec := range []string{`{"k":"all-null"}`, `{"k":"some","x":1.5}`, `{"k":"gone","x":2}`} {
		if err := a.Add([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		redis                               bool
		matching, missing, extra, different int
	}{
		{redis: true, matching: 2, missing: 1},
		{redis: false, matching: 1, missing: 2},
	} {
		cmp := newComparison(q, a.Rows(), 10)
		cmp.sinkRow("some", `"some"`, []any{"1.500000000", []byte("1.50")})
		cmp.finish(c.redis)
		if cmp.matching != c.matching || cmp.missing != c.missing || cmp.extra != c.extra || cmp.different != c.different {
			t.Errorf("redis=%v: matching %d, missing %d, extra %d, different %d; want %d, %d, %d, %d", c.redis,
				cmp.matching, cmp.missing, cmp.extra, cmp.different, c.matching, c.missing, c.extra, c.different)
		}
		var out bytes.Buffer
		if cmp.print(&out) {
			t.Errorf("redis=%v: print says all match:\n%s", c.redis, out.String())
		}
		if !strings.Contains(out.String(), `"gone"`) {
			t.Errorf("redis=%v: the missing group is not listed:\n%s", c.redis, out.String())
		}
	}
}
