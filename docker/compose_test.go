package docker_test

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
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
