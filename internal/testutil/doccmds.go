package testutil

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// DocCommand is one command of a Markdown ```sh block, as a reader would
// type it: the tests run the commands the docs show, so that the docs
// can't drift from what the commands do.
type DocCommand struct {
	Line   int      // where it starts in the document
	Env    []string // leading NAME=value words
	Args   []string // the program and its arguments
	Output []string // the "# -> …" lines right after it: what it prints
}

func (c DocCommand) String() string {
	return strings.Join(append(append([]string{}, c.Env...), c.Args...), " ")
}

var (
	docHeadingRE = regexp.MustCompile(`^(#{1,6}) +(.*?) *#* *$`)
	docEnvRE     = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
)

// DocCommands reads the commands of the ```sh blocks in the section of a
// Markdown file (relative to the test's package) whose heading is
// heading, up to the next heading of its level or above ("" for the whole
// file). Lines ending in "\" continue on the next; comments are skipped
// but for "# -> …" lines, which are the output of the command above.
// Words may be 'single-quoted'; any other shell syntax ($, ", `, |, ;, &,
// <, >, *) fails the test, which runs a command without a shell.
func DocCommands(t testing.TB, file, heading string) []DocCommand {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var (
		cmds     []DocCommand
		inBlock  bool // inside a fence
		shBlock  bool // inside a ```sh fence
		inside   = heading == ""
		level    int // the section heading's
		found    = inside
		pending  string
		startsAt int
	)
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			shBlock = inBlock && strings.TrimSpace(line) == "```sh"
			continue
		}
		if !inBlock {
			if m := docHeadingRE.FindStringSubmatch(line); m != nil {
				switch {
				case heading != "" && m[2] == heading:
					inside, found, level = true, true, len(m[1])
				case inside && heading != "" && len(m[1]) <= level:
					inside = false
				}
			}
			continue
		}
		if !inside || !shBlock {
			continue
		}
		text := strings.TrimSpace(line)
		if pending == "" {
			if out, ok := strings.CutPrefix(text, "# -> "); ok && len(cmds) > 0 {
				cmds[len(cmds)-1].Output = append(cmds[len(cmds)-1].Output, out)
				continue
			}
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			startsAt = i + 1
		}
		if cont, ok := strings.CutSuffix(text, "\\"); ok {
			pending += cont + " "
			continue
		}
		cmds = append(cmds, parseDocCommand(t, file, startsAt, pending+text))
		pending = ""
	}
	if !found {
		t.Fatalf("%s has no section %q", file, heading)
	}
	if len(cmds) == 0 {
		t.Fatalf("%s, section %q: no command in a ```sh block", file, heading)
	}
	return cmds
}

func parseDocCommand(t testing.TB, file string, line int, text string) DocCommand {
	t.Helper()
	c := DocCommand{Line: line}
	if i := strings.Index(text, " #"); i >= 0 {
		text = text[:i] // a comment after the command
	}
	var words []string
	for rest := strings.TrimSpace(text); rest != ""; rest = strings.TrimLeft(rest, " ") {
		if q, ok := strings.CutPrefix(rest, "'"); ok {
			end := strings.IndexByte(q, '\'')
			if end < 0 {
				t.Fatalf("%s:%d: unclosed quote in %q", file, line, text)
			}
			words, rest = append(words, q[:end]), q[end+1:]
			continue
		}
		end := strings.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		w := rest[:end]
		if strings.ContainsAny(w, "$\"`|;&<>*'") {
			t.Fatalf("%s:%d: %q needs a shell; the test runs commands without one", file, line, w)
		}
		words, rest = append(words, w), rest[end:]
	}
	for len(words) > 0 && docEnvRE.MatchString(words[0]) {
		c.Env, words = append(c.Env, words[0]), words[1:]
	}
	c.Args = words
	return c
}
