package testutil

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
)

// LeakedGoroutines waits up to wait for goroutines started by Kafka, SQL or
// microbatch code to end, and returns the stacks of those still running.
func LeakedGoroutines(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		// The first goroutine listed is this one.
		for _, g := range strings.Split(string(buf), "\n\n")[1:] {
			if strings.Contains(g, "rcrowley/go-metrics") { // sarama's global meter ticker
				continue
			}
			for _, mark := range []string{"IBM/sarama", "twmb/franz-go", "microbatch/microbatch", "database/sql", "go-sql-driver", "modernc.org/sqlite", "os/exec"} {
				if strings.Contains(g, mark) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Environment variables naming the real servers; scripts/test.sh sets them.
const (
	EnvKafka    = "MICROBATCH_TEST_KAFKA"
	EnvMySQL    = "MICROBATCH_TEST_MYSQL"
	EnvPostgres = "MICROBATCH_TEST_POSTGRES"
	EnvRedis    = "MICROBATCH_TEST_REDIS"

	// EnvPostgresTLS names the same PostgreSQL as a user that may only log
	// in over TLS, with sslmode=verify-full against the services' test CA.
	EnvPostgresTLS = "MICROBATCH_TEST_POSTGRES_TLS"
)

// ServersRequired reports whether this run is one in which the servers
// (and the tools scripts/services.sh installs) are part of the suite: under
// CI, or in the servers' test run (scripts/test.sh sets
// MICROBATCH_TEST_KAFKA and the rest). Then a missing one fails a test
// instead of quietly skipping it.
func ServersRequired() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvKafka) != ""
}

// NeedServer returns the value of env, skipping the test (or benchmark)
// under -short or when the variable is unset, with a message naming it —
// but failing it when unset under CI or while MICROBATCH_TEST_KAFKA is set
// (the servers' run, where every server is expected).
func NeedServer(t testing.TB, env string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real server: skipped with -short")
	}
	v := os.Getenv(env)
	if v == "" && ServersRequired() {
		t.Fatalf("%s is not set: the servers are part of this run (scripts/services.sh start; eval \"$(scripts/services.sh env)\")", env)
	}
	if v == "" {
		t.Skipf("%s is not set: scripts/test.sh starts the servers and sets it (or: scripts/services.sh start; eval \"$(scripts/services.sh env)\")", env)
	}
	return v
}

// EndOffsets returns each partition's high-water mark.
func EndOffsets(t testing.TB, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	ends, err := kafkautil.EndOffsets(brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	return ends
}

// DefaultParallel makes n (or the number of CPUs, if more) the number of
// tests a package runs side by side, unless the command line set
// -test.parallel. Call it from TestMain before m.Run: for packages whose
// tests mostly wait (on processes, kills, group sessions, servers), go
// test's default of one per CPU leaves a 2-core machine idle while the
// package runs out of time.
func DefaultParallel(n int) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if explicit {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(max(n, runtime.GOMAXPROCS(0)))); err != nil {
		panic(fmt.Sprintf("testutil: setting -test.parallel: %v", err))
	}
}
