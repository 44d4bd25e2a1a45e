package strategies

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/microbatch/microbatch/writers"
)

// SinkForm is one way to write a sink DSN (Config.Sink).
type SinkForm struct {
	Scheme string // "mysql", "redis", …; "" for a go-sql-driver DSN, which has none
	Form   string // how it is written
	Use    string // the strategies that take it
}

// SinkForms is every form of sink DSN: CheckSink refuses a DSN with a
// scheme that is not here, and the CLI's help lists them from it, so that
// the two can't disagree.
var SinkForms = []SinkForm{
	{"mysql", "mysql://user:pass@host:port/db[?params]", sqlUse},
	{"", "user:pass@tcp(host:port)/db[?params] (go-sql-driver)", sqlUse},
	{"postgres", "postgres://user:pass@host:port/db[?sslmode=…]", postgresUse},
	{"postgresql", "postgresql://… (as postgres://)", postgresUse},
	{"sqlite", "sqlite://path", "txn, single, at-least-once, at-most-once, checkpoint with --sink-mode wal"},
	{"redis", "redis://[[user]:password@]host[:port][/db]", string(StrategyIdempotent)},
	{"rediss", "rediss://… (redis:// over TLS)", string(StrategyIdempotent)},
	{"kafka", "kafka://host:port[,host:port]/topic", string(StrategyCheckpoint)},
	{"file", "file:///dir", string(StrategyCheckpoint)},
}

// postgresUse: checkpoint mode doesn't write to PostgreSQL yet
// (Config.Validate refuses it).
const postgresUse = "txn, single, at-least-once, at-most-once (the built-in job, SQL jobs, a Transform)"

const sqlUse = "txn, single, at-least-once, at-most-once, checkpoint (XA, or --sink-mode wal)"

// SinkFormsHelp lists SinkForms in one line, the forms of one use
// together: "form or form: use; …".
func SinkFormsHelp() string {
	var parts []string
	for i := 0; i < len(SinkForms); {
		j := i
		var forms []string
		for ; j < len(SinkForms) && SinkForms[j].Use == SinkForms[i].Use; j++ {
			forms = append(forms, SinkForms[j].Form)
		}
		parts = append(parts, strings.Join(forms, " or ")+": "+SinkForms[i].Use)
		i = j
	}
	return strings.Join(parts, "; ")
}

// dsnSchemeRE recognises a URL-shaped DSN, as sqlsink.ParseDSN does:
// anything else is a go-sql-driver DSN.
var dsnSchemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// checkScheme refuses a URL-shaped DSN whose scheme no SinkForm has. It
// names only the scheme: the rest may hold a password.
func checkScheme(dsn string) error {
	m := dsnSchemeRE.FindStringSubmatch(dsn)
	if m == nil {
		return nil
	}
	var schemes []string
	for _, f := range SinkForms {
		if f.Scheme == m[1] {
			return nil
		}
		if f.Scheme != "" {
			schemes = append(schemes, f.Scheme+"://")
		}
	}
	return fmt.Errorf("%w: unknown scheme %q (want %s, or a go-sql-driver DSN)", writers.ErrBadDSN, m[1], strings.Join(schemes, ", "))
}
