package examples_test

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestExternalModule builds every example as a program of another module
// that requires this one (a replace directive to this checkout), as a
// user's would: the public API is enough for all of them.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build: skipped with -short")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/myimport\n\ngo 1.26\n\nrequire github.com/microbatch/microbatch v0.0.0\n\nreplace github.com/microbatch/microbatch => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	// Every example, each a main package of the outside module.
	files := map[string]string{filepath.Join(root, "go.sum"): "go.sum"}
	for _, e := range examples {
		files[filepath.Join(e, "main.go")] = filepath.Join(e, "main.go")
	}
	for src, dst := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "bin")+string(filepath.Separator), "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in a module outside: %v\n%s", err, out)
	}
}

// TestExamplesUsePublicAPI: examples are what users copy, and users can't
// import internal packages.
func TestExamplesUsePublicAPI(t *testing.T) {
	for _, e := range examples {
		files, err := filepath.Glob(filepath.Join(e, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", e, err)
		}
		for _, f := range files {
			pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range pf.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(e, "README.md")); err != nil {
			t.Errorf("%s has no README.md", e)
		}
	}
}
