package main_test

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// marker is the password the every-command tests give where a server
// refuses it, or where nothing answers: it must never be printed.
const marker = "S3CRETPW"

// failingServers is what the every-command tests point the CLI at: the
// real servers, with the marker password where a server refuses it, and
// addresses where nothing answers.
type failingServers struct {
	dir   string
	kafka string // plaintext Apache Kafka
	topic string // an existing topic on it
	// Kafka's SASL_SSL listener: its user, real password and CA.
	saslSSL, saslUser, saslPassword, ca string
	mysql                               string // the real MariaDB, right password
	mysqlRefused, mysqlDown             string // the marker as password; at the real server, at a closed port
	mysqlUser                           string // mysql without a password (for --sink-password-file)
	redisRefused, redisDown             string // a user Redis doesn't know, the marker as password; a closed port
}

func newFailingServers(t *testing.T) failingServers {
	t.Helper()
	sec := needSecureServers(t)
	f := failingServers{dir: t.TempDir(), kafka: testutil.NeedServer(t, testutil.EnvKafka), topic: systemtest.UniqueName(t, "codes"),
		saslSSL: sec.kafka, saslUser: sec.user, saslPassword: sec.password, ca: sec.ca,
		mysql: testutil.NeedServer(t, testutil.EnvMySQL)}
	u, err := url.Parse(f.mysql)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), marker)
	f.mysqlRefused = u.String()
	u.User = url.User(u.User.Username())
	f.mysqlUser = u.String()
	f.mysqlDown = "mysql://mb:" + marker + "@127.0.0.1:1/mbtest"
	r, err := url.Parse(testutil.NeedServer(t, testutil.EnvRedis))
	if err != nil {
		t.Fatal(err)
	}
	r.User = url.UserPassword("mb-no-such-user", marker) // WRONGPASS
	f.redisRefused = r.String()
	f.redisDown = "redis://:" + marker + "@127.0.0.1:1/0"
	if err := kafkautil.EnsureTopic([]string{f.kafka}, f.topic, 2); err != nil {
		t.Fatal(err)
	}
	systemtest.Binary(t) // built before the runs
	return f
}

// Kafka as each failure sees it: command-line flags (with --brokers).
func (f failingServers) plainKafka() []string { return []string{"--brokers", f.kafka} }

