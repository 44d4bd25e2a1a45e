package docs_test

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	mdast "github.com/yuin/goldmark/ast"
)

// snippetStubs is the code a snippet leaves to its reader ("your reader",
// your decoder, your aggregation), with the types the snippets use it
// with.
const snippetStubs = `package main

import (
	"iter"

	"github.com/microbatch/microbatch/record"
)

type chunk struct {
	End  string
	Rows [][]any
	Bad  []record.DeadLetter
}

func chunksFrom(from string) iter.Seq[chunk] { return func(func(chunk) bool) {} }

type Click struct{}

func parseClick(value []byte) (Click, error) { return Click{}, nil }

func countPerMinute(cs []Click) [][]any { return nil }

func main() {}
`

// TestLibrarySnippetsCompile: the Go snippets of the README and docs/
// (today those of library.md) are what users copy, so a rename that forgets them must fail here, not in a user's
// build. Each ```go block becomes the body of a function (with ctx in
// scope, returning an error) in a program of a separate module that
// requires this one, as examples' TestExternalModule builds the examples;
// it imports the module's packages the snippets name, and marks the
// variables a snippet declares as used (a snippet shows a call, not what
// is done with its result).
func TestLibrarySnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build: skipped with -short")
	}
	pages := userDocs(t)
	var bodies []string
	for _, page := range pages {
		bodies = append(bodies, goBlocks(t, page)...)
	}
	if len(bodies) == 0 {
		t.Fatalf("no ```go block in %v: the parse went wrong", pages)
	}
	src := snippetProgram(t, bodies, modulePackages(t))

	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goMod := "module example.com/snippets\n\ngo 1.26\n\nrequire github.com/microbatch/microbatch v0.0.0\n\nreplace github.com/microbatch/microbatch => " + root + "\n"
	for name, content := range map[string]string{
		"go.mod": goMod, "go.sum": string(sum), "snippets.go": src, "stubs.go": snippetStubs,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "snippets"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the ```go snippets of the docs do not compile: %v\n%s\nthe program:\n%s", err, out, numbered(src))
	}
}

// goBlocks returns the ```go blocks of a Markdown page.
func goBlocks(t *testing.T, page string) []string {
	t.Helper()
	d := parse(t, page)
	var blocks []string
	_ = mdast.Walk(d.root, func(n mdast.Node, entering bool) (mdast.WalkStatus, error) {
		cb, ok := n.(*mdast.FencedCodeBlock)
		if !entering || !ok || string(cb.Language(d.src)) != "go" {
			return mdast.WalkContinue, nil
		}
		var b strings.Builder
		for i := 0; i < cb.Lines().Len(); i++ {
			seg := cb.Lines().At(i)
			b.Write(seg.Value(d.src))
		}
		blocks = append(blocks, b.String())
		return mdast.WalkSkipChildren, nil
	})
	return blocks
}

// modulePackages maps the name of each of the module's importable
// packages (not internal, not commands) to its import path.
func modulePackages(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.Name}} {{.ImportPath}}", "./...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]string{}
	for line := range strings.Lines(string(out)) {
		name, path, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name == "main" || strings.Contains(path, "/internal/") {
			continue
		}
		pkgs[name] = path
	}
	return pkgs
}

var qualifiedRE = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Z]`)

// snippetProgram wraps each body in a function and imports what the
// bodies name.
func snippetProgram(t *testing.T, bodies []string, pkgs map[string]string) string {
	t.Helper()
	imports := []string{`"context"`}
	for _, m := range qualifiedRE.FindAllStringSubmatch(strings.Join(bodies, "\n"), -1) {
		if path, ok := pkgs[m[1]]; ok && !slices.Contains(imports, `"`+path+`"`) {
			imports = append(imports, `"`+path+`"`)
		}
	}
	var src strings.Builder
	fmt.Fprintf(&src, "package main\n\nimport (\n\t%s\n)\n", strings.Join(imports, "\n\t"))
	for i, body := range bodies {
		fmt.Fprintf(&src, "\nfunc snippet%d(ctx context.Context) error {\n%s\nreturn nil\n}\n", i+1, body)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippets.go", src.String(), parser.ParseComments)
	if err != nil {
		t.Fatalf("a snippet is not Go: %v\n%s", err, numbered(src.String()))
	}
	for _, decl := range f.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok {
			markUsed(fn.Body)
		}
	}
	var out bytes.Buffer
	if err := format.Node(&out, fset, f); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// markUsed adds `_ = v` before the final return for every variable the
// body declares at its top level.
func markUsed(body *ast.BlockStmt) {
	var uses []ast.Stmt
	for _, st := range body.List {
		as, ok := st.(*ast.AssignStmt)
		if !ok || as.Tok != token.DEFINE {
			continue
		}
		for _, lhs := range as.Lhs {
			if id, ok := lhs.(*ast.Ident); ok && id.Name != "_" {
				uses = append(uses, &ast.AssignStmt{Lhs: []ast.Expr{ast.NewIdent("_")}, Tok: token.ASSIGN, Rhs: []ast.Expr{ast.NewIdent(id.Name)}})
			}
		}
	}
	last := len(body.List) - 1
	body.List = append(body.List[:last:last], append(uses, body.List[last])...)
}

// numbered prefixes each line of src with its number.
func numbered(src string) string {
	var b strings.Builder
	for i, line := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, line)
	}
	return b.String()
}
