package checkpoint

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/strategies/internal/shared"
	"github.com/microbatch/microbatch/writers"
)

// TestDeadLetterJSON: a source's dead letter has a reason (a Transform's
// error text or a decoder's) within writers.MaxReasonBytes, the bytes that
// are not UTF-8 escaped and cut at a character boundary, as the
// micro-batch strategies make it; the JSON the Kafka and file sinks write,
// from any reason, is valid UTF-8 (encoding/json would write U+FFFD for
// such bytes); the payload stays the record's bytes.
func TestDeadLetterJSON(t *testing.T) {
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
			d := shared.DeadLetter("j", "in", rec, c.err)
			if d.Reason != c.want || string(d.Payload) != "page-\xff" || d.Partition != 2 || d.Offset != 7 {
				t.Errorf("deadLetter: %+v; want reason %q and the record's bytes and place", d, c.want)
			}
			raw := d
			raw.Reason = c.err.Error()
			var got deadLetterJSON
			if err := json.Unmarshal(encodeDeadLetter(&raw), &got); err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(got.Reason) || len(got.Reason) > writers.MaxReasonBytes || strings.ContainsRune(got.Reason, utf8.RuneError) ||
				string(got.Payload) != "page-\xff" {
				t.Errorf("encodeDeadLetter: reason %q, payload %q", got.Reason, got.Payload)
			}
		})
	}
}
