package strategies

import (
	"errors"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/writers"
)

// TestSinkFormsAreWhatCheckSinkTakes: every SinkForm is accepted, and a
// scheme that is not one is refused with the list of those that are — the
// list the CLI's help shows.
func TestSinkFormsAreWhatCheckSinkTakes(t *testing.T) {
	examples := map[string]string{ // scheme → a DSN of that form
		"mysql":  "mysql://u:pw@db:3306/app?tls=true",
		"":       "u:pw@tcp(db:3306)/app",
		"sqlite": "sqlite://sink.db",
		"redis":  "redis://:pw@cache:6379/0",
		"rediss": "rediss://u:pw@cache:6380/1",
		"kafka":  "kafka://k1:9092,k2:9092/out",
		"file":   "file:///var/lib/out",

		"postgres":   "postgres://u:pw@db:5432/app?sslmode=verify-full",
		"postgresql": "postgresql://u:pw@db/app",
	}
	forms := map[string]bool{}
	for _, f := range SinkForms {
		forms[f.Scheme] = true
		dsn, ok := examples[f.Scheme]
		if !ok {
			t.Errorf("SinkForm %q: add an example DSN to this test", f.Form)
			continue
		}
		if err := CheckSink(dsn); err != nil {
			t.Errorf("CheckSink(%q), a %s: %v", dsn, f.Form, err)
		}
		if !strings.HasPrefix(f.Form, strings.TrimPrefix(f.Scheme+"://", "://")) {
			t.Errorf("SinkForm %q does not start with its scheme %q", f.Form, f.Scheme)
		}
		if !strings.Contains(SinkFormsHelp(), f.Form) || !strings.Contains(SinkFormsHelp(), f.Use) {
			t.Errorf("SinkFormsHelp() lacks %q (%s):\n%s", f.Form, f.Use, SinkFormsHelp())
		}
	}
	for scheme := range examples {
		if !forms[scheme] {
			t.Errorf("scheme %q is accepted but not in SinkForms", scheme)
		}
	}
	for _, dsn := range []string{"oracle://u:SECRETPW@db/app", "http://host/x", "redis+sentinel://u:SECRETPW@h", "kafkas://k:9093/t", "files:///x"} {
		err := CheckSink(dsn)
		if !errors.Is(err, writers.ErrBadDSN) {
			t.Errorf("CheckSink(%q) = %v, want ErrBadDSN", dsn, err)
			continue
		}
		for _, f := range SinkForms {
			if f.Scheme != "" && !strings.Contains(err.Error(), f.Scheme+"://") {
				t.Errorf("CheckSink(%q): %q does not name %s://", dsn, err, f.Scheme)
			}
		}
		if strings.Contains(err.Error(), "SECRETPW") {
			t.Errorf("CheckSink(%q): the error shows the password: %v", dsn, err)
		}
	}
}
