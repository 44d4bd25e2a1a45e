package systemtest

// Private servers: a MariaDB or Redis process of one test, on its own
// loopback port and data directory, which the test SIGKILLs and starts
// again on the same data and port (the shared servers of scripts/services.sh
// must never be killed: other tests use them).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the readiness probe
	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/testutil"
)

const (
	// privateStartWait bounds a private server's start (a restart after
	// SIGKILL includes InnoDB's crash recovery).
	privateStartWait = time.Minute
	// privateDB is the database the private MariaDB's sink writes to.
	privateDB = "mb"
)

// serverBinary is the path of the first of names found (on PATH, or as
// a path), as scripts/services.sh looks for them. A missing one skips the
// test, naming it — or fails it when the servers are part of the run
// (testutil.ServersRequired: under CI, or with MICROBATCH_TEST_KAFKA set),
// since scripts/services.sh installs them.
func serverBinary(t *testing.T, what string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found (looked for %s): scripts/services.sh installs it", what, strings.Join(names, ", "))
	if testutil.ServersRequired() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// freePort is a loopback TCP port nobody listens on now, below the
// kernel's ephemeral range: a server restarted on it after a 20 s outage
// must find it still free, and a port of that range may meanwhile have
// become the local end of any process's outgoing connection.
func freePort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const first = 20_000
	if low <= first+1000 {
		low = 30_000
	}
	for range 100 {
		port := first + rand.IntN(low-first)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free loopback port in [%d, %d) after 100 tries", first, low)
	return 0
}

// privateServer is one server process the test owns. start runs argv
// and waits until ready says it answers; kill SIGKILLs it. Cleanup kills
// it if it is still running.
type privateServer struct {
	name  string
	argv  []string
	log   string // the server's own log file, shown when it fails to start
	port  int
	ready func(ctx context.Context) error

	cmd    *exec.Cmd
	exited chan struct{}
}

func newPrivateServer(t *testing.T, name string, port int, log string, ready func(context.Context) error, argv ...string) *privateServer {
	s := &privateServer{name: name, argv: argv, log: log, port: port, ready: ready}
	t.Cleanup(func() {
		if s.running() {
			s.kill(t)
		}
	})
	return s
}

func (s *privateServer) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// start starts the server and returns once it answers.
func (s *privateServer) start(t *testing.T) {
	t.Helper()
	out, err := os.OpenFile(s.log+".out", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the child has its own copy
	s.cmd = exec.Command(s.argv[0], s.argv[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", s.name, err)
	}
	s.exited = make(chan struct{})
	cmd, exited := s.cmd, s.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(privateStartWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.ready(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited during its start (%v): %v\n%s", s.name, cmd.ProcessState, err, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within %s: %v\n%s", s.name, privateStartWait, err, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill SIGKILLs the server and waits until it is gone.
func (s *privateServer) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("killing %s: %v", s.name, err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still there 30s after SIGKILL", s.name)
	}
}

func (s *privateServer) logTail() string {
	var b strings.Builder
	for _, f := range []string{s.log, s.log + ".out"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "--- %s:\n%s\n", f, tail(lines, 20))
	}
	return b.String()
}

// startPrivateMariaDB initializes a datadir in a temp directory and starts
// mariadbd on it, on a free loopback port, without grant tables (no TLS,
// no users: root without a password). It returns the server and the sink
// DSN of a database in it.
func startPrivateMariaDB(t *testing.T) (*privateServer, string) {
	t.Helper()
	mariadbd := serverBinary(t, "MariaDB's server", "mariadbd", "mysqld", "/usr/sbin/mariadbd", "/usr/sbin/mysqld", "/usr/libexec/mariadbd")
	installDB := serverBinary(t, "MariaDB's datadir initializer", "mariadb-install-db", "mysql_install_db", "/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db")
	dir := t.TempDir()
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	// A unix socket's path is limited to ~100 bytes: t.TempDir's may be
	// longer.
	sockDir, err := os.MkdirTemp("", "mbmy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	var userOpt []string
	if os.Geteuid() == 0 {
		userOpt = []string{"--user=root"}
	}
	small := []string{"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M"}
	// Its own tmpdir: bootstraps side by side in one tmpdir trip over
	// each other's temporary tables ("Unknown table 'mysql.tmp_user_sys'").
	install := exec.Command(installDB, append(append([]string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, userOpt...), small...)...)
	install.Env = append(os.Environ(), "TMPDIR="+tmp)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", installDB, err, out)
	}
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	log := filepath.Join(dir, "error.log")
	ready := func(ctx context.Context) error {
		db, err := sql.Open("mysql", "root@tcp("+addr+")/?timeout=2s")
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+privateDB)
		return err
	}
	argv := append(append([]string{mariadbd, "--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp,
		"--socket=" + filepath.Join(sockDir, "s"), "--pid-file=" + filepath.Join(dir, "mariadbd.pid"), "--log-error=" + log,
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-grant-tables",
		"--innodb-flush-log-at-trx-commit=1", "--max-connections=200",
		"--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci"}, userOpt...), small...)
	s := newPrivateServer(t, "MariaDB on "+addr, port, log, ready, argv...)
	s.start(t)
	return s, "mysql://root@" + addr + "/" + privateDB
}

// startPrivateRedis starts redis-server on a free loopback port with an
// append-only file synced at every write, so what it acknowledged
// survives SIGKILL. It returns the server and the sink DSN.
func startPrivateRedis(t *testing.T) (*privateServer, string) {
	t.Helper()
	bin := serverBinary(t, "Redis's server", "redis-server")
	dir := t.TempDir()
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	log := filepath.Join(dir, "redis.log")
	ready := func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second})
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	s := newPrivateServer(t, "Redis on "+addr, port, log, ready, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", dir, "--daemonize", "no", "--logfile", log)
	s.start(t)
	return s, "redis://" + addr + "/0"
}
