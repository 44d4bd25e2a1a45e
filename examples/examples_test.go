package examples_test

// The examples are built once (go build -o) and run as users would run
// them, against the servers of the test suite (MICROBATCH_TEST_MYSQL,
// MICROBATCH_TEST_KAFKA) or an in-process dev broker, and killed with
// SIGKILL mid-way to show that a restart ends exactly once.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/devbroker"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

var examples = []string{"quickstart", "csv-import", "kafka-enrich", "custom-agg"}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the path of example name, building all of them on the
// first call.
func binary(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the examples: skipped with -short")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "mb-examples-"); buildErr != nil {
			return
		}
		// Compiled as docker/Dockerfile compiles the image (cgo off,
		// -trimpath), like cmd/microbatch's tests: the suite then compiles
		// the dependencies once for the three packages' binaries.
		args := []string{"build", "-trimpath", "-o", buildDir + string(filepath.Separator)}
		for _, e := range examples {
			args = append(args, "./"+e)
		}
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, name)
}

// proc is a running example; its stdout lines arrive on lines.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	lines   chan string
	out     bytes.Buffer // all of stdout, once done
	stderr  bytes.Buffer
	mu      sync.Mutex
	done    chan struct{}
	err     error
	started time.Time
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, bin, args...)
}

// startEnv is start with env (NAME=value) added to the environment: the
// examples' test hooks.
func startEnv(t *testing.T, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 10000), done: make(chan struct{}), started: time.Now()}
	p.cmd = exec.Command(bin, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// killAfter waits for n stdout lines matching re, then SIGKILLs the
// process. It fails if the process ends first.
func (p *proc) killAfter(n int, re string) {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	seen := 0
	p.killWhen(fmt.Sprintf("%d lines /%s/", n, re), func(l string) bool {
		if rx.MatchString(l) {
			seen++
		}
		return seen == n
	})
}

// killWhen passes the stdout lines to done until it says yes, then
// SIGKILLs the process. It fails if the process ends first.
func (p *proc) killWhen(what string, done func(line string) bool) {
	p.t.Helper()
	const wait = 2 * time.Minute // a bound for a busy machine
	timeout := time.After(wait)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				p.t.Fatalf("%s ended (%v) before %s it was to be killed after\nstdout:\n%s\nstderr:\n%s",
					p.cmd.Path, p.err, what, p.stdout(), p.stderr.String())
			}
			if !done(l) {
				continue
			}
		case <-timeout:
			p.t.Fatalf("%s: no %s within %s\nstdout:\n%s", p.cmd.Path, what, wait, p.stdout())
		}
		break
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
	p.t.Logf("killed %s after %s (%v after its start)", filepath.Base(p.cmd.Path), what, time.Since(p.started).Round(time.Millisecond))
}

// waitExit reads the rest of the output and waits up to limit for the
// process to end; past that it kills it and fails the test, saying it did
// not do what (finish, kill itself) in time.
func (p *proc) waitExit(limit time.Duration, what string) {
	p.t.Helper()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s did not %s within %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, what, limit, p.stdout(), p.stderr.String())
	}
}

// wait waits for the process to exit successfully and returns its stdout.
func (p *proc) wait(limit time.Duration) string {
	p.t.Helper()
	p.waitExit(limit, "finish")
	if p.err != nil {
		p.t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, p.err, p.stdout(), p.stderr.String())
	}
	return p.stdout()
}

// waitKilled waits for the process to die of SIGKILL, sent by itself (a
// test hook), and returns its stdout.
func (p *proc) waitKilled(limit time.Duration) string {
	p.t.Helper()
	p.waitExit(limit, "kill itself")
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		p.t.Fatalf("%s ended with %v, want killed by SIGKILL (its test hook)\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, p.err, p.stdout(), p.stderr.String())
	}
	p.t.Logf("%s killed itself (%v after its start)", filepath.Base(p.cmd.Path), time.Since(p.started).Round(time.Millisecond))
	return p.stdout()
}

// waitFail waits for the process to exit with an error and returns its
// stderr.
func (p *proc) waitFail(limit time.Duration) string {
	p.t.Helper()
	p.waitExit(limit, "finish")
	if p.err == nil {
		p.t.Fatalf("%s succeeded, want it to fail\nstdout:\n%s", p.cmd.Path, p.stdout())
	}
	return p.stderr.String()
}

