package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// txnBenchSection is the benchmarks/README.md section whose table is the
// measured source of the docs' throughput figure for one `txn` process.
const txnBenchSection = "## `txn` against raw consume (issue #2)"

// TestThroughputMatchesBenchmarks: every throughput the README or a docs/
// page claims for `txn` ("about N–M events/s") is the range
// benchmarks/README.md measured (its `txn` against raw consume table,
// rounded to 50,000), so the docs can't drift from what was measured or
// give two different figures.
func TestThroughputMatchesBenchmarks(t *testing.T) {
	bench := readFile(t, "benchmarks/README.md")
	_, section, ok := strings.Cut(bench, "\n"+txnBenchSection+"\n")
	if !ok {
		t.Fatalf("benchmarks/README.md has no section %q", txnBenchSection)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rates []int64
	row := regexp.MustCompile("(?m)^\\| [A-Z] \\| [\\d,]+ ev/s \\| ([\\d,]+) ev/s \\|")
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		rates = append(rates, n)
	}
	if len(rates) == 0 {
		t.Fatalf("benchmarks/README.md %q: no result rows (| run | raw ev/s | txn ev/s | …)", txnBenchSection)
	}
	round := func(n int64) int64 { return (n + 25_000) / 50_000 * 50_000 }
	want := "about " + thousands(round(slices.Min(rates))) + "–" + thousands(round(slices.Max(rates))) + " events/s"

	claimRE := regexp.MustCompile(`about\s+[\d,]+(?:–[\d,]+)?\s+events/s`)
	claims := 0
	for _, page := range userDocs(t) {
		for _, c := range claimRE.FindAllString(readFile(t, page), -1) {
			claims++
			if c = strings.Join(strings.Fields(c), " "); c != want {
				t.Errorf("%s says %q; benchmarks/README.md measured %v events/s for txn (%q): want %q", page, c, rates, txnBenchSection, want)
			}
		}
	}
	if claims == 0 {
		t.Fatal("neither README.md nor docs/*.md claims a throughput (\"about N events/s\"): update this test")
	}
}

// userDocs lists the user's documentation, relative to the repository
// root: README.md and the pages in docs/.
func userDocs(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/ has no *.md page")
	}
	files := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
