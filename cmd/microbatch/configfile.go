package main

// The config file given by --config: one YAML file serves every command.
// Its keys are the flag names of all the commands that take --config, read
// from the command tree: a command applies the keys it has a flag for and
// ignores the ones only other commands have (`offsets show` reads a file
// written for `run` and skips its interval), and a key no command knows is
// an error. A value must fit its flag: one scalar for a string, number,
// duration or boolean; a scalar or a list of scalars for a list setting
// (the slice flags, and the comma-separated string flags marked with
// markList, such as brokers). Nothing is dropped silently: viper would read
// a list or a map given for a string as "" and the command would go on with
// an empty value (for `run`, the embedded demo broker).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

const (
	// listAnnotation marks a string flag whose value is a comma-separated
	// list: in the config file it may also be a YAML list.
	listAnnotation = "microbatch/list"
	// commandLineOnlyAnnotation marks a flag read from the command line
	// alone, neither from MICROBATCH_* nor from the config file: one whose
	// name means something else to another command, so that a file or an
	// environment shared by all commands would change what it does.
	commandLineOnlyAnnotation = "microbatch/command-line-only"
)

// markList lets the string flag name be a YAML list in the config file.
func markList(fs *pflag.FlagSet, name string) {
	if err := fs.SetAnnotation(name, listAnnotation, []string{"true"}); err != nil {
		panic(err) // a flag name typo: a programming error
	}
}

// markCommandLineOnly makes flag name ignore the environment and the
// config file.
func markCommandLineOnly(fs *pflag.FlagSet, name string) {
	if err := fs.SetAnnotation(name, commandLineOnlyAnnotation, []string{"true"}); err != nil {
		panic(err)
	}
}

func isList(f *pflag.Flag) bool {
	if _, ok := f.Value.(pflag.SliceValue); ok {
		return true
	}
	_, ok := f.Annotations[listAnnotation]
	return ok
}

func isCommandLineOnly(f *pflag.Flag) bool {
	_, ok := f.Annotations[commandLineOnlyAnnotation]
	return ok
}

// fileKeys returns every key a config file may hold: the flags of the
// commands under root that take --config, except --config itself and the
// command-line-only flags.
func fileKeys(root *cobra.Command) map[string]bool {
	keys := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("config") != nil {
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Name != "config" && f.Name != "help" && !isCommandLineOnly(f) {
					keys[f.Name] = true
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return keys
}

// readConfigFile reads the YAML file and returns the values of cmd's keys
// in it, as viper is to see them: a scalar as its literal text (so that
// `job: 0123` stays "0123" and a 30-digit expect-amount keeps its digits),
// a list as a []string for a slice flag and joined with commas for a
// comma-separated string flag. Keys of other commands are left out.
func readConfigFile(cmd *cobra.Command, file string) (map[string]any, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, badConfig("reading config file %s: %v", file, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil // an empty file sets nothing
	} else if err != nil {
		return nil, badConfig("reading config file %s: %v", file, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return nil, badConfig("config file %s: holds more than one YAML document", file)
	} else if !errors.Is(err, io.EOF) {
		return nil, badConfig("reading config file %s: %v", file, err)
	}
	top := doc.Content[0]
	if top.Kind == yaml.AliasNode {
		top = top.Alias
	}
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil, nil // only comments
	}
	if top.Kind != yaml.MappingNode {
		return nil, badConfig("config file %s: want `key: value` lines, found %s", file, kindOf(top))
	}
	known := fileKeys(cmd.Root())
	out := map[string]any{}
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		// Keys are case-insensitive, as everywhere in viper.
		key := strings.ToLower(top.Content[i].Value)
		if seen[key] {
			return nil, badConfig("config file %s: key %q given twice", file, key)
		}
		seen[key] = true
		if !known[key] {
			return nil, badConfig("config file %s: unknown key %q%s", file, key, suggestKey(key, known))
		}
		f := cmd.Flags().Lookup(key)
		if f == nil || isCommandLineOnly(f) {
			continue // another command's setting
		}
		v, err := fileValue(f, top.Content[i+1])
		if err != nil {
			return nil, badConfig("config file %s: %s is %v", file, key, err)
		}
		out[key] = v
	}
	return out, nil
}

// fileValue checks that node fits flag f and returns what viper is to
// read for it.
func fileValue(f *pflag.Flag, node *yaml.Node) (any, error) {
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	want := wantOf(f)
	switch {
	case node.Kind == yaml.ScalarNode && node.Tag == "!!null":
		return nil, fmt.Errorf("empty, want %s (leave the key out for the default)", want)
	case node.Kind == yaml.ScalarNode:
		return node.Value, nil
	case node.Kind == yaml.SequenceNode && isList(f):
		items := make([]string, 0, len(node.Content))
		for _, item := range node.Content {
			if item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
				return nil, fmt.Errorf("a list holding %s, want %s", kindOf(item), want)
			}
			items = append(items, item.Value)
		}
		if _, ok := f.Value.(pflag.SliceValue); ok {
			return items, nil
		}
		return strings.Join(items, ","), nil
	default:
		return nil, fmt.Errorf("%s, want %s", kindOf(node), want)
	}
}

// wantOf says what a config-file value of flag f must be.
func wantOf(f *pflag.Flag) string {
	if isList(f) {
		return "one value or a list of values"
	}
	switch f.Value.Type() {
	case "bool":
		return "true or false"
	case "duration":
		return "one duration (e.g. 2s)"
	case "int", "int32", "int64", "uint", "uint64":
		return "one whole number"
	case "float64":
		return "one number"
	}
	return "one string"
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a map"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "an empty value"
		}
		return "a single value"
	}
	return "an unsupported YAML node"
}

// suggestKey names the known key closest to key, if one is close enough
// to be a misspelling (at most 2 edits, as cobra suggests commands).
func suggestKey(key string, known map[string]bool) string {
	best, bestDist := "", 3
	for _, k := range slices.Sorted(maps.Keys(known)) {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return " (no microbatch command has a flag of that name)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
