package systemtest

// A batch whose dead letters outweigh the memory a run may use: every
// strategy must store them all, whole, with the batch, and stay within
// its memory bound.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/filesink"
	"github.com/microbatch/microbatch/writers/redissink"
)

// The bad batch: dlmemBad records of dlmemBadBytes each (under the
// brokers' 1 MiB message limit), which are not JSON, among dlmemGood valid
// events, all in one partition so that one batch holds them all.
// dlmemRSSLimit is far below the batch's dead-letter bytes (~286 MiB): a
// run that holds them (or a checkpoint interval's) in memory reaches
// 225-700 MiB whatever the GC does, one that doesn't stays at 85-130 MiB
// (the bounds: 8 MiB of dead letters per task, 32 records read ahead,
// checkpoint mode's queues, a 4 MiB INSERT, the runtime).
const (
	dlmemBad      = 300
	dlmemBadBytes = 999_999 // a multiple of 3 (see badPayload)
	dlmemGood     = 3000
	dlmemRSSLimit = 170 << 20
	// dlmemGoMemLimit makes the runtime collect before the heap doubles,
	// so that peak RSS follows what the run holds, not GC pacing.
	dlmemGoMemLimit = "64MiB"
)

// dlmemInput is what was produced: the valid events' totals and each bad
// record's payload hashes by offset.
type dlmemInput struct {
	brokers, topic string
	events, amount int64
	bad            map[int64]payloadSums
}

// payloadSums are the SHA-256 of a payload and of its base64 text, which
// Redis and the files hold in JSON: a stored payload is checked by hashing
// it as it is stored (encoding/json and base64 take 0.05-0.3 s per MB under
// the race detector, which this test runs under like the others).
type payloadSums struct{ raw, b64 [sha256.Size]byte }

// badPayload is bad record i: not JSON, dlmemBadBytes long and different
// in every record, so that a payload stored under the wrong offset or cut
// shows. It is a 15-byte header and a 3-byte unit repeated, so its base64
// text is the header's and the unit's repeated, built without encoding a
// megabyte.
func badPayload(i int) (payload []byte, sums payloadSums) {
	head := fmt.Appendf(nil, "not JSON %5d ", i) // 15 bytes
	unit := []byte{byte(i), byte(i >> 8), byte(i*7 + 1)}
	n := (dlmemBadBytes - len(head)) / len(unit)
	payload = append(head, bytes.Repeat(unit, n)...)
	b64 := append(base64.StdEncoding.AppendEncode(nil, head), bytes.Repeat(base64.StdEncoding.AppendEncode(nil, unit), n)...)
	return payload, payloadSums{sha256.Sum256(payload), sha256.Sum256(b64)}
}

// TestDeadLettersBoundedMemory runs each strategy (and checkpoint mode's
// XA and file sinks) over the bad batch as `microbatch run` under
// GOMEMLIMIT: its peak RSS must stay under dlmemRSSLimit, well under the
// batch's dead-letter bytes, and the sink must hold every dead letter whole
// and the valid events' exact totals.
func TestDeadLettersBoundedMemory(t *testing.T) {
	b := StartBroker(t, "--partitions", "1")
	in := produceBadBatch(t, b.Addr)
	mariaDB := func(t *testing.T) string { return testutil.NeedServer(t, testutil.EnvMySQL) }
	redis := func(t *testing.T) string { return testutil.NeedServer(t, testutil.EnvRedis) }
	sqlite := func(t *testing.T) string { return "sqlite://" + t.TempDir() + "/sink.db" }
	files := func(t *testing.T) string { return "file://" + t.TempDir() }
	for _, c := range []struct {
		strategy, sinkName string
		sink               func(t *testing.T) string
		args               []string
	}{
		{string(strategies.StrategyTxn), "mariadb", mariaDB, nil},
		{string(strategies.StrategySingle), "mariadb", mariaDB, nil},
		{string(strategies.StrategyAtLeastOnce), "mariadb", mariaDB, nil},
		{string(strategies.StrategyAtMostOnce), "sqlite", sqlite, nil},
		{string(strategies.StrategyIdempotent), "redis", redis, nil},
		{string(strategies.StrategyCheckpoint), "mariadb-xa", mariaDB, []string{"--checkpoint-interval", "1s"}},
		{string(strategies.StrategyCheckpoint), "files", files, []string{"--checkpoint-interval", "1s"}},
	} {
		t.Run(c.strategy+"/"+c.sinkName, func(t *testing.T) {
			t.Parallel()
			dsn := c.sink(t)
			job := shortJob("dlmem") // the XA sink takes at most 64 characters
			dir := t.TempDir()
			args := []string{"run", "--brokers", in.brokers, "--topic", in.topic, "--job", job, "--sink", dsn,
				"--strategy", c.strategy, "--interval", "200ms", "--until-idle", "1s", "--instance-id", job}
			if c.strategy == string(strategies.StrategyCheckpoint) {
				args = append(args, "--state-dir", dir+"/state")
			}
			args = append(args, c.args...)
			r, rss := runMeasured(t, dir, Env("GOMEMLIMIT="+dlmemGoMemLimit), 5*time.Minute, args...)
			if r.Code != 0 {
				t.Fatalf("run: %s", r)
			}
			t.Logf("peak RSS %.1f MiB for %.1f MiB of dead letters", float64(rss)/(1<<20), float64(dlmemBad*dlmemBadBytes)/(1<<20))
			checkDeadLetters(t, in, dsn, job)
			if rss > dlmemRSSLimit {
				t.Errorf("peak RSS %.1f MiB, want under %d MiB: the batch's dead letters were held in memory",
					float64(rss)/(1<<20), dlmemRSSLimit>>20)
			}
		})
	}
}