func (f failingServers) saslKafka(password string, tls bool) []string {
	a := []string{"--brokers", f.saslSSL, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-user", f.saslUser, "--kafka-password", password}
	if tls {
		a = append(a, "--kafka-tls", "--kafka-ca-file", f.ca)
	}
	return a
}

// failure is one way of failing: how Kafka is reached (its flags, --brokers
// first), the sink, the topic, and the exit code every command must give.
type failure struct {
	name  string
	kafka []string
	sink  string // "" for the good MariaDB
	topic string // "" for the existing topic
	code  int
	// --connect-timeout: short where nothing answers; elsewhere longer
	// than any answer can take on a busy machine, so that only a refusal
	// taken for silence (a wait until the timeout, exit 3) fails.
	wait string
}

// TestExitCodesEveryCommand: the same failure gives the same exit code in
// every subcommand that meets it — the codes docs/operations.md lists once — and
// a refusal is never mistaken for a server that does not answer.
func TestExitCodesEveryCommand(t *testing.T) {
	t.Parallel()
	f := newFailingServers(t)
	const long, short = "90s", "1s"
	failures := []failure{
		{name: "WrongMySQLPassword", kafka: f.plainKafka(), sink: f.mysqlRefused, code: 5, wait: long},
		{name: "RedisWRONGPASS", kafka: f.plainKafka(), sink: f.redisRefused, code: 5, wait: long},
		{name: "WrongSASLPassword", kafka: f.saslKafka(marker, true), code: 5, wait: long},
		// The broker closes a plaintext client at its TLS port during the
		// SASL handshake, as it closes a wrong password.
		{name: "PlaintextClientAtSASLSSLPort", kafka: f.saslKafka(f.saslPassword, false), code: 5, wait: long},
		{name: "UnknownTopic", kafka: f.plainKafka(), topic: systemtest.UniqueName(t, "missing"), code: 4, wait: long},
		{name: "KafkaUnreachable", kafka: []string{"--brokers", "127.0.0.1:1"}, code: 3, wait: short},
		{name: "MySQLUnreachable", kafka: f.plainKafka(), sink: f.mysqlDown, code: 3, wait: short},
		{name: "RedisUnreachable", kafka: f.plainKafka(), sink: f.redisDown, code: 3, wait: short},
	}
	// Each subcommand, as it meets a failure: nil where it never does
	// (produce has no sink; verify reads Kafka only for a kafka:// output;
	// bench has no Kafka security flags).
	commands := []struct {
		name string
		args func(fl failure, job string) []string
	}{
		{"run", func(fl failure, job string) []string {
			return append(runArgs(f, fl, job), "--until-idle", "1s")
		}},
		{"run --strategy checkpoint", func(fl failure, job string) []string {
			// Its sinks are SQL (XA), Kafka and files: a Kafka failure is
			// met by the input and the kafka:// output alike.
			a := []string{"run", "--strategy", "checkpoint", "--job", job, "--topic", f.topic, "--until-idle", "1s",
				"--state-dir", filepath.Join(f.dir, job+"-state")}
			if fl.topic != "" {
				a[6] = fl.topic
			}
			switch {
			case isRedis(fl.sink):
				return nil
			case fl.sink == "":
				a = append(a, "--sink", "kafka://"+fl.kafka[1]+"/"+job+"-out")
			default:
				a = append(a, "--sink", fl.sink)
			}
			return append(a, fl.kafka...)
		}},
		{"run --dry-run", func(fl failure, job string) []string {
			return append(runArgs(f, fl, job), "--dry-run")
		}},
		{"produce", func(fl failure, job string) []string {
			if fl.sink != "" || fl.topic != "" { // produce creates its topic
				return nil
			}
			return append([]string{"produce", "--topic", f.topic, "--count", "10", "--partitions", "2"}, fl.kafka...)
		}},
		{"verify", func(fl failure, job string) []string {
			a := []string{"verify", "--job", job, "--expect-events", "1", "--expect-amount", "1"}
			if fl.sink != "" {
				if isRedis(fl.sink) {
					a = append(a, "--strategy", "idempotent")
				}
				return append(a, "--sink", fl.sink)
			}
			// A Kafka failure: verify meets it reading checkpoint mode's
			// kafka:// output, with the same security flags.
			topic := f.topic
			if fl.topic != "" {
				topic = fl.topic
			}
			return append(append(a, "--strategy", "checkpoint", "--sink", "kafka://"+fl.kafka[1]+"/"+topic), fl.kafka[2:]...)
		}},
		{"run --sql", func(fl failure, job string) []string {
			return sqlArgs(runArgs(f, fl, job), "--until-idle", "1s")
		}},
		{"verify --sql", func(fl failure, job string) []string {
			// Like offsets show, it reads the job's positions from the
			// sink (Redis: the idempotent strategy's) and the topic.
			return sqlArgs(append([]string{"verify"}, runArgs(f, fl, job)[1:]...))
		}},
		{"offsets show", func(fl failure, job string) []string {
			return offsetsArgs(f, fl, job, "show")
		}},
		{"offsets reset", func(fl failure, job string) []string {
			return offsetsArgs(f, fl, job, "reset", "--to", "earliest")
		}},
		{"bench", func(fl failure, job string) []string {
			if len(fl.kafka) > 2 || fl.topic != "" { // no security flags; bench makes its own topics
				return nil
			}
			a := append([]string{"bench", "--out", filepath.Join(f.dir, job), "--events", "1000"}, fl.kafka...)
			switch {
			case fl.sink == "":
				// Kafka's failure: a sink the bench would use.
				return append(a, "--mysql", "sqlite://"+filepath.Join(f.dir, job+".db"))
			case isRedis(fl.sink):
				return append(a, "--strategies", "idempotent", "--redis", fl.sink)
			}
			return append(a, "--strategies", "txn", "--mysql", fl.sink)
		}},
	}
	for _, fl := range failures {
		for _, c := range commands {
			job := systemtest.UniqueName(t, "codes")
			args := c.args(fl, job)
			if args == nil {
				continue
			}
			if c.name != "bench" { // which does not wait
				args = append(args, "--connect-timeout", fl.wait)
			}
			t.Run(fl.name+"/"+strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				t.Parallel()
				r := systemtest.Run(t, f.dir, nil, 3*time.Minute, args...)
				if r.Code != fl.code {
					t.Errorf("microbatch %s\nexit %d, want %d\n%s", strings.Join(args, " "), r.Code, fl.code, r)
				}
				checkNoSecret(t, r, f.saslPassword)
				// One error line: no client library prints its own
				// (go-redis did: "redis: connection pool: failed to dial").
				if strings.Contains(r.Stderr, "connection pool") {
					t.Errorf("microbatch %s\nstderr holds a client library's own lines:\n%s", strings.Join(args, " "), r.Stderr)
				}
			})
		}
	}

	// The dev broker's address taken: a configuration error, as a taken
	// --metrics-addr is for run.
	t.Run("ListenAddressTaken/broker", func(t *testing.T) {
		t.Parallel()
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		r := systemtest.Run(t, f.dir, nil, time.Minute, "broker", "--listen", busy.Addr().String())
		if r.Code != 2 || !strings.Contains(r.Stderr, busy.Addr().String()) {
			t.Errorf("broker --listen on a taken address: want exit 2 naming it; %s", r)
		}
	})
}

