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
// measured source of the README's throughput figure for one `txn` process.
const txnBenchSection = "## `txn` against raw consume (issue #2)"

// TestThroughputMatchesBenchmarks: every throughput the README claims for
// `txn` ("about N–M events/s") is the range benchmarks/README.md measured
// (its `txn` against raw consume table, rounded to 50,000), so the README
// can't drift from what was measured or give two different figures.
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

	readme := readFile(t, "README.md")
	claims := regexp.MustCompile(`about\s+[\d,]+(?:–[\d,]+)?\s+events/s`).FindAllString(readme, -1)
	if len(claims) == 0 {
		t.Fatal("README.md claims no throughput (\"about N events/s\"): update this test")
	}
	for _, c := range claims {
		if c = strings.Join(strings.Fields(c), " "); c != want {
			t.Errorf("README.md says %q; benchmarks/README.md measured %v events/s for txn (%q): want %q", c, rates, txnBenchSection, want)
		}
	}
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