// produceBadBatch produces the bad batch into a new one-partition topic.
func produceBadBatch(t *testing.T, brokers string) dlmemInput {
	in := dlmemInput{brokers: brokers, topic: UniqueName(t, "dlmem"), bad: map[int64]payloadSums{}}
	if err := kafkautil.EnsureTopic([]string{brokers}, in.topic, 1); err != nil {
		t.Fatal(err)
	}
	cfg := kafkautil.Config("microbatch-test-dlmem-producer")
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.MaxMessageBytes = 1_040_000 // under kfake's and Kafka's 1 MiB batch limit, over the record
	p, err := sarama.NewSyncProducer([]string{brokers}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	gen := event.NewGenerator(11, 100)
	// Valid events, then half the bad records in a row, and again, then
	// valid events: a run of bad records fills whole chunks of checkpoint
	// mode's pipeline.
	var msgs []*sarama.ProducerMessage
	bad := map[*sarama.ProducerMessage]payloadSums{}
	for block := range 3 {
		for range dlmemGood / 3 {
			id, key, amount := gen.Next()
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in.topic, Partition: 0, Value: sarama.ByteEncoder(event.Append(nil, id, key, amount, 1))})
			in.events++
			in.amount += amount
		}
		if block == 2 {
			break
		}
		for range dlmemBad / 2 {
			payload, sums := badPayload(len(bad))
			m := &sarama.ProducerMessage{Topic: in.topic, Partition: 0, Value: sarama.ByteEncoder(payload)}
			msgs = append(msgs, m)
			bad[m] = sums
		}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("producing: %v", err)
	}
	for m, sum := range bad {
		in.bad[m.Offset] = sum
	}
	if len(in.bad) != dlmemBad {
		t.Fatalf("test set-up: produced %d bad records, want %d", len(in.bad), dlmemBad)
	}
	return in
}

