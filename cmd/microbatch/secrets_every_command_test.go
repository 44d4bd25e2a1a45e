package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/systemtest"
)

// TestSecretsEveryCommand runs every subcommand that takes a DSN or a
// Kafka password — run, run --dry-run, produce, verify, offsets show,
// offsets reset, bench — through each error path that can name a sink or
// a broker, with the marker password in mysql://, go-sql-driver, redis://
// and kafka:// DSNs, in --sink-password-file, and as the SASL password
// (flag, environment, file), the DSN given as a flag, in the environment
// and in a config file; and checks that nothing any of them prints (stdout
// and stderr) holds the marker. Where a message names the sink it must
// keep the user and hide only the password.
func TestSecretsEveryCommand(t *testing.T) {
	t.Parallel()
	f := newFailingServers(t)
	dir := f.dir
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pwFile := file("marker.pw", marker+"\n")
	const long, short = "90s", "1s" // --connect-timeout: see failure.wait
	var (
		plain      = f.plainKafka()
		saslFlag   = f.saslKafka(marker, true)
		saslNoPw   = []string{"--brokers", f.saslSSL, "--kafka-tls", "--kafka-ca-file", f.ca, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-user", f.saslUser}
		saslPwFile = append(saslNoPw[:len(saslNoPw):len(saslNoPw)], "--kafka-password-file", pwFile)
		markerEnv  = systemtest.Env("MICROBATCH_KAFKA_PASSWORD=" + marker)
		kafkaSink  = "kafka://mb:" + marker + "@" + f.kafka + "/" + f.topic
		badParams  = f.mysqlRefused + "?timeout=zz"
		notAURL    = strings.Replace(f.mysqlDown, marker, marker+"/x", 1) // a '/' url.Parse takes for the path
		goSQLDown  = "mb:" + marker + "@tcp(127.0.0.1:1)/mbtest"
		redisBadDB = strings.TrimSuffix(f.redisDown, "/0") + "/x"
		userKept   = "mb:xxxxx@" // a message naming the DSN hides the password only
	)
	configFile := file("refused.yaml", fmt.Sprintf("sink: %q\n", f.mysqlRefused))
	type tc struct {
		name string
		env  []string // nil: no MICROBATCH_ settings
		args []string
		code int
		want string // in the output: the path was taken, and what the message shows of the DSN
	}
	args := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	sink := func(dsn string) []string { return []string{"--sink", dsn} }
	wait := func(d string) []string { return []string{"--connect-timeout", d} }
	job := func() []string { return []string{"--job", systemtest.UniqueName(t, "sec"), "--topic", f.topic} }
	run := func(extra ...string) []string {
		return append([]string{"run", "--until-idle", "1s", "--log-level", "debug"}, extra...)
	}
	verify := func(extra ...string) []string {
		return append([]string{"verify", "--job", systemtest.UniqueName(t, "sec"), "--expect-events", "1", "--expect-amount", "1"}, extra...)
	}
	idem := []string{"--strategy", "idempotent"}
	var cases []tc
	// The sink's error paths, for each command that opens the sink. (Those
	// refused before connecting need no --connect-timeout.)
	for _, cmd := range []struct {
		name string
		args func(extra ...string) []string
	}{
		{"run", func(extra ...string) []string { return args(run(), job(), plain, extra) }},
		{"run --dry-run", func(extra ...string) []string { return args(run("--dry-run"), job(), plain, extra) }},
		{"verify", func(extra ...string) []string { return verify(extra...) }},
		{"offsets show", func(extra ...string) []string { return args([]string{"offsets", "show"}, job(), plain, extra) }},
		{"offsets reset", func(extra ...string) []string {
			return args([]string{"offsets", "reset", "--to", "earliest"}, job(), plain, extra)
		}},
	} {
		cases = append(cases,
			tc{cmd.name + "/RefusedMySQL", nil, cmd.args(args(sink(f.mysqlRefused), wait(long))...), 5, userKept},
			tc{cmd.name + "/UnreachableMySQL", nil, cmd.args(args(sink(f.mysqlDown), wait(short))...), 3, userKept},
			tc{cmd.name + "/UnreachableGoSQLDriverDSN", nil, cmd.args(args(sink(goSQLDown), wait(short))...), 3, userKept},
			tc{cmd.name + "/RefusedRedis", nil, cmd.args(args(sink(f.redisRefused), idem, wait(long))...), 5, "mb-no-such-user:xxxxx@"},
			tc{cmd.name + "/UnreachableRedis", nil, cmd.args(args(sink(f.redisDown), idem, wait(short))...), 3, ":xxxxx@127.0.0.1:1"},
			tc{cmd.name + "/BadDSNParameters", nil, cmd.args(sink(badParams)...), 2, "timeout=zz"},
			tc{cmd.name + "/NotAURL", nil, cmd.args(sink(notAURL)...), 2, userKept},
			tc{cmd.name + "/BadRedisDatabase", nil, cmd.args(args(sink(redisBadDB), idem)...), 2, ":xxxxx@127.0.0.1:1/x"},
			tc{cmd.name + "/PasswordInDSNAndFile", nil, cmd.args(args(sink(f.mysqlRefused), []string{"--sink-password-file", pwFile})...), 2, userKept},
			tc{cmd.name + "/RefusedPasswordFromFile", nil, cmd.args(args(sink(f.mysqlUser), []string{"--sink-password-file", pwFile}, wait(long))...), 5, userKept},
			tc{cmd.name + "/RefusedMySQLFromEnv", systemtest.Env("MICROBATCH_SINK=" + f.mysqlRefused), cmd.args(wait(long)...), 5, userKept},
			tc{cmd.name + "/RefusedMySQLFromConfigFile", nil, cmd.args(args([]string{"--config", configFile}, wait(long))...), 5, userKept},
		)
	}
	// A sink that does not go with the strategy.
	for _, c := range []struct {
		name, strategy, dsn string
		offsetsWant         string // offsets names the sink
	}{
		{"IdempotentMySQL", "idempotent", f.mysqlRefused, userKept},
		{"TxnRedis", "txn", f.redisRefused, "mb-no-such-user:xxxxx@"},
		{"AtLeastOnceRedis", "at-least-once", f.redisRefused, "mb-no-such-user:xxxxx@"},
		{"TxnKafka", "txn", kafkaSink, ""},
		{"CheckpointKafkaWithUser", "checkpoint", kafkaSink, ""},
	} {
		s := []string{"--strategy", c.strategy, "--sink", c.dsn}
		cases = append(cases,
			tc{"run/" + c.name, nil, args(run(), job(), plain, s), 2, ""},
			tc{"run --dry-run/" + c.name, nil, args(run("--dry-run"), job(), plain, s), 2, ""},
			tc{"offsets show/" + c.name, nil, args([]string{"offsets", "show"}, job(), plain, s), 2, c.offsetsWant},
			tc{"offsets reset/" + c.name, nil, args([]string{"offsets", "reset", "--to", "latest"}, job(), plain, s), 2, c.offsetsWant},
		)
	}
	cases = append(cases,
		tc{"verify/CheckpointKafkaWithUser", nil, verify("--strategy", "checkpoint", "--sink", kafkaSink), 2, ""},
		// The SASL password, refused, from a flag, the environment, a file.
		tc{"run/RefusedSASLFlag", nil, args(run(), job(), saslFlag, sink(f.mysql), wait(long)), 5, "SASL Authentication failed"},
		tc{"run/RefusedSASLEnv", markerEnv, args(run(), job(), saslNoPw, sink(f.mysql), wait(long)), 5, "SASL"},
		tc{"run/RefusedSASLFile", nil, args(run(), job(), saslPwFile, sink(f.mysql), wait(long), []string{"--log-format", "json"}), 5, "SASL"},
		tc{"run/SASLPasswordTwice", nil, args(run(), job(), saslFlag, []string{"--kafka-password-file", pwFile}, sink(f.mysql)), 2, "not both"},
		tc{"run --dry-run/RefusedSASL", nil, args(run("--dry-run"), job(), saslFlag, sink(f.mysql), wait(long)), 5, "SASL"},
		tc{"run/PlaintextAtSASLSSLPort", nil, args(run(), job(), f.saslKafka(marker, false), sink(f.mysql), wait(long)), 5, "SASL"},
		tc{"run/UnreachableKafkaWithSASL", nil, args(run(), job(), []string{"--brokers", "127.0.0.1:1"}, saslFlag[2:], sink(f.mysql), wait(short)), 3, "127.0.0.1:1"},
		tc{"produce/RefusedSASLFlag", nil, args([]string{"produce", "--topic", f.topic, "--count", "1"}, saslFlag, wait(long)), 5, "SASL"},
		tc{"produce/RefusedSASLEnv", markerEnv, args([]string{"produce", "--topic", f.topic, "--count", "1"}, saslNoPw, wait(long)), 5, "SASL"},
		tc{"produce/RefusedSASLFile", nil, args([]string{"produce", "--topic", f.topic, "--count", "1"}, saslPwFile, wait(long)), 5, "SASL"},
		tc{"produce/PlaintextAtSASLSSLPort", nil, args([]string{"produce", "--topic", f.topic, "--count", "1"}, f.saslKafka(marker, false), wait(long)), 5, "SASL"},
		tc{"produce/UnreachableKafkaWithSASL", nil, args([]string{"produce", "--topic", f.topic, "--count", "1", "--brokers", "127.0.0.1:1"}, saslFlag[2:], wait(short)), 3, "127.0.0.1:1"},
		tc{"produce/SASLPasswordTwice", nil, args([]string{"produce", "--topic", f.topic}, saslFlag, []string{"--kafka-password-file", pwFile}), 2, "not both"},
		tc{"verify/RefusedSASLKafkaOutput", nil, verify(args([]string{"--strategy", "checkpoint", "--sink", "kafka://" + f.saslSSL + "/" + f.topic}, saslFlag[2:], wait(long))...), 5, "SASL"},
		tc{"offsets show/RefusedSASL", nil, args([]string{"offsets", "show"}, job(), saslFlag, sink(f.mysql), wait(long)), 5, "SASL"},
		tc{"offsets show/RefusedSASLEnv", markerEnv, args([]string{"offsets", "show"}, job(), saslNoPw, sink(f.mysql), wait(long)), 5, "SASL"},
		tc{"offsets reset/RefusedSASLFile", nil, args([]string{"offsets", "reset", "--to", "earliest"}, job(), saslPwFile, sink(f.mysql), wait(long)), 5, "SASL"},
		// bench's sinks.
		tc{"bench/RefusedMySQL", nil, args([]string{"bench", "--out", filepath.Join(dir, "b1"), "--strategies", "txn", "--mysql", f.mysqlRefused}, plain), 5, userKept},
		tc{"bench/UnreachableMySQL", nil, args([]string{"bench", "--out", filepath.Join(dir, "b2"), "--strategies", "txn", "--mysql", f.mysqlDown}, plain), 3, userKept},
		tc{"bench/BadDSNParameters", nil, args([]string{"bench", "--out", filepath.Join(dir, "b3"), "--strategies", "txn", "--mysql", badParams}, plain), 2, "timeout=zz"},
		tc{"bench/RefusedRedis", nil, args([]string{"bench", "--out", filepath.Join(dir, "b4"), "--strategies", "idempotent", "--redis", f.redisRefused}, plain), 5, "mb-no-such-user:xxxxx@"},
		tc{"bench/UnreachableRedis", nil, args([]string{"bench", "--out", filepath.Join(dir, "b5"), "--strategies", "idempotent", "--redis", f.redisDown}, plain), 3, ":xxxxx@127.0.0.1:1"},
	)
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			r := systemtest.Run(t, dir, c.env, 3*time.Minute, c.args...)
			if r.Code != c.code {
				t.Errorf("microbatch %s\nexit %d, want %d\n%s", strings.Join(c.args, " "), r.Code, c.code, r)
			}
			if !strings.Contains(r.Stdout+r.Stderr, c.want) {
				t.Errorf("microbatch %s\nthe output does not show %q\n%s", strings.Join(c.args, " "), c.want, r)
			}
			checkNoSecret(t, r, f.saslPassword)
		})
	}
}
