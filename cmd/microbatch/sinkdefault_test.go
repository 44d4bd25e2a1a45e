package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/strategies"
)

// TestSinkHelp: run's and verify's --sink help lists every form of sink
// DSN the parser takes (strategies.SinkForms), and so does the `sink`
// setting in docs/configuration.md.
func TestSinkHelp(t *testing.T) {
	for name, cmd := range map[string]func() string{
		"run":    func() string { return runCmd().Flags().Lookup("sink").Usage },
		"verify": func() string { return verifyCmd().Flags().Lookup("sink").Usage },
	} {
		usage := cmd()
		for _, f := range strategies.SinkForms {
			if !strings.Contains(usage, f.Form) {
				t.Errorf("%s --help: --sink does not list %s (%s):\n%s", name, f.Form, f.Use, usage)
			}
		}
	}
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `sink` \\|.*$").FindString(string(readme))
	if row == "" {
		t.Fatal("docs/configuration.md has no `sink` row in its run settings")
	}
	for _, f := range strategies.SinkForms {
		want := f.Scheme + "://"
		if f.Scheme == "" {
			want = "go-sql-driver"
		}
		if !strings.Contains(row, want) {
			t.Errorf("docs/configuration.md's `sink` setting does not name %s (%s):\n%s", want, f.Form, row)
		}
	}
}

// TestDefaultSinkFor: without --sink, a job writes to one place per
// strategy, and verify reads there.
func TestDefaultSinkFor(t *testing.T) {
	for _, s := range strategies.Strategies {
		want := defaultSink
		if s == strategies.StrategyCheckpoint {
			want = defaultCheckpointSink
		}
		if got := defaultSinkFor(s); got != want {
			t.Errorf("defaultSinkFor(%s) = %s, want %s", s, got, want)
		}
	}
	if f := verifyCmd().Flags().Lookup("sink"); f.DefValue != "" {
		t.Errorf("verify --sink defaults to %q: it must follow --strategy (empty, then defaultSinkFor)", f.DefValue)
	}
}
