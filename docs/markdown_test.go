// Package docs_test checks the repository's Markdown as GitHub renders it:
// a CommonMark parser (goldmark, with GitHub's table extension) reads every
// *.md file, and a link that leads nowhere or a code fence that swallows
// the text after it is a test failure, not something a reader finds.
package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// repoRoot is the module root, seen from this package's directory.
const repoRoot = ".."

// markdownFiles lists every *.md file of the repository, relative to its
// root (testdata and hidden directories aside).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "README.md") {
		t.Fatalf("found no README.md under %s (found %v)", repoRoot, files)
	}
	return files
}

// doc is one parsed Markdown file.
type doc struct {
	path    string // relative to the repository root, with slashes
	src     []byte
	root    ast.Node
	anchors map[string]bool
}

var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

func parse(t *testing.T, path string) *doc {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	d := &doc{path: path, src: src, root: markdown.Parser().Parse(text.NewReader(src)), anchors: map[string]bool{}}
	// Rendering must work too: it is what a reader gets.
	var sink strings.Builder
	if err := markdown.Renderer().Render(&sink, src, d.root); err != nil {
		t.Fatalf("%s: rendering: %v", path, err)
	}
	seen := map[string]int{}
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if h, ok := n.(*ast.Heading); ok && entering {
			slug := githubSlug(plainText(h, src))
			// GitHub numbers repeated headings: x, x-1, x-2, …
			if k := seen[slug]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		}
		return ast.WalkContinue, nil
	})
	return d
}

// plainText is a node's text as a reader sees it: code spans without their
// backticks, links as their text, emphasis without its markers.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// githubSlug is the anchor GitHub gives a heading (github-slugger): lower
// case, spaces to hyphens, every character dropped that is not a letter,
// digit, mark, '_' or '-'.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGitHubSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"`microbatch run` settings":                           "microbatch-run-settings",
		"The guarantee matrix (`microbatch bench`, issue #5)": "the-guarantee-matrix-microbatch-bench-issue-5",
		"Fixing a job's position: `microbatch offsets`":       "fixing-a-jobs-position-microbatch-offsets",
		"Scale-out: 1, 2, 3 processes (issue 6)":              "scale-out-1-2-3-processes-issue-6",
		"`idempotent` on Redis: keys and guarantee":           "idempotent-on-redis-keys-and-guarantee",
		"Continuous mode: `--strategy checkpoint`":            "continuous-mode---strategy-checkpoint",
	} {
		// Through the parser, so that the heading text is what plainText
		// makes of it.
		src := []byte("## " + heading + "\n")
		h := markdown.Parser().Parse(text.NewReader(src)).FirstChild()
		if got := githubSlug(plainText(h, src)); got != want {
			t.Errorf("slug of %q = %q, want %q", heading, got, want)
		}
	}
}

// TestMarkdownLinks: every link inside a document (#anchor) names one of
// its headings' anchors, and every relative link names a file or
// directory of the repository (and, into another Markdown file, one of its
// anchors).
func TestMarkdownLinks(t *testing.T) {
	docs := map[string]*doc{}
	files := markdownFiles(t)
	for _, f := range files {
		docs[f] = parse(t, f)
	}
	links := 0
	for _, f := range files {
		d := docs[f]
		_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			if !entering {
				return ast.WalkContinue, nil
			}
			var dest string
			switch n := n.(type) {
			case *ast.Link:
				dest = string(n.Destination)
			case *ast.Image:
				dest = string(n.Destination)
			default:
				return ast.WalkContinue, nil
			}
			links++
			if err := checkLink(d, docs, dest); err != nil {
				t.Errorf("%s: link %q (%q): %v", f, dest, plainText(n, d.src), err)
			}
			return ast.WalkContinue, nil
		})
	}
	if links == 0 {
		t.Fatalf("found no link in %v: the parse went wrong", files)
	}
}

