package main_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// The distinctive secrets the test greps the output for.
const (
	kafkaSecret = "KafkaPw-Zq81x"
	sinkSecret  = "SinkPw-Wv42y"
)

// TestSecretsNeverShown runs `run` (and `produce`, `verify`) against a
// TLS + SASL broker with passwords in flags, the environment, files and
// sink DSNs, succeeding and failing, and checks that no password appears in
// anything printed.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("CLI test: skipped with -short")
	}
	ca := testutil.NewTestCA(t)
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: 2, TLS: ca.Server,
		Users: []devbroker.User{{Mechanism: kafkautil.SASLScramSHA512, Name: "alice", Password: kafkaSecret}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	dir := t.TempDir()
	kafkaPwFile := filepath.Join(dir, "kafka.pw")
	sinkPwFile := filepath.Join(dir, "sink.pw")
	for f, pw := range map[string]string{kafkaPwFile: kafkaSecret + "\n", sinkPwFile: sinkSecret + "\n"} {
		if err := os.WriteFile(f, []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	brokers := strings.Join(b.Addrs(), ",")
	topic := systemtest.UniqueName(t, "sec")
	kafka := []string{"--brokers", brokers, "--kafka-tls", "--kafka-ca-file", ca.CAFile, "--kafka-sasl-mechanism", "scram-sha-512", "--kafka-user", "alice"}
	sqlite := "sqlite://" + filepath.Join(dir, "sink.db")
	unreachableMySQL := "mysql://mb:%s@127.0.0.1:1/mb"
	common := []string{"--topic", topic, "--log-level", "debug", "--until-idle", "1s", "--interval", "100ms", "--connect-timeout", "1s"}
	// Runs that must succeed get a connect timeout a busy machine can't
	// reach (the later flag wins); the 1s above is for the unreachable.
	reachable := []string{"--connect-timeout", "1m"}

	check := func(t *testing.T, r systemtest.Result, code int) {
		t.Helper()
		if r.Code != code {
			t.Errorf("exit %d, want %d\n%s", r.Code, code, r)
		}
		for _, pw := range []string{kafkaSecret, sinkSecret} {
			if strings.Contains(r.Stdout+r.Stderr, pw) {
				t.Errorf("output shows password %q:\n%s", pw, r)
			}
		}
	}
	args := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	withEnvPw := systemtest.Env("MICROBATCH_KAFKA_PASSWORD=" + kafkaSecret)

	// produce, with the password from the environment.
	r := systemtest.Run(t, dir, withEnvPw, time.Minute, args([]string{"produce", "--topic", topic, "--count", "3000", "--partitions", "2"}, kafka)...)
	check(t, r, 0)
	var events, amount int64
	if _, err := fmt.Sscanf(r.Stdout[strings.Index(r.Stdout, "expected"):], "expected events=%d amount=%d", &events, &amount); err != nil {
		t.Fatalf("produce output %q: %v", r.Stdout, err)
	}

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string // shown, proving the output names what the secret belongs to
	}{
		{"WrongKafkaPassword", nil, args([]string{"run", "--sink", sqlite, "--kafka-password", "x" + kafkaSecret}, kafka, common), 5, `user "alice"`},
		{"PasswordAndFile", nil, args([]string{"run", "--sink", sqlite, "--kafka-password", kafkaSecret, "--kafka-password-file", kafkaPwFile}, kafka, common), 2, "give one, not both"},
		{"UnreachableSinkInlinePassword", withEnvPw, args([]string{"run", "--sink", fmt.Sprintf(unreachableMySQL, sinkSecret)}, kafka, common), 3, "mb:xxxxx@127.0.0.1:1"},
		{"UnreachableSinkPasswordFile", withEnvPw, args([]string{"run", "--sink", strings.Replace(unreachableMySQL, ":%s", "", 1), "--sink-password-file", sinkPwFile}, kafka, common), 3, "mb:xxxxx@127.0.0.1:1"},
		{"UnreachableRedisPasswordFile", withEnvPw, args([]string{"run", "--strategy", "idempotent", "--sink", "redis://127.0.0.1:1/0", "--sink-password-file", sinkPwFile}, kafka, common), 3, ":xxxxx@127.0.0.1:1"},
		{"SinkPasswordTwice", withEnvPw, args([]string{"run", "--sink", fmt.Sprintf(unreachableMySQL, sinkSecret), "--sink-password-file", sinkPwFile}, kafka, common), 2, "not both"},
		{"DryRunMySQL", withEnvPw, args([]string{"run", "--dry-run", "--sink", fmt.Sprintf(unreachableMySQL, sinkSecret)}, kafka, common), 3, "mb:xxxxx@127.0.0.1:1"},
		{"UntrustedCA", withEnvPw, args([]string{"run", "--sink", sqlite}, kafka, common, []string{"--kafka-ca-file", testutil.NewTestCA(t).CAFile}), 2, "TLS handshake failed"},
		{"JSONLogsSuccess", nil, args([]string{"run", "--sink", sqlite, "--kafka-password-file", kafkaPwFile, "--log-format", "json"}, kafka, common, reachable), 0, `"msg":"job started"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := systemtest.Run(t, dir, tc.env, time.Minute, tc.args...)
			check(t, r, tc.code)
			if !strings.Contains(r.Stdout+r.Stderr, tc.want) {
				t.Errorf("output does not show %q:\n%s", tc.want, r)
			}
		})
	}
	t.Run("MariaDBPasswordFile", func(t *testing.T) {
		// The test server's DSN, its password moved into a file.
		u, err := url.Parse(testutil.NeedServer(t, testutil.EnvMySQL))
		if err != nil {
			t.Fatal(err)
		}
		pw, _ := u.User.Password()
		file := filepath.Join(t.TempDir(), "mysql.pw")
		if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		u.User = url.User(u.User.Username())
		job := systemtest.UniqueName(t, "job")
		r := systemtest.Run(t, dir, withEnvPw, time.Minute, args([]string{"run", "--job", job, "--sink", u.String(), "--sink-password-file", file}, kafka, common, reachable)...)
		check(t, r, 0)
		r = systemtest.Run(t, dir, nil, time.Minute, "verify", "--job", job, "--sink", u.String(), "--sink-password-file", file,
			"--expect-events", fmt.Sprint(events), "--expect-amount", fmt.Sprint(amount))
		check(t, r, 0)
		if strings.Contains(r.Stdout+r.Stderr, pw) {
			t.Errorf("output shows the MariaDB password:\n%s", r)
		}
	})
	r = systemtest.Run(t, dir, nil, time.Minute, "verify", "--sink", sqlite, "--expect-events", fmt.Sprint(events), "--expect-amount", fmt.Sprint(amount))
	check(t, r, 0)
}