func (p *proc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

var nameSeq atomic.Int64

// uniqueName is a table, job or topic name unique to this run.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

func startDevBroker(t *testing.T, partitions int32) []string {
	t.Helper()
	b, err := devbroker.Start(devbroker.Options{Listen: "127.0.0.1:0", Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// produce writes values to topic, spread over its partitions by key.
func produce(t *testing.T, brokers []string, topic string, keys, values []string) {
	t.Helper()
	conf := kafkautil.Config("examples-test-producer")
	conf.Producer.Return.Successes = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	p, err := sarama.NewSyncProducer(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(values))
	for i, v := range values {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(keys[i]), Value: sarama.StringEncoder(v)}
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 1000)
		if err := p.SendMessages(msgs[:n]); err != nil {
			t.Fatal(err)
		}
		msgs = msgs[n:]
	}
}

func eventJSON(id int64, key string, amount, ts int64) string {
	return fmt.Sprintf(`{"id":%d,"key":%q,"amount":%d,"ts":%d}`, id, key, amount, ts)
}

func openSQL(t *testing.T, dsn string) *sqlsink.Writer {
	t.Helper()
	w, err := sqlsink.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

type sqlTarget struct {
	name string
	dsn  func(t *testing.T) string
}

var (
	mariaDB = sqlTarget{"MariaDB", func(t *testing.T) string { return testutil.NeedServer(t, testutil.EnvMySQL) }}
	sqlite  = sqlTarget{"SQLite", func(t *testing.T) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "example.db")
	}}
)

// TestQuickstart runs the built-in job through strategies.Run.
func TestQuickstart(t *testing.T) {
	bin := binary(t, "quickstart")
	brokers := startDevBroker(t, 3)
	topic := uniqueName("qs")
	if err := kafkautil.EnsureTopic(brokers, topic, 3); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	keys, values := make([]string, n), make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("k%d", i%17)
		values[i] = eventJSON(int64(i), keys[i], int64(i%100), 1_700_000_000_000)
	}
	produce(t, brokers, topic, keys, values)
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "qs.db")
	p := start(t, bin, "-brokers", strings.Join(brokers, ","), "-topic", topic, "-sink", dsn)
	out := p.wait(30 * time.Second)
	if !strings.Contains(out, "done: ") || !strings.Contains(out, fmt.Sprintf(" %d records, 0 dead letters", n)) {
		t.Fatalf("quickstart output:\n%s", out)
	}
}