// TestDocsLinkedFromReadme: the README is the front door, so every page
// in docs/ is linked from it; a page nobody links to is a page nobody
// finds. (TestMarkdownLinks checks that the links lead somewhere.)
func TestDocsLinkedFromReadme(t *testing.T) {
	readme := parse(t, "README.md")
	linked := map[string]bool{}
	_ = ast.Walk(readme.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if l, ok := n.(*ast.Link); ok && entering {
			file, _, _ := strings.Cut(string(l.Destination), "#")
			linked[filepath.ToSlash(filepath.Clean(file))] = true
		}
		return ast.WalkContinue, nil
	})
	pages := 0
	for _, f := range markdownFiles(t) {
		if path.Dir(f) != "docs" {
			continue
		}
		pages++
		if !linked[f] {
			t.Errorf("README.md does not link to %s: add it to the README's list of pages", f)
		}
	}
	if pages == 0 {
		t.Fatal("found no page in docs/: the walk went wrong")
	}
}

var absoluteURL = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

func checkLink(from *doc, docs map[string]*doc, dest string) error {
	if dest == "" {
		return fmt.Errorf("empty link")
	}
	if absoluteURL.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return nil // another site: not checked here
	}
	file, anchor, _ := strings.Cut(dest, "#")
	target := from
	if file != "" {
		if strings.HasPrefix(file, "/") {
			return fmt.Errorf("absolute path: GitHub resolves it against the site, not the repository; use a relative one")
		}
		rel := filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from.path), file)))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("leaves the repository")
		}
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel))); err != nil {
			return fmt.Errorf("no such file in the repository: %s", rel)
		}
		if target = docs[rel]; target == nil {
			return nil // not Markdown: an anchor there is not a heading
		}
	}
	if anchor != "" && !target.anchors[anchor] {
		return fmt.Errorf("%s has no heading with anchor #%s", target.path, anchor)
	}
	return nil
}

// TestMarkdownCodeFences: a code fence that does not close where the
// writer meant it to turns the rest of the document into code — headings,
// tables and links included. A fenced block must end with its own closing
// fence (not at the end of the document), and none of its lines may start
// with its fence: such a line was meant to close it, or to open the next
// block, and isn't a fence to a CommonMark parser (a closing fence takes
// nothing after it but spaces).
func TestMarkdownCodeFences(t *testing.T) {
	for _, f := range markdownFiles(t) {
		d := parse(t, f)
		_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			cb, ok := n.(*ast.FencedCodeBlock)
			if !entering || !ok {
				return ast.WalkContinue, nil
			}
			for _, msg := range fenceProblems(d.src, cb) {
				t.Errorf("%s: %s", f, msg)
			}
			return ast.WalkSkipChildren, nil
		})
	}
}

// fenceProblems says what is wrong with a fenced code block.
func fenceProblems(src []byte, cb *ast.FencedCodeBlock) []string {
	open := cb.Pos() // the opening fence's first character
	fence := fenceRun(firstLine(src[open:]))
	openLine := lineNumber(src, open)
	var problems []string
	lines := cb.Lines()
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		line := string(seg.Value(src))
		if strings.HasPrefix(strings.TrimLeft(line, " "), fence) {
			problems = append(problems, fmt.Sprintf("line %d: %q inside the code block opened on line %d: a fence glued to text, or a block not closed before it (everything up to the next bare %s renders as code)",
				lineNumber(src, seg.Start), strings.TrimSpace(line), openLine, fence))
		}
		if swallowedHeading.MatchString(line) {
			problems = append(problems, fmt.Sprintf("line %d: heading %q inside the code block opened on line %d",
				lineNumber(src, seg.Start), strings.TrimSpace(line), openLine))
		}
	}
	// The line after the last content line (after the opening fence, for
	// an empty block) must be the closing fence; without one the block
	// runs to the end of the file.
	next := open
	if lines.Len() > 0 {
		next = lines.At(lines.Len() - 1).Start
	}
	close := ""
	if i := strings.IndexByte(string(src[next:]), '\n'); i >= 0 {
		close = strings.TrimLeft(firstLine(src[next+i+1:]), " ")
	}
	if run := fenceRun(close); run == "" || run[0] != fence[0] || len(run) < len(fence) || strings.TrimSpace(close[len(run):]) != "" {
		problems = append(problems, fmt.Sprintf("the code block opened on line %d is never closed: it runs to the end of the file", openLine))
	}
	return problems
}

