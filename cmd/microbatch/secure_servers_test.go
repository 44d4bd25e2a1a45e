package main_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// The TLS and SASL side of the real servers scripts/services.sh starts
// (`scripts/services.sh env` prints them).
const (
	envKafkaSASLSSL  = "MICROBATCH_TEST_KAFKA_SASL_SSL"      // host:port of Kafka's SASL_SSL listener
	envKafkaSASLUser = "MICROBATCH_TEST_KAFKA_SASL_USER"     // PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 user
	envKafkaSASLPass = "MICROBATCH_TEST_KAFKA_SASL_PASSWORD" // its password
	envTLSCA         = "MICROBATCH_TEST_TLS_CA"              // PEM of the CA that signed all three servers' certificates
	envMySQLTLS      = "MICROBATCH_TEST_MYSQL_TLS"           // mysql:// DSN of a user that is REQUIRE SSL
	envRedisTLS      = "MICROBATCH_TEST_REDIS_TLS"           // rediss:// DSN of Redis's TLS port
)

type secureServers struct {
	kafka, user, password, ca, mysql, redis string
}

// needSecureServers returns the secure servers' settings (each
// testutil.NeedServer: skipped without it, failed where the servers are
// part of the run).
func needSecureServers(t *testing.T) secureServers {
	t.Helper()
	need := func(env string) string { return testutil.NeedServer(t, env) }
	return secureServers{kafka: need(envKafkaSASLSSL), user: need(envKafkaSASLUser), password: need(envKafkaSASLPass),
		ca: need(envTLSCA), mysql: need(envMySQLTLS), redis: need(envRedisTLS)}
}