// csvFile writes a CSV of orders with a few bad lines and returns the
// expected per-customer orders and cents, and the bad lines' numbers.
func csvFile(t *testing.T, lines int) (path string, want map[string][2]int64, bad []int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString("order_id,customer_id,amount\n")
	want = map[string][2]int64{}
	badLines := map[int]string{
		101:   "this is not csv",
		7777:  "7777,c-1,12.345",
		20000: "20000,,3.00",
		33333: "33333,c-2,abc",
		49000: "49000,c-3,1.00,extra",
	}
	for i := 2; i <= lines; i++ { // line 1 is the header
		if s, ok := badLines[i]; ok {
			b.WriteString(s + "\n")
			bad = append(bad, int64(i))
			continue
		}
		cust := fmt.Sprintf("c-%d", rng.IntN(500))
		cents := rng.Int64N(100_000)
		fmt.Fprintf(&b, "%d,%s,%d.%02d\n", i, cust, cents/100, cents%100)
		w := want[cust]
		want[cust] = [2]int64{w[0] + 1, w[1] + cents}
	}
	path = filepath.Join(t.TempDir(), "orders.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, want, bad
}

// TestCSVImport loads a CSV, is killed between two chunks, then (a test
// hook) inside a chunk's transaction with its rows written, and loads the
// rest on the third run: the table's sums equal the file's exactly and
// every bad line is dead-lettered once.
//
// The first run pauses an hour after each chunk, so the kill after its
// first chunk lands in that pause however late the test reads the line.
func TestCSVImport(t *testing.T) {
	bin := binary(t, "csv-import")
	file, want, bad := csvFile(t, 50_000)
	for _, target := range []sqlTarget{mariaDB, sqlite} {
		t.Run(target.name, func(t *testing.T) {
			dsn := target.dsn(t)
			job, table := uniqueName("csvjob"), uniqueName("csv_totals")
			w := openSQL(t, dsn)
			t.Cleanup(func() { w.DB().Exec("DROP TABLE " + table) })
			args := []string{"-dsn", dsn, "-file", file, "-job", job, "-table", table, "-chunk", "2000"}

			// Killed between chunks, in a pause.
			first := start(t, bin, append(args, "-pause", "1h")...)
			first.killAfter(1, `^chunk \d+ committed`)
			if strings.Contains(first.stdout(), "done:") {
				t.Fatal("the first run finished before it was killed")
			}
			committed := regexp.MustCompile(`(?m)^chunk (\d+) committed`)
			m := committed.FindAllStringSubmatch(first.stdout(), -1)
			lastChunk, _ := strconv.Atoi(m[len(m)-1][1])
			// Killed by its test hook inside a chunk's transaction, with the
			// chunk's rows and dead letters written: chunk 10 (lines
			// 18001-20000) holds bad line 20000. The first run may have
			// committed one chunk more than it printed.
			const crash = 10
			if lastChunk+1 >= crash {
				t.Fatalf("the first run went too far (chunk %d) for the crash in chunk %d", lastChunk, crash)
			}
			out := startEnv(t, []string{fmt.Sprintf("CSV_IMPORT_CRASH_IN_CHUNK=%d", crash)}, bin, args...).waitKilled(60 * time.Second)
			if !strings.Contains(out, "test hook: SIGKILL") || strings.Contains(out, fmt.Sprintf("chunk %d committed", crash)) {
				t.Fatalf("second run was not killed in chunk %d:\n%s", crash, out)
			}
			// The third run starts with that chunk and finishes.
			out = start(t, bin, args...).wait(60 * time.Second)
			if !strings.Contains(out, "resuming orders.csv at byte ") || strings.Contains(out, "at byte 0 ") || !strings.Contains(out, "done:") {
				t.Fatalf("third run did not resume and finish:\n%s", out)
			}
			if m := committed.FindStringSubmatch(out); m == nil || m[1] != strconv.Itoa(crash) {
				t.Fatalf("third run did not start with chunk %d:\n%s", crash, out)
			}
			// A fourth run finds nothing to do.
			out = start(t, bin, args...).wait(30 * time.Second)
			if strings.Contains(out, "committed") {
				t.Fatalf("fourth run committed more:\n%s", out)
			}

			got := map[string][2]int64{}
			rows, err := w.DB().Query("SELECT customer_id, orders, amount_cents FROM " + table)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var c string
				var n, cents int64
				if err := rows.Scan(&c, &n, &cents); err != nil {
					t.Fatal(err)
				}
				got[c] = [2]int64{n, cents}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("%d customers, want %d", len(got), len(want))
			}
			for c, v := range want {
				if got[c] != v {
					t.Errorf("customer %s: (orders, cents) = %v, want %v", c, got[c], v)
				}
			}
			var offs []int64
			drows, err := w.DB().Query("SELECT off FROM mb_dead_letters WHERE job = ? AND topic = ? ORDER BY off", job, "orders.csv")
			if err != nil {
				t.Fatal(err)
			}
			defer drows.Close()
			for drows.Next() {
				var o int64
				if err := drows.Scan(&o); err != nil {
					t.Fatal(err)
				}
				offs = append(offs, o)
			}
			if fmt.Sprint(offs) != fmt.Sprint(bad) {
				t.Errorf("dead-lettered lines %v, want %v", offs, bad)
			}
		})
	}
}

// TestKafkaEnrich: the consume-transform-produce example, killed twice,
// ends with every input event in the output exactly once.
func TestKafkaEnrich(t *testing.T) {
	for _, target := range []struct {
		name    string
		brokers func(t *testing.T) []string
	}{
		{"ApacheKafka", func(t *testing.T) []string { return kafkautil.SplitBrokers(testutil.NeedServer(t, testutil.EnvKafka)) }},
		{"kfake", func(t *testing.T) []string { return startDevBroker(t, 3) }},
	} {
		t.Run(target.name, func(t *testing.T) { testKafkaEnrich(t, target.brokers(t)) })
	}
}

