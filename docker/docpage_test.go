package docker_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/event"
)

// docs/docker.md is the users' page on the stack: its service table and
// its commands must match compose.yml.

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
