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

// TestDeadLetterMerge: the sink's dead letters are compared with the
// rejected offsets as sets: the same count with another offset, a missing
// run, one before the log start (not judged), another topic's and a whole
// partition without dead letters are each found.
func TestDeadLetterMerge(t *testing.T) {
	var exp rejections
	for _, o := range []struct {
		p   int32
		off int64
	}{{0, 2}, {0, 3}, {0, 4}, {0, 9}, {1, 0}, {2, 5}, {2, 6}} {
		exp.add(o.p, o.off, "bad")
	}
	if got := len(exp.runs[0]); got != 2 {
		t.Errorf("partition 0 has %d runs, want 2 ([2,5) and [9,10))", got)
	}
	type dl struct {
		topic string
		p     int32
		off   int64
	}
	for _, c := range []struct {
		name                string
		sink                []dl
		missing, unexpected int64
		missingAt           []string
		unexpectedAt        []string
	}{
		{name: "same", sink: []dl{{"t", 0, 2}, {"t", 0, 3}, {"t", 0, 4}, {"t", 0, 9}, {"t", 1, 0}, {"t", 2, 5}, {"t", 2, 6}}},
		{name: "one moved", sink: []dl{{"t", 0, 2}, {"t", 0, 3}, {"t", 0, 5}, {"t", 0, 9}, {"t", 1, 0}, {"t", 2, 5}, {"t", 2, 6}},
			missing: 1, unexpected: 1, missingAt: []string{"0/4"}, unexpectedAt: []string{"0/5"}},
		{name: "partition gone, one before the log start", sink: []dl{{"t", 0, 2}, {"t", 0, 3}, {"t", 0, 4}, {"t", 0, 9}, {"t", 2, 1}, {"t", 2, 5}, {"t", 2, 6}},
			missing: 1, missingAt: []string{"1/0"}},
		{name: "another topic, the end missing", sink: []dl{{"t", 0, 2}, {"t", 0, 3}, {"other", 0, 4}, {"t", 1, 0}},
			missing: 4, unexpected: 1, missingAt: []string{"0/4", "0/9", "2/5", "2/6"}, unexpectedAt: []string{"other/0/4"}},
		{name: "none", missing: 7, missingAt: []string{"0/2", "0/3", "0/4", "0/9", "1/0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newDeadLetterMerge(&exp, "t", map[int32]int64{0: 0, 1: 0, 2: 2})
			for _, d := range c.sink {
				m.sink(d.topic, d.p, d.off)
			}
			m.finish()
			if m.missing != c.missing || m.unexpected != c.unexpected ||
				strings.Join(m.missingAt, " ") != strings.Join(c.missingAt, " ") ||
				strings.Join(m.unexpectedAt, " ") != strings.Join(c.unexpectedAt, " ") {
				t.Errorf("missing %d %v, unexpected %d %v; want %d %v, %d %v", m.missing, m.missingAt, m.unexpected, m.unexpectedAt,
					c.missing, c.missingAt, c.unexpected, c.unexpectedAt)
			}
			if p := m.problem(); (p == "") != (c.missing+c.unexpected == 0) {
				t.Errorf("problem() = %q", p)
			}
		})
	}
}