// TestSecureServers runs produce, run and verify against the real servers
// over TLS: Apache Kafka's SASL_SSL listener (SCRAM-SHA-512, SCRAM-SHA-256
// and PLAIN), MariaDB as a user the server only admits over TLS, and
// Redis's TLS port — exact totals for txn into MariaDB and idempotent into
// Redis, a refused Kafka password, untrusted CAs, and no password in any
// output.
func TestSecureServers(t *testing.T) {
	t.Parallel()
	srv := needSecureServers(t)
	systemtest.Binary(t) // built before the timed runs
	dir := t.TempDir()

	// The MariaDB password goes into a file, the DSN keeps the user.
	mu, err := url.Parse(srv.mysql)
	if err != nil {
		t.Fatal(err)
	}
	mysqlPw, _ := mu.User.Password()
	if mysqlPw == "" {
		t.Fatalf("%s has no password", envMySQLTLS)
	}
	mu.User = url.User(mu.User.Username())
	mysqlDSN := mu.String()

	kafkaPwFile := filepath.Join(dir, "kafka.pw")
	mysqlPwFile := filepath.Join(dir, "mysql.pw")
	for f, pw := range map[string]string{kafkaPwFile: srv.password + "\n", mysqlPwFile: mysqlPw + "\n"} {
		if err := os.WriteFile(f, []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	otherCA := testutil.NewTestCA(t).CAFile // trusted by nobody

	kafka := func(mechanism string) []string {
		return []string{"--brokers", srv.kafka, "--kafka-tls", "--kafka-ca-file", srv.ca,
			"--kafka-sasl-mechanism", mechanism, "--kafka-user", srv.user}
	}
	withPwFile := []string{"--kafka-password-file", kafkaPwFile}
	withEnvPw := systemtest.Env("MICROBATCH_KAFKA_PASSWORD=" + srv.password)
	mariadb := []string{"--sink", mysqlDSN, "--sink-password-file", mysqlPwFile, "--sink-ca-file", srv.ca}
	redis := []string{"--sink", srv.redis, "--sink-ca-file", srv.ca}
	topic := systemtest.UniqueName(t, "secure")
	// A connect timeout the runs that succeed never reach, however busy
	// the machine (the default would do; it is set to say so).
	common := []string{"--topic", topic, "--until-idle", "1s", "--interval", "100ms", "--connect-timeout", "1m", "--log-level", "debug"}
	args := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	run := func(t *testing.T, env []string, code int, want string, a ...string) systemtest.Result {
		t.Helper()
		start := time.Now()
		r := systemtest.Run(t, dir, env, 3*time.Minute, a...)
		t.Logf("microbatch %s: exit %d in %s", a[0], r.Code, time.Since(start).Round(10*time.Millisecond))
		if r.Code != code {
			t.Errorf("microbatch %s: exit %d, want %d\n%s", strings.Join(a, " "), r.Code, code, r)
		}
		for _, pw := range []string{srv.password, mysqlPw} {
			if strings.Contains(r.Stdout+r.Stderr, pw) {
				t.Errorf("output shows password %q:\n%s", pw, r)
			}
		}
		if !strings.Contains(r.Stdout+r.Stderr, want) {
			t.Errorf("output does not show %q:\n%s", want, r)
		}
		return r
	}
	var events, amount int64
	produce := func(t *testing.T, env []string, mechanism string, skip, count int64, extra ...string) {
		t.Helper()
		r := run(t, env, 0, "expected events=", args([]string{"produce", "--topic", topic, "--partitions", "4", "--keys", "500", "--seed", "7",
			"--skip", fmt.Sprint(skip), "--count", fmt.Sprint(count)}, kafka(mechanism), extra)...)
		m := systemtest.ExpectedRE.FindStringSubmatch(r.Stdout)
		if m == nil {
			t.Fatalf("produce printed no expected totals:\n%s", r)
		}
		var e, a int64
		fmt.Sscan(m[1], &e)
		fmt.Sscan(m[2], &a)
		events += e
		amount += a
	}
	verify := func(t *testing.T, job, strategy string, sink []string) {
		t.Helper()
		run(t, nil, 0, "", args([]string{"verify", "--job", job, "--strategy", strategy,
			"--expect-events", fmt.Sprint(events), "--expect-amount", fmt.Sprint(amount)}, sink)...)
	}

	// Two slices of one sequence: SCRAM-SHA-512 (password from the
	// environment), then PLAIN (from a file).
	produce(t, withEnvPw, "SCRAM-SHA-512", 0, 3000)
	if t.Failed() {
		t.FailNow()
	}

	txnJob := systemtest.UniqueName(t, "txn")
	t.Run("TxnIntoMariaDBOverTLS", func(t *testing.T) {
		run(t, nil, 0, "", args([]string{"run", "--strategy", "txn", "--job", txnJob}, kafka("SCRAM-SHA-512"), withPwFile, mariadb, common)...)
	})
	produce(t, nil, "PLAIN", 3000, 1000, withPwFile...)
	t.Run("TxnResumesWithScramSHA256", func(t *testing.T) {
		run(t, withEnvPw, 0, "", args([]string{"run", "--strategy", "txn", "--job", txnJob}, kafka("SCRAM-SHA-256"), mariadb, common)...)
		verify(t, txnJob, "txn", mariadb)
	})
	t.Run("IdempotentIntoRedisOverTLS", func(t *testing.T) {
		job := systemtest.UniqueName(t, "idem")
		run(t, nil, 0, "", args([]string{"run", "--strategy", "idempotent", "--job", job}, kafka("SCRAM-SHA-512"), withPwFile, redis, common)...)
		verify(t, job, "idempotent", redis)
	})

	// Refusals: each exits with the documented code, without waiting for
	// --connect-timeout. (A refused SASL login takes about 3 s: sarama
	// retries the bootstrap metadata request 5 times, 200 ms apart, and the
	// broker delays each refusal.) The timeout is far above that, so that a
	// slow machine can't pass for one that waited.
	const refusalTimeout = 2 * time.Minute
	wrongPw := systemtest.Env("MICROBATCH_KAFKA_PASSWORD=x" + srv.password)
	common = []string{"--topic", topic, "--until-idle", "1s", "--connect-timeout", refusalTimeout.String(), "--log-level", "debug"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"WrongKafkaPasswordScram", wrongPw, args([]string{"run", "--job", systemtest.UniqueName(t, "no")}, kafka("SCRAM-SHA-512"), mariadb, common), 5,
			"SASL Authentication failed"},
		{"WrongKafkaPasswordPlain", wrongPw, args([]string{"run", "--job", systemtest.UniqueName(t, "no")}, kafka("PLAIN"), mariadb, common), 5,
			"SASL Authentication failed"},
		{"UntrustedKafkaCA", nil, args([]string{"run", "--job", systemtest.UniqueName(t, "no")}, kafka("SCRAM-SHA-512"), withPwFile, mariadb, common,
			[]string{"--kafka-ca-file", otherCA}), 2, "TLS handshake failed"},
		{"UntrustedMariaDBCA", nil, args([]string{"run", "--job", systemtest.UniqueName(t, "no")}, kafka("SCRAM-SHA-512"), withPwFile, mariadb, common,
			[]string{"--sink-ca-file", otherCA}), 2, "TLS handshake failed"},
		{"UntrustedRedisCA", nil, args([]string{"run", "--strategy", "idempotent", "--job", systemtest.UniqueName(t, "no")}, kafka("SCRAM-SHA-512"), withPwFile,
			redis, common, []string{"--sink-ca-file", otherCA}), 2, "TLS handshake failed"},
		// The TLS user without TLS: proof that the runs above used it.
		{"MariaDBTLSUserWithoutTLS", nil, args([]string{"run", "--job", systemtest.UniqueName(t, "no")}, kafka("SCRAM-SHA-512"), withPwFile,
			[]string{"--sink", mysqlDSN, "--sink-password-file", mysqlPwFile}, common), 5, "Access denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			run(t, tc.env, tc.code, tc.want, tc.args...)
			if d := time.Since(start); d >= refusalTimeout {
				t.Errorf("took %s: a refusal must not wait for --connect-timeout (%s)", d.Round(time.Millisecond), refusalTimeout)
			}
		})
	}
}