// swallowedHeading is a second-level or deeper ATX heading: a shell or
// YAML comment in a code block starts with one '#', a Markdown section
// with two or more.
var swallowedHeading = regexp.MustCompile(`^ {0,3}#{2,6} \S`)

// fenceRun is the run of backticks or tildes a line starts with ("" for
// none).
func fenceRun(line string) string {
	if line == "" || (line[0] != '`' && line[0] != '~') {
		return ""
	}
	n := 0
	for n < len(line) && line[n] == line[0] {
		n++
	}
	return line[:n]
}

func firstLine(b []byte) string {
	s := string(b)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, "\r")
}

func lineNumber(src []byte, offset int) int {
	return strings.Count(string(src[:min(offset, len(src))]), "\n") + 1
}

// TestFenceProblems: the fence check itself, on small documents.
func TestFenceProblems(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string // a substring of each problem, in order
	}{
		{"closed", "```sh\nls\n```\n\n## Next\n", nil},
		{"closed at the end without a newline", "```\nls\n```", nil},
		{"empty block", "```\n```\ntext\n", nil},
		{"longer closing fence", "```\nls\n`````\n", nil},
		{"in a list item", "- step:\n\n  ```sh\n  ls\n  ```\n", nil},
		{"tildes around backticks", "~~~md\n```\nnested\n```\n~~~\n", nil},
		{"a shell comment", "```sh\n# build it\nmake\n```\n", nil},
		{"closing fence glued to text", "```\nout\n``` `produce` takes flags.\n\n## Next\n\ntext\n```sh\nls\n```\n",
			[]string{"glued", "heading \"## Next\"", "\"```sh\" inside"}},
		{"never closed", "text\n\n```sh\nls\n\n## Next\n", []string{"heading", "never closed"}},
		{"never closed, empty", "```\n", []string{"never closed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := []byte(c.src)
			var got []string
			_ = ast.Walk(markdown.Parser().Parse(text.NewReader(src)), func(n ast.Node, entering bool) (ast.WalkStatus, error) {
				if cb, ok := n.(*ast.FencedCodeBlock); ok && entering {
					got = append(got, fenceProblems(src, cb)...)
				}
				return ast.WalkContinue, nil
			})
			if len(got) != len(c.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}

// TestCheckLink: the link check itself, on small documents.
func TestCheckLink(t *testing.T) {
	readme := &doc{path: "README.md", anchors: map[string]bool{"tables": true}}
	bench := &doc{path: "benchmarks/README.md", anchors: map[string]bool{"scale-out": true}}
	docs := map[string]*doc{readme.path: readme, bench.path: bench}
	for _, c := range []struct {
		from *doc
		dest string
		ok   bool
	}{
		{readme, "#tables", true},
		{readme, "#secure-connections", false},
		{readme, "benchmarks/README.md#scale-out", true},
		{readme, "benchmarks/README.md#scale-up", false},
		{readme, "benchmarks/README.md", true},
		{readme, "docs/status-page.png", true},
		{readme, "docs/missing.png", false},
		{readme, "examples/quickstart", true},
		{readme, "/README.md", false},
		{readme, "https://example.com/#anything", true},
		{bench, "../README.md#tables", true},
		{bench, "../README.md#nothing", false},
		{bench, "../../outside.md", false},
		{bench, "#scale-out", true},
	} {
		err := checkLink(c.from, docs, c.dest)
		if (err == nil) != c.ok {
			t.Errorf("%s: link %q: error %v, want ok=%v", c.from.path, c.dest, err, c.ok)
		}
	}
}
