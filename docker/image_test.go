package docker_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// ---- Dockerfile ----

type stage struct {
	from, name string
	lines      []string // instructions after FROM, continuation lines joined
}

func loadDockerfile(t *testing.T) []stage {
	t.Helper()
	raw, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		f := strings.Fields(line)
		if strings.EqualFold(f[0], "FROM") {
			st := stage{from: f[1]}
			if len(f) >= 4 && strings.EqualFold(f[2], "AS") {
				st.name = f[3]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %q before the first FROM", dockerfilePath, line)
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	if len(stages) < 2 {
		t.Fatalf("%s: want a build stage and a final stage, found %d stages", dockerfilePath, len(stages))
	}
	return stages
}

// instr returns the arguments of the stage's instructions named name.
func (s stage) instr(name string) []string {
	var out []string
	for _, l := range s.lines {
		if f := strings.Fields(l); strings.EqualFold(f[0], name) {
			out = append(out, strings.TrimSpace(l[len(f[0]):]))
		}
	}
	return out
}

// goBuild is the Dockerfile's `go build` command: the build stage's ENV and
// the arguments after "go build".
type goBuild struct {
	env      []string
	args     []string
	out, pkg string
}

// splitWords splits a shell command on blanks, honouring '…' and "…".
func splitWords(s string) []string {
	var words []string
	var w strings.Builder
	var quote rune
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

func dockerfileBuild(t *testing.T, stages []stage) (stage, goBuild) {
	t.Helper()
	for _, st := range stages[:len(stages)-1] {
		for _, run := range st.instr("RUN") {
			words := splitWords(run)
			i := slices.Index(words, "go")
			if i < 0 || i+1 == len(words) || words[i+1] != "build" {
				continue
			}
			var b goBuild
			for _, e := range st.instr("ENV") {
				b.env = append(b.env, splitWords(e)...)
			}
			// Inline NAME=value words before "go", after RUN's --mount flags.
			for _, w := range words[:i] {
				if !strings.HasPrefix(w, "--") && strings.Contains(w, "=") {
					b.env = append(b.env, w)
				}
			}
			args := words[i+2:]
			for j := 0; j < len(args); j++ {
				switch {
				case args[j] == "-o" && j+1 < len(args):
					b.out = args[j+1]
					j++
				case !strings.HasPrefix(args[j], "-"):
					b.pkg = args[j]
				default:
					b.args = append(b.args, args[j])
				}
			}
			return st, b
		}
	}
	t.Fatalf("%s: no RUN … go build in a build stage", dockerfilePath)
	return stage{}, goBuild{}
}

// TestDockerfile checks the image's shape: a build stage on the Go release
// go.mod asks for, building ./cmd/microbatch with cgo off, and a final stage
// that runs the binary as a non-root user.
func TestDockerfile(t *testing.T) {
	stages := loadDockerfile(t)
	st, b := dockerfileBuild(t, stages)
	final := stages[len(stages)-1]

	// Build stage: golang:<go.mod's major.minor>.
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	image, tag, _ := strings.Cut(st.from, ":")
	if image != "golang" || (tag != string(m[1]) && !strings.HasPrefix(tag, string(m[1])+".") && !strings.HasPrefix(tag, string(m[1])+"-")) {
		t.Errorf("build stage FROM %s: want golang:%s (go.mod says go %s%s)", st.from, m[1], m[1], m[2])
	}
	if !slices.Contains(b.env, "CGO_ENABLED=0") {
		t.Errorf("go build runs with env %v: want CGO_ENABLED=0 (a static binary for the distroless/scratch stage)", b.env)
	}
	if b.pkg != "./cmd/microbatch" || b.out == "" {
		t.Errorf("go build builds %q into %q: want ./cmd/microbatch with -o", b.pkg, b.out)
	}

	// Final stage: the binary, as the entrypoint, run by a non-root user.
	copied := false
	for _, c := range final.instr("COPY") {
		f := strings.Fields(c)
		copied = copied || (len(f) == 3 && f[0] == "--from="+st.name && f[1] == b.out && f[2] == "/microbatch")
	}
	if !copied {
		t.Errorf("final stage: no COPY --from=%s %s /microbatch", st.name, b.out)
	}
	if got := final.instr("ENTRYPOINT"); len(got) != 1 || got[0] != `["/microbatch"]` {
		t.Errorf("final stage ENTRYPOINT %v, want [\"/microbatch\"]", got)
	}
	users := final.instr("USER")
	if len(users) == 0 {
		t.Errorf("final stage (FROM %s) sets no USER: it would run as whatever the base image says", final.from)
	}
	for _, u := range users {
		if name, _, _ := strings.Cut(u, ":"); name == "root" || name == "0" {
			t.Errorf("final stage runs as USER %s", u)
		}
	}
	if final.from != "scratch" && !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want scratch or gcr.io/distroless/static (no libc: the binary is static)", final.from)
	}

	// The port compose publishes for the job is the one the image exposes.
	c := loadCompose(t)
	for _, p := range c.Services[jobService].Ports {
		_, container, _ := strings.Cut(p, ":")
		exposed := false
		for _, e := range final.instr("EXPOSE") {
			exposed = exposed || slices.Contains(strings.Fields(e), container)
		}
		if !exposed {
			t.Errorf("compose publishes %s of %s, the image doesn't EXPOSE %s", p, jobService, container)
		}
	}
}

// ---- the binary ----

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// staticBinary builds ./cmd/microbatch exactly as the Dockerfile does (its
// ENV and go build flags, for linux) into a temporary directory, once.
func staticBinary(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux/" + runtime.GOARCH + "; this test runs the binary it builds")
	}
	buildOnce.Do(func() {
		_, b := dockerfileBuild(t, loadDockerfile(t))
		buildDir, buildErr = os.MkdirTemp("", "microbatch-docker-test")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "microbatch")
		args := append(append([]string{"build"}, b.args...), "-o", binPath, b.pkg)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(append(os.Environ(), "GOOS=linux"), b.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%v %v: %v\n%s", b.env, cmd.Args, err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("static build as in the Dockerfile: %v", buildErr)
	}
	if binPath == "" {
		t.Fatal("static build: reading the Dockerfile failed (see TestDockerfile)")
	}
	return binPath
}

// TestStaticBuild builds the binary with the Dockerfile's command and checks
// it is static: no ELF interpreter and no shared libraries, so it runs on
// distroless/static or scratch.
func TestStaticBuild(t *testing.T) {
	f, err := elf.Open(staticBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is dynamically linked (cgo?)")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
}

// flagsOf lists the long flags `microbatch <cmd> --help` prints.
func flagsOf(t *testing.T, bin, cmd string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, cmd, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("microbatch %s --help: %v\n%s", cmd, err, out)
	}
	_, after, ok := strings.Cut(string(out), "\nFlags:\n")
	if !ok {
		t.Fatalf("microbatch %s --help prints no Flags: section:\n%s", cmd, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(after, -1) {
		flags[m[1]] = true
	}
	if !flags["config"] {
		t.Fatalf("microbatch %s --help: parsed flags %v, no --config: the help format changed?", cmd, flags)
	}
	return flags
}

// TestComposeEnvAreFlags checks every MICROBATCH_* variable a service of the
// image sets is a flag of the command it runs: the CLI ignores unknown
// variables, so a typo would silently fall back to the default.
func TestComposeEnvAreFlags(t *testing.T) {
	c := loadCompose(t)
	bin := staticBinary(t)
	checked := 0
	for name, s := range c.Services {
		env := s.microbatchEnv(t)
		if !s.runsImage(c) {
			if len(env) > 0 {
				t.Errorf("service %s sets %v but doesn't run microbatch", name, env)
			}
			continue
		}
		if len(s.Command) == 0 {
			t.Errorf("service %s: no command (the image has only an entrypoint)", name)
			continue
		}
		flags := flagsOf(t, bin, s.Command[0])
		for k := range env {
			flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, envPrefix)), "_", "-")
			if !flags[flag] {
				t.Errorf("service %s: %s is not a setting of `microbatch %s` (no --%s)", name, k, s.Command[0], flag)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no MICROBATCH_* variables checked")
	}
}

// ---- .dockerignore ----

// ignoreMatcher follows .dockerignore's rules (moby/patternmatcher): paths
// relative to the context root, `*` and `?` within one path element, `**`
// across elements, a match on a directory excludes what is inside, and a
// later `!pattern` re-includes.
type ignoreMatcher []struct {
	re     *regexp.Regexp
	negate bool
}

func loadIgnore(t *testing.T) ignoreMatcher {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var m ignoreMatcher
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		p := strings.TrimPrefix(path.Clean(strings.TrimPrefix(strings.TrimPrefix(line, "!"), "/")), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case p[i] == '*':
				re.WriteString("[^/]*")
			case p[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		re.WriteString("$")
		m = append(m, struct {
			re     *regexp.Regexp
			negate bool
		}{regexp.MustCompile(re.String()), neg})
	}
	return m
}

// excluded reports whether the file at rel (slash-separated) is left out of
// the build context.
func (m ignoreMatcher) excluded(rel string) bool {
	parts := strings.Split(rel, "/")
	out := false
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		for _, p := range m {
			if p.re.MatchString(prefix) {
				out = !p.negate
			}
		}
	}
	return out
}

// TestDockerignoreKeepsSources checks the build context still holds every
// file `go build ./cmd/microbatch` reads: go.mod, go.sum and each main-module
// package's Go and embedded files.
func TestDockerignoreKeepsSources(t *testing.T) {
	ign := loadIgnore(t)
	if ign == nil {
		t.Skip("no .dockerignore")
	}
	for _, must := range []string{".git/HEAD", ".services/x", "microbatch.db"} {
		if !ign.excluded(must) {
			t.Errorf(".dockerignore sends %s to the build", must)
		}
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if and .Module .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{end}}`,
		"./cmd/microbatch")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := []string{"go.mod", "go.sum"}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 10 {
		t.Fatalf("go list found only %v", files)
	}
	for _, f := range files {
		if ign.excluded(f) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", f)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
