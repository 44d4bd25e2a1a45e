package sqljob_test

import (
	"testing"

	"github.com/microbatch/microbatch/sqljob"
)

// TestUnreadFieldsSyntaxOnly pins what docs/sql-jobs.md ("Bad records")
// says: the whole record is checked for JSON syntax (escapes well formed,
// no control character in a string, valid UTF-8 everywhere), but escapes
// are decoded only where the query reads: a lone surrogate escape, or a
// name given twice, in a field the query never reads is accepted, and the
// same in a field it reads is dead-lettered.
func TestUnreadFieldsSyntaxOnly(t *testing.T) {
	q, err := sqljob.Compile("INSERT INTO t SELECT `key`, COUNT(*) AS n FROM events GROUP BY `key`", sqljob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		record string
		ok     bool
	}{
		{`{"key":"a","other":"\ud800"}`, true},        // lone surrogate, field not read
		{`{"key":"a","o":{"\ud800":1}}`, true},        // in a name the query doesn't look for
		{`{"key":"a","other":1,"other":2}`, true},     // a name twice, not read
		{`{"key":"\ud800"}`, false},                   // lone surrogate in the key
		{`{"key":"a","key":"b"}`, false},              // the key twice
		{`{"key":"a","other":"\x"}`, false},           // malformed escape anywhere
		{`{"key":"a","other":"\u12"}`, false},         // short \u escape anywhere
		{"{\"key\":\"a\",\"other\":\"\x01\"}", false}, // control character anywhere
		{"{\"key\":\"a\",\"other\":\"\xff\"}", false}, // invalid UTF-8 anywhere
		{`{"key":"a","other":[1,2,}`, false},          // syntax anywhere
		{`{"key":"a","other":"\ud83d\ude00"}`, true},  // a pair is fine
	} {
		err := q.NewAggregate().Add([]byte(c.record))
		if (err == nil) != c.ok {
			t.Errorf("%q: error %v, want accepted=%v", c.record, err, c.ok)
		}
		if err != nil && !sqljob.IsRejection(err) {
			t.Errorf("%q: %v is not a rejection (a dead letter)", c.record, err)
		}
	}
}