func testKafkaEnrich(t *testing.T, brokers []string) {
	bin := binary(t, "kafka-enrich")
	in, out := uniqueName("enrich-in"), uniqueName("enrich-out")
	if err := kafkautil.EnsureTopic(brokers, in, 3); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	keys, values := make([]string, 0, n+2), make([]string, 0, n+2)
	for i := range n {
		k := fmt.Sprintf("k%d", i%31)
		keys = append(keys, k)
		values = append(values, eventJSON(int64(i), k, int64(i%1000), 1_700_000_000_000+int64(i)))
	}
	bad := []string{"not json", `{"id":1,"amount":2}`}
	keys = append(keys, "bad1", "bad2")
	values = append(values, bad...)
	// The first run gets only a quarter of the input, so that it can't
	// get far however late the test reads its output; the rest comes
	// before the second.
	const first = n / 4
	produce(t, brokers, in, keys[:first], values[:first])

	args := []string{"-brokers", strings.Join(brokers, ","), "-in", in, "-out", out,
		"-group", uniqueName("enrich-group"), "-txn-id", uniqueName("enrich-txn"), "-batch", "250"}
	// Killed in a pause between transactions, once its transactions
	// committed offsets on every partition (a line names the partitions
	// of its transaction); then, through its test hook, in its 3rd
	// transaction with the records and offsets flushed to the brokers, not
	// committed: the next run's Recover aborts that one.
	run1 := start(t, bin, append(args, "-pause", "30ms")...)
	committedOn := map[string]bool{}
	committedRE := regexp.MustCompile(`^txn \d+ committed: .*next offsets map\[(.*)\]`)
	run1.killWhen("offsets committed on all 3 partitions", func(l string) bool {
		if m := committedRE.FindStringSubmatch(l); m != nil {
			for _, po := range strings.Fields(m[1]) {
				part, _, _ := strings.Cut(po, ":")
				committedOn[part] = true
			}
		}
		return len(committedOn) == 3
	})
	if c := strings.Count(run1.stdout(), "has no committed offset for partition"); c != 3 {
		t.Fatalf("first run: %d partitions said to start at the earliest, want 3:\n%s", c, run1.stdout())
	}
	produce(t, brokers, in, keys[first:], values[first:])
	crashed := startEnv(t, []string{"KAFKA_ENRICH_CRASH_BEFORE_COMMIT=3"}, bin, args...).waitKilled(60 * time.Second)
	if c := len(regexp.MustCompile(`(?m)^txn \d+ committed`).FindAllString(crashed, -1)); c != 2 || !strings.Contains(crashed, "test hook: SIGKILL") {
		t.Fatalf("run killed by its hook committed %d transactions, want 2:\n%s", c, crashed)
	}
	checkResumed(t, crashed)
	last := start(t, bin, append(args, "-idle", "1500ms")...).wait(60 * time.Second)
	if !strings.Contains(last, "idle: done") {
		t.Fatalf("last run:\n%s", last)
	}
	checkResumed(t, last)

	seen := map[int64]int{}
	for _, v := range readCommitted(t, brokers, out, n) {
		var e struct {
			ID     int64  `json:"id"`
			Amount int64  `json:"amount"`
			Tier   string `json:"tier"`
		}
		if err := json.Unmarshal([]byte(v), &e); err != nil || e.Tier == "" {
			t.Fatalf("output record %q: %v", v, err)
		}
		seen[e.ID]++
	}
	dups, lost := 0, 0
	for i := range int64(n) {
		switch c := seen[i]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	if dups != 0 || lost != 0 || len(seen) != n {
		t.Fatalf("output: %d duplicates, %d lost, %d distinct ids; want 0, 0, %d", dups, lost, len(seen), n)
	}
	dl := readCommitted(t, brokers, out+"-dead-letters", len(bad))
	slices.Sort(dl)
	if wantDL := slices.Sorted(slices.Values(bad)); !slices.Equal(dl, wantDL) {
		t.Fatalf("dead letters %q, want %q once each", dl, wantDL)
	}
	// The aborted transaction's records are in the log: a read_uncommitted
	// reader sees them.
	all := readTopic(t, brokers, out, n+1, sarama.ReadUncommitted)
	if len(all) <= n {
		t.Fatalf("read_uncommitted, the output holds %d records: want more than the %d committed (the aborted transaction's)", len(all), n)
	}
	t.Logf("output: %d records committed, %d in all (read_uncommitted)", n, len(all))

	// A new group (as after its offsets expired) over an output holding
	// committed records: the program refuses to start from the earliest.
	args = []string{"-brokers", strings.Join(brokers, ","), "-in", in, "-out", out,
		"-group", uniqueName("enrich-group"), "-txn-id", uniqueName("enrich-txn"), "-idle", "500ms"}
	if e := start(t, bin, args...).waitFail(30 * time.Second); !strings.Contains(e, "-from-start") {
		t.Fatalf("a run with a group without offsets over a used output: %s, want a refusal", e)
	}
}

// checkResumed checks the "starting at" line of a restarted kafka-enrich:
// every partition starts from a committed offset.
func checkResumed(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`starting at \S+ map\[(.*)\]`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no starting line:\n%s", out)
	}
	offs := regexp.MustCompile(`(\d+):(-?\d+)`).FindAllStringSubmatch(m[1], -1)
	if len(offs) != 3 {
		t.Fatalf("starting at %s: want 3 partitions\n%s", m[1], out)
	}
	for _, o := range offs {
		if o[2] == "-1" {
			t.Fatalf("restart: partition %s has no committed offset (starting at %s)\n%s", o[1], m[1], out)
		}
	}
}