// runMeasured is Run that also returns the command's peak RSS in bytes:
// the high-water mark the kernel keeps for the process (VmHWM), read until
// it exits. Not the child's rusage: a child started by os/exec shares the
// test process's memory until its exec, and Linux counts that peak (the
// test's, which holds the produced batch) in the child's ru_maxrss. The
// mark only grows, and a run stays alive --until-idle after its last batch,
// so the readings catch it.
func runMeasured(t *testing.T, dir string, env []string, timeout time.Duration, args ...string) (Result, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting microbatch %s: %v", strings.Join(args, " "), err)
	}
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peak int64 // read once stopped is closed
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if b, err := os.ReadFile(status); err == nil {
				if m := vmHWM.FindSubmatch(b); m != nil {
					kib, _ := strconv.ParseInt(string(m[1]), 10, 64)
					peak = max(peak, kib<<10)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	close(stop)
	<-stopped
	r := Result{Code: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("microbatch %s did not finish within %s\n%s", strings.Join(args, " "), timeout, r)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running microbatch %s: %v", strings.Join(args, " "), err)
	}
	if peak == 0 {
		t.Fatalf("no VmHWM in %s while microbatch ran: this test needs Linux's /proc", status)
	}
	return r, peak
}

var vmHWM = regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`)

// checkDeadLetters checks that the sink holds every bad record, whole,
// under its partition and offset with a reason, nothing else as a dead
// letter, and the valid events' exact totals.
func checkDeadLetters(t *testing.T, in dlmemInput, dsn, job string) {
	t.Helper()
	ctx := t.Context()
	got := map[int64]bool{}
	check := func(off int64, d dl) {
		want, ok := in.bad[off]
		sum := want.raw
		if d.b64 {
			sum = want.b64
		}
		switch {
		case !ok:
			t.Errorf("dead letter at offset %d is not a bad record (reason %q)", off, d.reason)
		case got[off]:
			t.Errorf("dead letter at offset %d stored twice", off)
		case d.topic != in.topic || d.part != 0:
			t.Errorf("dead letter at offset %d stored as %s/%d, want %s/0", off, d.topic, d.part, in.topic)
		case d.reason == "":
			t.Errorf("dead letter at offset %d has no reason", off)
		case sha256.Sum256(d.payload) != sum:
			t.Errorf("dead letter at offset %d: payload of %d bytes (%.20q…, base64: %t) is not the record's %d bytes", off, len(d.payload), d.payload, d.b64, dlmemBadBytes)
		}
		got[off] = true
	}
	switch {
	case strings.HasPrefix(dsn, "file://"):
		readFileDeadLetters(t, dsn, job, check)
	case strings.HasPrefix(dsn, "redis"):
		readRedisDeadLetters(t, dsn, job, in.topic, check)
	default:
		readSQLDeadLetters(t, dsn, job, check)
	}
	if len(got) != len(in.bad) {
		t.Errorf("%d of the %d bad records are stored as dead letters", len(got), len(in.bad))
	}
	tot, _, err := strategies.ReadTotals(ctx, dsn, job)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Events != in.events || !tot.AmountIs(in.amount) {
		t.Errorf("totals events=%d amount=%d, want %d and %d", tot.Events, tot.Amount, in.events, in.amount)
	}
}

// dl is a dead letter as a sink stored it.
type dl struct {
	topic, reason string
	part          int32
	payload       []byte // raw, or base64 if b64
	b64           bool
}

// readFileDeadLetters calls check with every dead letter of job in the
// file sink dsn.
func readFileDeadLetters(t *testing.T, dsn, job string, check func(off int64, d dl)) {
	t.Helper()
	err := filesink.Read(strings.TrimPrefix(dsn, "file://"), job, func(line []byte) error {
		if !bytes.HasPrefix(line, []byte(`{"dead_letter":`)) {
			return nil
		}
		meta, b64, ok := cutPayload(line, "}}")
		var o struct {
			DL struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
				Reason    string `json:"reason"`
			} `json:"dead_letter"`
		}
		if !ok || json.Unmarshal(meta, &o) != nil {
			return fmt.Errorf("dead letter line %.200q…", line)
		}
		check(o.DL.Offset, dl{topic: o.DL.Topic, part: o.DL.Partition, reason: o.DL.Reason, payload: b64, b64: true})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readRedisDeadLetters calls check with every dead letter of job from
// partition 0 of topic in the Redis sink dsn.
func readRedisDeadLetters(t *testing.T, dsn, job, topic string, check func(off int64, d dl)) {
	t.Helper()
	ctx := t.Context()
	r, err := redissink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	key := "mb:{" + job + "}:dead:" + topic + ":0"
	// One field at a time: the hash is larger than the test needs to hold.
	offs, err := r.Client().HKeys(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range offs {
		off, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("%s has field %q", key, f)
		}
		v, err := r.Client().HGet(ctx, key, f).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		meta, b64, ok := cutPayload(v, "}")
		var d struct {
			Reason string `json:"reason"`
		}
		if !ok || json.Unmarshal(meta, &d) != nil {
			t.Fatalf("dead letter %s: %.200q…", f, v)
		}
		check(off, dl{topic: topic, reason: d.Reason, payload: b64, b64: true})
	}
}

// readSQLDeadLetters calls check with every dead letter of job in the SQL
// sink dsn.
func readSQLDeadLetters(t *testing.T, dsn, job string, check func(off int64, d dl)) {
	t.Helper()
	w := sinktest.OpenSQL(t, dsn)
	rows, err := w.DB().QueryContext(t.Context(), `SELECT topic, part, off, reason, payload FROM mb_dead_letters WHERE job = ?`, job)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d dl
		var off int64
		if err := rows.Scan(&d.topic, &d.part, &off, &d.reason, &d.payload); err != nil {
			t.Fatal(err)
		}
		check(off, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
}

// cutPayload splits a dead letter's JSON whose last field is
// "payload":"<base64>" and which ends with closing into the JSON without
// that field and the base64 text.
func cutPayload(v []byte, closing string) (meta, b64 []byte, ok bool) {
	const field = `,"payload":"`
	i := bytes.LastIndex(v, []byte(field))
	if i < 0 || !bytes.HasSuffix(v, []byte(`"`+closing)) {
		return nil, nil, false
	}
	return append(v[:i:i], closing...), v[i+len(field) : len(v)-len(closing)-1], true
}
