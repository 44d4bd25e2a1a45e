// Package docker_test checks the container stack without a Docker engine:
// the image's static build with the Dockerfile's own flags, its non-root
// final stage, and that docker/compose.yml, docs/docker.md ("Docker
// compose quickstart") and the CLI's flags agree with each other.
//
// What it cannot check is that the image builds and the stack starts: that
// needs Docker, which the test machines don't have.
package docker_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/microbatch/microbatch/internal/event"
)

const (
	root           = ".." // the tests run in docker/
	composePath    = "compose.yml"
	dockerfilePath = "Dockerfile"
	docPath        = "docs/docker.md" // relative to root
	readmeSection  = "# Docker compose quickstart"
	envPrefix      = "MICROBATCH_"
	// The service that runs the job and the one-shot producer.
	jobService     = "microbatch"
	produceService = "produce"
	topicService   = "create-topic"
)

// ---- compose.yml ----

type composeFile struct {
	Services map[string]service `yaml:"services"`
}

type service struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string                              `yaml:"command"`
	Environment yaml.Node                             `yaml:"environment"`
	Ports       []string                              `yaml:"ports"`
	DependsOn   map[string]struct{ Condition string } `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("%s: %v (command and ports must be lists of strings)", composePath, err)
	}
	if len(c.Services) == 0 {
		t.Fatalf("%s: no services", composePath)
	}
	return c
}

// env returns a service's environment, given as a mapping or as a list of
// NAME=value.
func (s service) env(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	n := s.Environment
	switch n.Kind {
	case 0:
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out[n.Content[i].Value] = n.Content[i+1].Value
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			k, v, _ := strings.Cut(item.Value, "=")
			out[k] = v
		}
	default:
		t.Fatalf("environment at line %d: want a mapping or a list", n.Line)
	}
	return out
}

// microbatchEnv is the service's MICROBATCH_* variables only.
func (s service) microbatchEnv(t *testing.T) map[string]string {
	out := map[string]string{}
	for k, v := range s.env(t) {
		if strings.HasPrefix(k, envPrefix) {
			out[k] = v
		}
	}
	return out
}

// runsImage reports whether the service runs the image docker/Dockerfile
// builds.
func (s service) runsImage(c composeFile) bool {
	if s.Build != nil {
		return true
	}
	for _, o := range c.Services {
		if o.Build != nil && o.Image != "" && o.Image == s.Image {
			return true
		}
	}
	return false
}

// ---- docs/docker.md ----

type readmeRow struct {
	ports []string          // host:container
	env   map[string]string // MICROBATCH_* name → value
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	portPair   = regexp.MustCompile(`^\d+:\d+$`)
	envPair    = regexp.MustCompile(`^` + envPrefix + `[A-Z0-9_]+=`)
)

func readSection(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(docPath)))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	if !strings.HasPrefix(s, readmeSection+"\n") {
		t.Fatalf("%s does not start with %q", docPath, readmeSection)
	}
	return s
}

// readmeTable parses the section's table: | `service` | `host:container`… |
// … `MICROBATCH_X=value` … |.
func readmeTable(t *testing.T, section string) map[string]readmeRow {
	t.Helper()
	rows := map[string]readmeRow{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("docs/docker.md table row %q: want 3 cells (service | port | settings)", line)
		}
		name := backticked.FindStringSubmatch(cells[0])
		if name == nil { // the header
			continue
		}
		row := readmeRow{env: map[string]string{}}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			if portPair.MatchString(m[1]) {
				row.ports = append(row.ports, m[1])
			}
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			if envPair.MatchString(m[1]) {
				k, v, _ := strings.Cut(m[1], "=")
				row.env[k] = v
			}
		}
		if _, dup := rows[name[1]]; dup {
			t.Fatalf("docs/docker.md table lists %s twice", name[1])
		}
		rows[name[1]] = row
	}
	if len(rows) == 0 {
		t.Fatal("docs/docker.md has no service table")
	}
	return rows
}

// readmeCommands returns the `docker compose …` lines of the section's code
// blocks, split into words.
func readmeCommands(section string) [][]string {
	var cmds [][]string
	in := false
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if in && strings.HasPrefix(line, "docker compose ") {
			cmds = append(cmds, strings.Fields(line))
		}
	}
	return cmds
}

// TestReadmeMatchesCompose compares the docs/docker.md table with compose.yml both
// ways: services, published ports and MICROBATCH_* settings.
func TestReadmeMatchesCompose(t *testing.T) {
	c := loadCompose(t)
	rows := readmeTable(t, readSection(t))
	for name, s := range c.Services {
		row, ok := rows[name]
		if !ok {
			t.Errorf("service %s is in %s but not in the docs/docker.md table", name, composePath)
			continue
		}
		if got, want := sorted(row.ports), sorted(s.Ports); !slices.Equal(got, want) {
			t.Errorf("service %s: docs/docker.md says ports %v, %s publishes %v", name, got, composePath, want)
		}
		env := s.microbatchEnv(t)
		for k, v := range env {
			if rv, ok := row.env[k]; !ok {
				t.Errorf("service %s: %s=%s is in %s but not in docs/docker.md", name, k, v, composePath)
			} else if rv != v {
				t.Errorf("service %s: docs/docker.md says %s=%s, %s says %s", name, k, rv, composePath, v)
			}
		}
		for k := range row.env {
			if _, ok := env[k]; !ok {
				t.Errorf("service %s: docs/docker.md lists %s, %s doesn't set it", name, k, composePath)
			}
		}
	}
	for name := range rows {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("docs/docker.md table lists service %s, %s has none", name, composePath)
		}
	}
}

// TestReadmeCommands checks the section's commands name this compose file
// and its services, and that the totals it tells `verify` to expect are
// those of the events the produce service writes.
func TestReadmeCommands(t *testing.T) {
	c := loadCompose(t)
	section := readSection(t)
	cmds := readmeCommands(section)
	seen := map[string]bool{}
	var expectEvents, expectAmount string
	for _, w := range cmds {
		line := strings.Join(w, " ")
		if len(w) < 5 || w[2] != "-f" {
			t.Errorf("%q: want docker compose -f %s …", line, path.Join("docker", composePath))
			continue
		}
		if w[3] != path.Join("docker", composePath) {
			t.Errorf("%q: compose file %s, want docker/%s (run from the repository root)", line, w[3], composePath)
		}
		sub, args := w[4], w[5:]
		seen[sub] = true
		switch sub {
		case "run":
			// Skip run's own flags; the next word is the service.
			i := 0
			for i < len(args) && strings.HasPrefix(args[i], "-") {
				if args[i] == "-e" {
					i++
				}
				i++
			}
			if i == len(args) {
				t.Errorf("%q: no service", line)
				continue
			}
			if _, ok := c.Services[args[i]]; !ok {
				t.Errorf("%q: no service %s in %s", line, args[i], composePath)
			}
			for j, a := range args[i+1:] {
				if j+i+2 < len(args) {
					switch a {
					case "--expect-events":
						expectEvents = args[i+j+2]
					case "--expect-amount":
						expectAmount = args[i+j+2]
					}
				}
			}
		case "logs":
			for _, a := range args {
				if _, ok := c.Services[a]; !strings.HasPrefix(a, "-") && !ok {
					t.Errorf("%q: no service %s in %s", line, a, composePath)
				}
			}
		}
	}
	for _, sub := range []string{"up", "run", "logs", "down"} {
		if !seen[sub] {
			t.Errorf("docs/docker.md shows no `docker compose -f docker/compose.yml %s`", sub)
		}
	}

	// What produce writes, with the CLI's defaults for what compose leaves
	// unset (seed 1, no skip; count and keys are set in compose.yml).
	env := c.Services[produceService].microbatchEnv(t)
	num := func(name string, def uint64) uint64 {
		v, ok := env[envPrefix+name]
		if !ok {
			return def
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s%s=%q: %v", produceService, envPrefix, name, v, err)
		}
		return n
	}
	count, keys, seed, skip := num("COUNT", 100000), num("KEYS", 1000), num("SEED", 1), num("SKIP", 0)
	gen := event.NewGenerator(seed, int(keys))
	for range skip {
		gen.Next()
	}
	var amount int64
	for range count {
		_, _, a := gen.Next()
		amount += a
	}
	if expectEvents != strconv.FormatUint(count, 10) || expectAmount != strconv.FormatInt(amount, 10) {
		t.Errorf("docs/docker.md's verify expects events=%s amount=%s; produce writes events=%d amount=%d", expectEvents, expectAmount, count, amount)
	}
	want := fmt.Sprintf("# -> produced %d events to %s: expected events=%d amount=%d", count, env[envPrefix+"TOPIC"], count, amount)
	if !strings.Contains(section, want+"\n") {
		t.Errorf("docs/docker.md should show produce's output %q", want)
	}
}

// TestComposeWiring checks what would only show once the stack runs: the
// job's image is built from this Dockerfile, its dependencies are healthy
// before it starts, and its settings point at the other services.
func TestComposeWiring(t *testing.T) {
	c := loadCompose(t)
	job, ok := c.Services[jobService]
	if !ok {
		t.Fatalf("%s has no %s service", composePath, jobService)
	}
	for name, s := range c.Services {
		if s.Build != nil {
			ctx := filepath.Join(".", s.Build.Context)
			if _, err := os.Stat(filepath.Join(ctx, "go.mod")); err != nil {
				t.Errorf("service %s: build context %s is not the repository root: %v", name, s.Build.Context, err)
			}
			df, err := filepath.Abs(filepath.Join(ctx, s.Build.Dockerfile))
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := filepath.Abs(dockerfilePath); df != want {
				t.Errorf("service %s: builds %s, want %s", name, df, want)
			}
		}
		for dep, d := range s.DependsOn {
			target, ok := c.Services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which doesn't exist", name, dep)
			case d.Condition == "service_healthy" && (target.Healthcheck == nil || len(target.Healthcheck.Test) == 0):
				t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
	}
	if job.Build == nil {
		t.Errorf("service %s has no build section", jobService)
	}
	for _, dep := range []string{"kafka", "mysql", "redis"} {
		if got := job.DependsOn[dep].Condition; got != "service_healthy" {
			t.Errorf("service %s: depends_on %s condition %q, want service_healthy", jobService, dep, got)
		}
	}
	if got := job.DependsOn[topicService].Condition; got != "service_completed_successfully" {
		t.Errorf("service %s: depends_on %s condition %q, want service_completed_successfully (run never creates its topic)", jobService, topicService, got)
	}

	// Every image user reaches Kafka through an advertised listener.
	kafkaEnv := c.Services["kafka"].env(t)
	advertised := kafkaEnv["KAFKA_ADVERTISED_LISTENERS"]
	topicCmd := c.Services[topicService].Command
	topicIdx := slices.Index(topicCmd, "--topic")
	if topicIdx < 0 || topicIdx+1 == len(topicCmd) {
		t.Fatalf("service %s: command %v has no --topic NAME", topicService, topicCmd)
	}
	for name, s := range c.Services {
		env := s.microbatchEnv(t)
		if b, ok := env[envPrefix+"BROKERS"]; ok {
			for _, broker := range strings.Split(b, ",") {
				if !strings.Contains(advertised, "://"+broker) {
					t.Errorf("service %s: broker %s is not one of kafka's advertised listeners %s", name, broker, advertised)
				}
			}
		}
		if topic, ok := env[envPrefix+"TOPIC"]; ok && topic != topicCmd[topicIdx+1] {
			t.Errorf("service %s: topic %s, but %s creates %s", name, topic, topicService, topicCmd[topicIdx+1])
		}
	}

	// The sink DSN uses the MySQL service's account.
	env := job.microbatchEnv(t)
	sink, err := url.Parse(env[envPrefix+"SINK"])
	if err != nil {
		t.Fatalf("%sSINK: %v", envPrefix, err)
	}
	my := c.Services["mysql"].env(t)
	pass, _ := sink.User.Password()
	if sink.Scheme != "mysql" || sink.Hostname() != "mysql" || sink.User.Username() != my["MYSQL_USER"] ||
		pass != my["MYSQL_PASSWORD"] || strings.TrimPrefix(sink.Path, "/") != my["MYSQL_DATABASE"] {
		t.Errorf("%sSINK %s doesn't match the mysql service (user %s, database %s)", envPrefix, sink.Redacted(), my["MYSQL_USER"], my["MYSQL_DATABASE"])
	}

	// The metrics listener binds an address a published port can reach (a
	// bare :port binds loopback) on a port the service publishes.
	addr := env[envPrefix+"METRICS_ADDR"]
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%sMETRICS_ADDR %q: %v", envPrefix, addr, err)
	}
	if ip := net.ParseIP(host); host == "" || host == "localhost" || ip != nil && ip.IsLoopback() {
		t.Errorf("%sMETRICS_ADDR %s binds loopback: the published port would reach nothing", envPrefix, addr)
	}
	published := false
	for _, p := range job.Ports {
		published = published || strings.HasSuffix(p, ":"+port)
	}
	if !published {
		t.Errorf("service %s publishes %v, not the metrics port %s", jobService, job.Ports, port)
	}
}

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
