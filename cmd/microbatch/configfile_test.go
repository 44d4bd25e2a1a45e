package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// kindOfFlag groups flag types by what their values mean: a list of names
// and one name are both text.
func kindOfFlag(f *pflag.Flag) string {
	switch t := f.Value.Type(); {
	case t == "bool" || t == "duration":
		return t
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || strings.HasPrefix(t, "float"):
		return "number"
	default:
		return "text"
	}
}

// TestConfigKeysMeanOneThing: one config file (and one environment) serves
// every command, so a key two commands read must mean the same to both —
// or the flag must be command-line only in all commands but one. A flag
// added with a name another command uses for something else fails here.
func TestConfigKeysMeanOneThing(t *testing.T) {
	type use struct{ cmd, kind string }
	uses := map[string][]use{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("config") != nil {
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Name != "config" && !isCommandLineOnly(f) {
					uses[f.Name] = append(uses[f.Name], use{c.CommandPath(), kindOfFlag(f)})
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd())
	shared := 0
	for name, us := range uses {
		if len(us) > 1 {
			shared++
		}
		for _, u := range us[1:] {
			if u.kind != us[0].kind {
				t.Errorf("key %q is %s to %s but %s to %s: one config file can't serve both (make one command-line only: markCommandLineOnly)",
					name, us[0].kind, us[0].cmd, u.kind, u.cmd)
			}
		}
	}
	if shared == 0 {
		t.Fatal("no key is shared by two commands: the walk found no commands?")
	}
}

// TestReadConfigFile: what each YAML shape becomes for a command, and the
// shapes refused.
func TestReadConfigFile(t *testing.T) {
	root := rootCmd()
	find := func(path ...string) *cobra.Command {
		c, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		name string
		cmd  []string
		yaml string
		want map[string]any
		err  []string // the error must contain each
	}{
		{name: "scalars keep their literal text", cmd: []string{"run"},
			yaml: "job: 0123\ninstance-id: 1.10\ninterval: 2s\nparallelism: 0x10\n",
			want: map[string]any{"job": "0123", "instance-id": "1.10", "interval": "2s", "parallelism": "0x10"}},
		{name: "a long number keeps its digits", cmd: []string{"verify"},
			yaml: "expect-amount: 123456789012345678901234567890\n",
			want: map[string]any{"expect-amount": "123456789012345678901234567890"}},
		{name: "brokers as a flow list", cmd: []string{"run"}, yaml: "brokers: [a:1, b:2]\n", want: map[string]any{"brokers": "a:1,b:2"}},
		{name: "brokers as a block list", cmd: []string{"produce"}, yaml: "brokers:\n  - a:1\n  - b:2,c:3\n", want: map[string]any{"brokers": "a:1,b:2,c:3"}},
		{name: "a slice flag as a list", cmd: []string{"broker"}, yaml: "topic: [a, b]\n", want: map[string]any{"topic": []string{"a", "b"}}},
		{name: "anchors and aliases", cmd: []string{"run"}, yaml: "topic: &t events\njob: *t\n", want: map[string]any{"topic": "events", "job": "events"}},
		{name: "other commands' keys are left out", cmd: []string{"offsets", "show"},
			yaml: "interval: 1s\ncount: 5\ntopic: t\nlisten: x\nstrategies: [txn]\n", want: map[string]any{"topic": "t"}},
		{name: "keys are case-insensitive", cmd: []string{"run"}, yaml: "Topic: t\n", want: map[string]any{"topic": "t"}},
		{name: "empty file", cmd: []string{"run"}, yaml: "", want: map[string]any{}},
		{name: "only comments", cmd: []string{"run"}, yaml: "# nothing\n", want: map[string]any{}},
		{name: "reset takes partitions from the command line only", cmd: []string{"offsets", "reset"},
			yaml: "partitions: 4\nto: earliest\n", want: map[string]any{"to": "earliest"}},

		{name: "list for a string", cmd: []string{"run"}, yaml: "topic: [a, b]\n", err: []string{"topic is a list, want one string"}},
		{name: "map for a string", cmd: []string{"run"}, yaml: "topic: {a: b}\n", err: []string{"topic is a map, want one string"}},
		{name: "map for a duration", cmd: []string{"run"}, yaml: "interval:\n  a: 1\n", err: []string{"interval is a map, want one duration"}},
		{name: "list for a number", cmd: []string{"run"}, yaml: "max-batch-records: [1]\n", err: []string{"max-batch-records is a list, want one whole number"}},
		{name: "list for a float", cmd: []string{"run"}, yaml: "demo-rate: [1]\n", err: []string{"demo-rate is a list, want one number"}},
		{name: "map for a bool", cmd: []string{"run"}, yaml: "dry-run: {a: 1}\n", err: []string{"dry-run is a map, want true or false"}},
		{name: "map for a list", cmd: []string{"run"}, yaml: "brokers: {a: b}\n", err: []string{"brokers is a map"}},
		{name: "nested list", cmd: []string{"run"}, yaml: "brokers: [a, [b]]\n", err: []string{"brokers is a list holding a list"}},
		{name: "map in a slice flag's list", cmd: []string{"broker"}, yaml: "topic: [a, {b: c}]\n", err: []string{"topic is a list holding a map"}},
		{name: "null in a list", cmd: []string{"bench"}, yaml: "strategies: [txn, ~]\n", err: []string{"strategies is a list holding an empty value"}},
		{name: "no value", cmd: []string{"run"}, yaml: "sink:\n", err: []string{"sink is empty"}},
		{name: "unknown key", cmd: []string{"run"}, yaml: "topik: x\n", err: []string{`unknown key "topik"`, `did you mean "topic"`}},
		{name: "unknown key far from all", cmd: []string{"run"}, yaml: "frobnicate: x\n", err: []string{`unknown key "frobnicate"`, "no microbatch command"}},
		{name: "config names no other file", cmd: []string{"run"}, yaml: "config: other.yaml\n", err: []string{`unknown key "config"`}},
		{name: "duplicate key", cmd: []string{"run"}, yaml: "topic: a\nTOPIC: b\n", err: []string{`"topic" given twice`}},
		{name: "not a map", cmd: []string{"run"}, yaml: "- a\n- b\n", err: []string{"want `key: value` lines"}},
		{name: "two documents", cmd: []string{"run"}, yaml: "topic: a\n---\ntopic: b\n", err: []string{"more than one YAML document"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "mb.yaml")
			if err := os.WriteFile(file, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readConfigFile(find(c.cmd...), file)
			if c.err != nil {
				if err == nil || !isConfigError(err) {
					t.Fatalf("got %v, err %v; want a config error", got, err)
				}
				for _, w := range append(c.err, file) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got == nil {
				got = map[string]any{}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %#v, want %#v", got, c.want)
			}
		})
	}
}