// runArgs are run's flags for meeting failure fl.
func runArgs(f failingServers, fl failure, job string) []string {
	a := []string{"run", "--job", job, "--topic", f.topic}
	if fl.topic != "" {
		a[4] = fl.topic
	}
	sink := fl.sink
	if sink == "" {
		sink = f.mysql
	}
	if isRedis(sink) {
		a = append(a, "--strategy", "idempotent")
	}
	return append(append(a, "--sink", sink), fl.kafka...)
}

// offsetsArgs are offsets' flags for meeting failure fl.
func offsetsArgs(f failingServers, fl failure, job, sub string, extra ...string) []string {
	a := append([]string{"offsets", sub}, extra...)
	run := runArgs(f, fl, job)[1:] // the same --job, --topic, --strategy, --sink and Kafka
	return append(a, run...)
}

func isRedis(dsn string) bool { return strings.HasPrefix(dsn, "redis://") }

// checkNoSecret fails t if r's output holds the marker or one of secrets.
func checkNoSecret(t *testing.T, r systemtest.Result, secrets ...string) {
	t.Helper()
	for _, s := range append([]string{marker}, secrets...) {
		if strings.Contains(r.Stdout, s) || strings.Contains(r.Stderr, s) {
			t.Errorf("the output shows the password %q:\n%s", s, r)
		}
	}
}

// sqlArgs turns run's flags (runArgs) into those of a SQL job on the same
// topic: the query's FROM names it, in place of --topic. Its table is the
// job's (a SQL table belongs to one job), created by the run that reaches
// it.
func sqlArgs(args []string, extra ...string) []string {
	var out []string
	topic, table := "", ""
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--topic":
			topic = args[i+1]
			i++
			continue
		case "--job":
			h := fnv.New64a()
			h.Write([]byte(args[i+1]))
			table = fmt.Sprintf("exit_codes_sql_%016x", h.Sum64())
		}
		out = append(out, args[i])
	}
	q := "INSERT INTO " + table + " SELECT `key`, COUNT(*) AS events FROM `" + topic + "` GROUP BY `key`"
	return append(append(out, "--sql", q), extra...)
}
