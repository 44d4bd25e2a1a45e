package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The limits a reader can hold in mind. Tests may be longer than code (a
// scenario reads top to bottom), not unbounded.
const (
	maxFileLines     = 700
	maxTestFileLines = 800
	maxFuncLines     = 90
	// maxLooseComment is the longest comment allowed between the package
	// clause and the imports: a design text there is one go doc never
	// shows; it belongs in the package doc.
	maxLooseComment = 3
)

// funcLimited are the trees whose every function, tests included, is held
// to maxFuncLines: the engine a maintainer reasons about.
var funcLimited = []string{"batch", "offsets", "writers", "strategies"}

type goFile struct {
	rel  string // slash path from the module root
	file *ast.File
	fset *token.FileSet
}

func TestLayout(t *testing.T) {
	files := parseModule(t)
	if len(files) < 50 {
		t.Fatalf("found only %d Go files: not at the module root?", len(files))
	}
	pkgDoc := map[string]bool{}
	for _, f := range files {
		dir := filepath.ToSlash(filepath.Dir(f.rel))
		pkgDoc[dir] = pkgDoc[dir] || (f.file.Doc != nil && !strings.HasSuffix(f.rel, "_test.go"))
		checkFileLength(t, f)
		if !strings.HasSuffix(f.rel, "_test.go") {
			checkLooseComments(t, f)
		}
		if slices.ContainsFunc(funcLimited, func(d string) bool { return dir == d || strings.HasPrefix(dir, d+"/") }) {
			checkFuncLengths(t, f)
		}
	}
	for dir, ok := range pkgDoc {
		if !ok && hasNonTestGo(files, dir) {
			t.Errorf("%s: no package doc (its design text belongs in a doc.go, where go doc shows it)", dir)
		}
	}
}

func checkFileLength(t *testing.T, f goFile) {
	t.Helper()
	lines := f.fset.File(f.file.Pos()).LineCount()
	limit := maxFileLines
	if strings.HasSuffix(f.rel, "_test.go") {
		limit = maxTestFileLines
	}
	if lines > limit {
		t.Errorf("%s: %d lines, over %d: split it by concern", f.rel, lines, limit)
	}
}

func checkFuncLengths(t *testing.T, f goFile) {
	t.Helper()
	for _, d := range f.file.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := f.fset.Position(fn.Pos()).Line, f.fset.Position(fn.End()).Line
		if n := end - start + 1; n > maxFuncLines {
			t.Errorf("%s:%d: func %s is %d lines, over %d: split it into named steps", f.rel, start, fn.Name.Name, n, maxFuncLines)
		}
	}
}

// checkLooseComments finds comments between the package clause and the
// first import that no declaration owns.
func checkLooseComments(t *testing.T, f goFile) {
	t.Helper()
	if len(f.file.Imports) == 0 {
		return
	}
	firstImport := f.file.Imports[0].Pos()
	for _, c := range f.file.Comments {
		if c.Pos() < f.file.Name.End() || c.End() > firstImport {
			continue
		}
		start, end := f.fset.Position(c.Pos()).Line, f.fset.Position(c.End()).Line
		if n := end - start + 1; n > maxLooseComment {
			t.Errorf("%s:%d: %d-line comment between package and import, where go doc never shows it: make it the package doc", f.rel, start, n)
		}
	}
}

func hasNonTestGo(files []goFile, dir string) bool {
	return slices.ContainsFunc(files, func(f goFile) bool {
		return filepath.ToSlash(filepath.Dir(f.rel)) == dir && !strings.HasSuffix(f.rel, "_test.go")
	})
}

// parseModule parses every Go file of the module (comments kept), skipping
// testdata and hidden directories as the go command does.
func parseModule(t *testing.T) []goFile {
	t.Helper()
	root := moduleRoot(t)
	var out []goFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root && fileExists(filepath.Join(path, "go.mod")) {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, goFile{rel: filepath.ToSlash(rel), file: f, fset: fset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for !fileExists(filepath.Join(dir, "go.mod")) {
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	return dir
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
