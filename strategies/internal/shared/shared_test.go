package shared

import (
	"errors"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
)

// TestDeadLetterReasons: a reason made from a Transform's error text or a
// decoder's is valid UTF-8 within writers.MaxReasonBytes, the bytes that
// are not UTF-8 escaped (encoding/json would write U+FFFD for them), cut
// at a character boundary; the payload stays the record's bytes. (The
// JSON that checkpoint mode's Kafka and file sinks write is tested in
// package checkpoint.)
func TestDeadLetterReasons(t *testing.T) {
	rec := &batch.Record{Partition: 2, Offset: 7, Value: []byte("page-\xff")}
	long := strings.Repeat("é", 600) // 1,200 bytes
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"user error, not UTF-8", errors.New("rejected key page-\xff"), `rejected key page-\xff`},
		{"decode error", &event.DecodeError{Reason: "bad \xfe"}, `bad \xfe`},
		{"too long, cut between characters", errors.New("x" + long), "x" + strings.Repeat("é", 511)},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := DeadLetter("j", "in", rec, c.err)
			if d.Reason != c.want || string(d.Payload) != "page-\xff" {
				t.Errorf("deadLetter: reason %q, payload %q; want %q and the record's bytes", d.Reason, d.Payload, c.want)
			}
		})
	}
}