// readCommitted reads every partition of topic from the start, isolation
// read_committed, until want records and a quiet time, or 2 minutes.
func readCommitted(t *testing.T, brokers []string, topic string, want int) []string {
	t.Helper()
	return readTopic(t, brokers, topic, want, sarama.ReadCommitted)
}

// readTopic is readCommitted with the isolation level given.
func readTopic(t *testing.T, brokers []string, topic string, want int, isolation sarama.IsolationLevel) []string {
	t.Helper()
	conf := kafkautil.Config("examples-test-reader")
	conf.Consumer.IsolationLevel = isolation
	conf.Consumer.MaxWaitTime = 50 * time.Millisecond
	c, err := sarama.NewConsumer(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1000)
	for _, p := range parts {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				got <- string(m.Value)
			}
		}()
	}
	var out []string
	// Bounds for a busy machine: reading ends 300ms after the last record
	// once want arrived, so a correct run never waits for them.
	limit := time.After(2 * time.Minute)
	for {
		quiet := 300 * time.Millisecond
		if len(out) < want {
			quiet = time.Minute
		}
		select {
		case v := <-got:
			out = append(out, v)
		case <-time.After(quiet):
			return out
		case <-limit:
			return out
		}
	}
}

// TestCustomAgg: per-minute counts by key of a user-defined transform,
// killed between batches, then inside a partition's open transaction with
// its rows written, and run again, equal the expected ones exactly.
func TestCustomAgg(t *testing.T) {
	bin := binary(t, "custom-agg")
	brokers := startDevBroker(t, 3)
	topic := uniqueName("agg")
	if err := kafkautil.EnsureTopic(brokers, topic, 3); err != nil {
		t.Fatal(err)
	}
	const n = 9000
	const minute = int64(60_000)
	base := int64(1_700_000_040_000) // a minute boundary
	type win struct {
		start int64
		key   string
	}
	want := map[win][2]int64{}
	keys, values := make([]string, 0, n+1), make([]string, 0, n+1)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range n {
		k := fmt.Sprintf("k%d", rng.IntN(7))
		ts := base + rng.Int64N(10*minute) // ten minutes
		amount := 1 + rng.Int64N(1000)
		keys = append(keys, k)
		values = append(values, eventJSON(int64(i), k, amount, ts))
		w := win{ts - ts%minute, k}
		want[w] = [2]int64{want[w][0] + 1, want[w][1] + amount}
	}
	keys, values = append(keys, "bad"), append(values, "not an event")
	produce(t, brokers, topic, keys, values)

	dsn := sqlite.dsn(t)
	table, job := uniqueName("minute_totals"), uniqueName("aggjob")
	args := []string{"-brokers", strings.Join(brokers, ","), "-topic", topic, "-sink", dsn, "-job", job,
		"-table", table, "-max-batch", "300", "-idle", "1s", "-interval", "50ms", "-instance-id", "agg-1"}
	// Killed between batches, through its test hook: when the third batch
	// is planned, before it read or wrote anything. Then at the 7th time
	// a partition's rows are written in its open transaction, its offset
	// not yet: in the 3rd batch of that run, as the 3 partitions reach
	// that point once a batch.
	between := startEnv(t, []string{"CUSTOM_AGG_CRASH_AT=" + strategies.CrashAfterPlan + ":3"}, bin, args...).waitKilled(60 * time.Second)
	if c := len(regexp.MustCompile(`(?m)^batch \d+ committed`).FindAllString(between, -1)); c != 2 {
		t.Fatalf("run killed by its hook when its 3rd batch was planned committed %d batches, want 2:\n%s", c, between)
	}
	crashed := startEnv(t, []string{"CUSTOM_AGG_CRASH_AT=" + strategies.CrashAfterWriteBeforeOffsets + ":7"}, bin, args...).waitKilled(60 * time.Second)
	if !strings.Contains(crashed, "test hook: SIGKILL") || !strings.Contains(crashed, " committed") {
		t.Fatalf("run killed by its hook:\n%s", crashed)
	}
	t.Logf("run killed by its hook:\n%s", crashed)
	last := start(t, bin, args...)
	out := last.wait(60 * time.Second)
	t.Logf("last run: %v\n%s", time.Since(last.started), out)
	if !strings.Contains(out, "done:") {
		t.Fatalf("last run:\n%s", out)
	}
	m := regexp.MustCompile(`done: \d+ batches, (\d+) records`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("last run:\n%s", out)
	}
	if rest, _ := strconv.Atoi(m[1]); rest <= 0 || rest >= n {
		t.Fatalf("last run read %d records: the runs before should have committed some, not all of %d", rest, n)
	}

	w := openSQL(t, dsn)
	got := map[win][2]int64{}
	rows, err := w.DB().Query("SELECT window_start, event_key, events, amount FROM " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var w win
		var c, a int64
		if err := rows.Scan(&w.start, &w.key, &c, &a); err != nil {
			t.Fatal(err)
		}
		got[w] = [2]int64{c, a}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d windows, want %d", len(got), len(want))
	}
	for w, v := range want {
		if got[w] != v {
			t.Errorf("window %d key %s: (events, amount) = %v, want %v", w.start, w.key, got[w], v)
		}
	}
	var dead int
	if err := w.DB().QueryRow("SELECT COUNT(*) FROM mb_dead_letters WHERE job = ?", job).Scan(&dead); err != nil || dead != 1 {
		t.Errorf("dead letters = %d (%v), want 1", dead, err)
	}
}

// TestExternalModule builds every example as a program of another module
// that requires this one (a replace directive to this checkout), as a
// user's would: the public API is enough for all of them.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build: skipped with -short")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/myimport\n\ngo 1.26\n\nrequire github.com/microbatch/microbatch v0.0.0\n\nreplace github.com/microbatch/microbatch => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	// Every example, each a main package of the outside module.
	files := map[string]string{filepath.Join(root, "go.sum"): "go.sum"}
	for _, e := range examples {
		files[filepath.Join(e, "main.go")] = filepath.Join(e, "main.go")
	}
	for src, dst := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "bin")+string(filepath.Separator), "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in a module outside: %v\n%s", err, out)
	}
}

// TestExamplesUsePublicAPI: examples are what users copy, and users can't
// import internal packages.
func TestExamplesUsePublicAPI(t *testing.T) {
	for _, e := range examples {
		files, err := filepath.Glob(filepath.Join(e, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", e, err)
		}
		for _, f := range files {
			pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range pf.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(e, "README.md")); err != nil {
			t.Errorf("%s has no README.md", e)
		}
	}
}
