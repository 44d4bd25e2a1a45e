package sqljob

import (
	"errors"
	"fmt"
	"strings"
)

// ErrTableOwned marks a run refused because its table belongs to another
// job or holds another query's results (see Query.Claim). It is a
// configuration error, not retryable: running would add the same records
// to the table twice, or merge two queries' rows. Run the owner, write
// another table with a new job, or empty the table together with the
// owner's positions and its owner record (DisownTable) first.
var ErrTableOwned = errors.New("sql: table owned")

// OwnerError says who owns what a run asked for. Its message is one line.
type OwnerError struct {
	Table string // the table this run's query writes
	Job   string // the job asking
	Query string // this run's query, as given
	// Owner is the record that refuses: Table's, or (when Owner.Table is
	// another table) the one of the table Job already writes.
	Owner Owner
	// Differs is what changed in the query when the owner is this job and
	// its query changed: "was …; now …" (empty when it can't be told).
	Differs string
}

func (e *OwnerError) Error() string {
	switch {
	case e.Owner.Table != e.Table:
		return fmt.Sprintf("sql: job %q writes table %s, not %s: a job's positions are its table's, and a new table would miss the records the job already read", e.Job, e.Owner.Table, e.Table)
	case e.Owner.Job != e.Job:
		return fmt.Sprintf("sql: table %s belongs to job %q, not to job %q: two jobs writing one table count every record twice", e.Table, e.Owner.Job, e.Job)
	}
	what := e.Differs
	if what == "" {
		what = fmt.Sprintf("was %q; now %q", oneLine(e.Owner.Query), oneLine(e.Query))
	}
	return fmt.Sprintf("sql: table %s of job %q holds the results of another query (%s): two queries' rows in one table are neither's", e.Table, e.Job, what)
}

func (e *OwnerError) Unwrap() error { return ErrTableOwned }

// oneLine collapses a statement's whitespace, for a one-line message.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
