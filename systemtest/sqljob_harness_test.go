package systemtest

// A SQL job's input as another program writes it: not microbatch's event
// generator but JSON the way Python's json.dumps spaces it (", ", ": "),
// with fields in varying order, nested objects, decimals, escapes, extra
// fields, arrays and nulls, epoch-ms and RFC 3339 timestamps, group keys
// that only bytes tell apart — and, mixed in, records each query must
// dead-letter.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies"
)

// sqlKeys are the group keys (the customer's id, and `key`): each one a
// row of its own, since the table's keys are bytes — case, a trailing
// space, é composed (NFC) and decomposed (NFD), quotes and a tab, a number
// (its text), and 200 characters.
var sqlKeys = []string{
	"A", "a", "a ", "\u00e9", "e\u0301", "caf\u00e9", `x"y\z`, "tab\tkey", "42",
	strings.Repeat("long-\u00fc-key/", 200/len([]rune("long-\u00fc-key/"))) + strings.Repeat("z", 200%len([]rune("long-\u00fc-key/"))),
}

var sqlPrices = []string{"12.5", "0.1", "19.99", "3", "0.25", "100.125", "7.05", "0.3", "1.000000001"}

// sqlBadEvery: one record in this many is bad, of each kind in turn.
const sqlBadEvery = 29

// sqlInput writes one job's records, deterministically from its seed, and
// counts the bad ones.
type sqlInput struct {
	brokers []string
	topic   string
	rng     *rand.Rand
	n, bad  int64 // records written, of them bad
	// msg, when set, makes record i's message instead (row jobs' input:
	// keys, tombstones, repeated records); it counts the bad ones.
	msg func(i int64) *sarama.ProducerMessage
}

func newSQLInput(t *testing.T, brokers, topic string, seed uint64) *sqlInput {
	in := &sqlInput{brokers: kafkautil.SplitBrokers(brokers), topic: topic, rng: rand.New(rand.NewPCG(seed, seed^0x5e1))}
	if err := kafkautil.EnsureTopic(in.brokers, topic, crashPartitions); err != nil {
		t.Fatal(err)
	}
	return in
}

// produce writes n more records, round-robin over the partitions (or as
// msg makes them).
func (in *sqlInput) produce(t *testing.T, n int64) {
	t.Helper()
	cfg := kafkautil.Config("sqljob-input")
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(in.brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, 0, n)
	for range n {
		i := in.n
		in.n++
		if in.msg != nil {
			msgs = append(msgs, in.msg(i))
			continue
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in.topic, Partition: int32(i % crashPartitions), Value: sarama.ByteEncoder(in.record(i))})
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("producing %d records to %s: %v", n, in.topic, err)
	}
}

// record is record i: good, or every sqlBadEvery-th one of the kinds every
// query here must dead-letter (and none filters out: kind "buy", qty > 0).
func (in *sqlInput) record(i int64) []byte {
	r := in.rng
	if i%sqlBadEvery == sqlBadEvery-1 {
		in.bad++
		switch (i / sqlBadEvery) % 4 {
		case 0: // not JSON: cut off
			return []byte(fmt.Sprintf(`{"id": %d, "kind": "buy", "qty": 2, "customer": {"id": "a"`, i))
		case 1: // a string where a SUM (and WHERE qty > 0) wants a number
			return []byte(fmt.Sprintf(`{"kind": "buy", "id": %d, "customer": {"id": "A"}, "key": "a", "qty": "three", "amount": "lots", "price": 1.5, "ts": 1796119200000}`, i))
		case 2: // no group key at all
			return []byte(fmt.Sprintf(`{"id": %d, "kind": "buy", "qty": 2, "amount": 3, "price": 2.5, "ts": 1796119200000}`, i))
		default: // keys of half a surrogate pair
			return []byte(fmt.Sprintf(`{"id": %d, "kind": "buy", "qty": 2, "amount": 3, "price": 2.5, "ts": 1796119200000, "customer": {"id": "\ud800"}, "key": "\udc00x"}`, i))
		}
	}
	ascii := r.IntN(2) == 0 // json.dumps' default ensure_ascii, or not
	kind := []string{"buy", "buy", "view", "view", "return"}[r.IntN(5)]
	// Event time drifts forward ~100 ms a record; one in ten is up to
	// three minutes late (its window is long past: it still counts).
	ts := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(i)*97*time.Millisecond + time.Duration(r.IntN(5000))*time.Millisecond)
	if r.IntN(10) == 0 {
		ts = ts.Add(-time.Duration(r.IntN(180_000)) * time.Millisecond)
	}
	var tsJSON string
	switch r.IntN(3) {
	case 0:
		tsJSON = strconv.FormatInt(ts.UnixMilli(), 10)
	case 1:
		tsJSON = jsonText(ts.UTC().Format("2006-01-02T15:04:05.000Z"), ascii)
	default:
		tsJSON = jsonText(ts.In(time.FixedZone("", 2*3600)).Format(time.RFC3339Nano), ascii)
	}
	customerKey := sqlKeys[r.IntN(len(sqlKeys))]
	customerID := jsonText(customerKey, ascii)
	if customerKey == "42" && r.IntN(2) == 0 {
		customerID = "42" // a number: its text is the key, as the string's
	}
	customer := [][2]string{{"id", customerID}, {"tier", jsonText([]string{"gold", "silver", "bronze"}[r.IntN(3)], ascii)}}
	if r.IntN(3) == 0 {
		customer = append(customer, [2]string{"since", "null"})
	}
	fields := [][2]string{
		{"id", strconv.FormatInt(i, 10)},
		{"kind", jsonText(kind, ascii)},
		{"qty", strconv.Itoa(r.IntN(6))}, // 0: filtered out by qty > 0
		{"price", sqlPrices[r.IntN(len(sqlPrices))]},
		{"amount", strconv.Itoa(r.IntN(251) - 50)},
		{"ts", tsJSON},
		{"customer", jsonObject(r, customer)},
		{"key", jsonText(sqlKeys[r.IntN(len(sqlKeys))], ascii)},
	}
	if r.IntN(2) == 0 {
		fields = append(fields, [2]string{"tags", `["new", ` + jsonText("caf\u00e9", ascii) + `, 3, null]`})
	}
	if r.IntN(3) == 0 {
		fields = append(fields, [2]string{"note", "null"})
	}
	if r.IntN(4) == 0 {
		fields = append(fields, [2]string{"meta", `{"src": "web", "n": [1, 2.5, {"x": null}], "ok": true}`})
	}
	return []byte(jsonObject(r, fields))
}

// jsonObject writes fields in a random order, spaced as json.dumps does.
func jsonObject(r *rand.Rand, fields [][2]string) string {
	r.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = strconv.Quote(f[0]) + ": " + f[1]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// jsonText is s as json.dumps writes a string: with ascii, every non-ASCII
// character as \uXXXX (UTF-16), else as UTF-8.
func jsonText(s string, ascii bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		case c < utf8.RuneSelf || !ascii:
			b.WriteRune(c)
		case c > 0xffff:
			r1, r2 := utf16.EncodeRune(c)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// sqlCrashJob runs, kills and restarts one SQL job, and judges it with
// verify --sql.
type sqlCrashJob struct {
	t                *testing.T
	bin              string
	strategy         strategies.Strategy
	brokers, sink    string
	job, query       string
	common, runExtra []string // flags of run and verify; of run only
	in               *sqlInput
	logDir           string
	rng              *rand.Rand
	kills, landed    int
	// inspect (checkpoint mode) reports whether the sink holds work of the
	// killed run that recovery must finish (prepared XA branches, write-ahead
	// entries not applied).
	inspect func() (bool, string)
}

// ckptStartedMarker is the line of a checkpoint-mode run done with start-up
// and recovery.
const ckptStartedMarker = `msg="job started"`

// sqlQuery is a job's statement; table and topic fill its %[1]s and %[2]s.
type sqlQuery struct {
	name, stmt string
}

func newSQLCrashJob(t *testing.T, strategy strategies.Strategy, brokers, sink string, q sqlQuery, seed uint64) *sqlCrashJob {
	j := &sqlCrashJob{t: t, bin: Binary(t), strategy: strategy, brokers: brokers, sink: sink,
		job: shortJob("sq"), logDir: t.TempDir(), rng: ckptRNG(t)}
	topic := UniqueName(t, "sql")
	j.query = fmt.Sprintf(q.stmt, "t_"+q.name, topic)
	j.in = newSQLInput(t, brokers, topic, seed)
	j.common = []string{"--brokers", brokers, "--job", j.job, "--sink", sink, "--strategy", string(strategy), "--sql", j.query}
	if strategy == strategies.StrategyCheckpoint {
		j.common = append(j.common, "--state-dir", j.stateDir())
	} else {
		// Batches small enough that a kill finds one open: the one flag
		// here a user would not set.
		j.runExtra = []string{"--max-batch-records", strconv.Itoa(sqlMaxBatch)}
	}
	j.runExtra = append(j.runExtra, "--log-level", "debug")
	return j
}

func (j *sqlCrashJob) stateDir() string { return filepath.Join(j.logDir, "state") }

func (j *sqlCrashJob) args(more ...string) []string {
	return slices.Concat([]string{"run"}, j.common, j.runExtra, more)
}

// crashAt runs the job with MICROBATCH_CRASH_AT=point:n and waits for it
// to kill itself there.
func (j *sqlCrashJob) crashAt(point string, n int) Result {
	t := j.t
	j.kills++
	r := Run(t, j.logDir, Env(fmt.Sprintf("MICROBATCH_CRASH_AT=%s:%d", point, n)), 3*time.Minute, j.args("--until-idle", "2s")...)
	_ = os.WriteFile(filepath.Join(j.logDir, fmt.Sprintf("run-%02d-%s.log", j.kills, point)), []byte(r.Stderr), 0o644)
	if r.Code != -1 {
		t.Fatalf("the run was not killed at %s:%d (exit %d): the point was never reached\n%s", point, n, r.Code, r)
	}
	return r
}

// randomKill runs the job and SIGKILLs it at a random moment, and
// returns whether the kill landed inside a batch, as the run's log says.
// Every fifth kill comes wherever a random delay ends, start-up and
// recovery included. The others land inside a batch by construction:
//
//   - a micro-batch run is stopped (SIGSTOP) at the first batch start
//     after the delay, and killed if its log shows that batch open; else
//     it goes on to the next, sqlAlignTries times at most;
//   - in checkpoint mode a checkpoint interval is the batch: its records
//     are in the sink's open transaction until the checkpoint completes
//     (SQL sinks complete one in milliseconds, too short to aim at; the
//     crash points hit those). The run is killed a random part of the
//     interval after its start, when it has read the records added
//     before it and no checkpoint has completed.
func (j *sqlCrashJob) randomKill() bool {
	t := j.t
	j.kills++
	delay := sqlMinDelay + time.Duration(j.rng.Int64N(int64(sqlMaxDelay-sqlMinDelay)+1))
	plan := stopPlan{delay: delay}
	inside := func(log string) bool { return parseBatchLog(log).open }
	how := "random"
	switch {
	case j.kills%5 == 0:
	case j.strategy == strategies.StrategyCheckpoint:
		how = "after start-up"
		inside = func(log string) bool { st := parseCheckpointLog(log); return st.started && st.completed == 0 }
		// No delay: the first "job started" line, tens of milliseconds
		// after the process starts (it connects first).
		plan = stopPlan{marker: ckptStartedMarker, lag: sqlMinCkptLag + time.Duration(j.rng.Int64N(int64(sqlMaxCkptLag-sqlMinCkptLag)+1)),
			inside: inside, tries: 1}
		delay = plan.lag
	default:
		how = "aligned"
		plan.marker, plan.lag = batchStartedMarker, time.Duration(j.rng.Int64N(int64(sqlMaxAlignLag)+1))
		plan.inside, plan.tries = inside, sqlAlignTries
	}
	logPath := filepath.Join(j.logDir, fmt.Sprintf("run-%02d.log", j.kills))
	ps, tries := stopRunAt(t, j.bin, j.args(), logPath, plan, syscall.SIGKILL)
	if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("run %d ended with %v, not by our SIGKILL (log %s)", j.kills, ps, logPath)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	in := inside(string(log))
	if in {
		j.landed++
	}
	detail := ""
	if j.inspect != nil {
		_, detail = j.inspect()
	}
	t.Logf("kill %2d after %4dms (%s, try %d): inside=%v %s", j.kills, delay.Milliseconds(), how, tries, in, detail)
	return in
}

// watchSink sets inspect for a checkpoint-mode job's sink.
func (j *sqlCrashJob) watchSink(runExtra []string) {
	if j.strategy != strategies.StrategyCheckpoint {
		return
	}
	w := sinktest.OpenSQL(j.t, j.sink)
	switch {
	case slices.Contains(runExtra, string(strategies.SinkModeWAL)):
		j.inspect = walInspect(j.t, w, j.stateDir(), j.job)
	case w.Dialect() == offsets.Postgres:
		j.inspect = pgPreparedInspect(j.t, w, j.job)
	default:
		j.inspect = xaInspect(j.t, w, j.job)
	}
}

// checkpointCrashAt kills a checkpoint-mode run at point in its first
// checkpoint, which holds the records added before it. With mustLand the
// sink must then hold the run's work for recovery to finish; a run whose
// crash left none is run again, ckptPointTries times at most.
func (j *sqlCrashJob) checkpointCrashAt(point string, mustLand bool) {
	for try := 1; ; try++ {
		j.in.produce(j.t, sqlCkptTopUp)
		j.crashAt(point, 1)
		landed, detail := j.inspect()
		j.t.Logf("killed at %s:1: left work for recovery=%v %s", point, landed, detail)
		if !mustLand || landed {
			return
		}
		if try == ckptPointTries {
			j.t.Errorf("no crash at %s left work for recovery in %d runs: the crash missed its window (logs in %s)", point, try, j.logDir)
			return
		}
	}
}

// topUp adds records before a run: for a micro-batch strategy enough that
// the run is still busy when a kill after delay comes (it takes one batch
// an interval at most), for checkpoint mode (which reads all there is at
// once) n.
func (j *sqlCrashJob) topUp(n int64) {
	t := j.t
	if j.strategy != strategies.StrategyCheckpoint {
		maxBatches := int64(sqlMaxDelay/strategies.DefaultInterval) + 3 + sqlAlignTries
		need := maxBatches * sqlMaxBatch * crashPartitions
		lag := sum(testutil.EndOffsets(t, j.in.brokers, j.in.topic)) - sum(storedNext(t, string(j.strategy), j.sink, j.brokers, j.job, j.in.topic))
		n = max(need-lag, 0)
	}
	if n > 0 {
		j.in.produce(t, n)
	}
}

// drain runs the job until it is idle.
func (j *sqlCrashJob) drain() {
	t := j.t
	start := time.Now()
	r := Run(t, j.logDir, nil, 5*time.Minute, j.args("--until-idle", "2s")...)
	if r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	t.Logf("final run: %s", time.Since(start).Round(time.Millisecond))
}

// sqlVerdict is what verify --sql printed.
type sqlVerdict struct {
	Result
	records, rejected, dead             int64
	matching, missing, extra, different int64
	countsHigh, countsLow               int // listed differences of the count column n
}

var (
	verifyRecordsRE  = regexp.MustCompile(`records read\s+(\d+)`)
	verifyRejectedRE = regexp.MustCompile(`rejected\s+(\d+)\s+\(dead letters the sink holds for the job: (\d+)\)`)
	verifyCountRE    = func(what string) *regexp.Regexp { return regexp.MustCompile(`(?m)^\s+` + what + `\s+(\d+)`) }
	// A listed difference of the count column: key, "n", want, got.
	verifyNDiffRE = regexp.MustCompile(`(?m)^\s+.*[")]\s+n\s+(\d+)\s+(\d+)\s*$`)
)

// verify runs verify --sql, listing every difference.
func (j *sqlCrashJob) verify(extra ...string) sqlVerdict {
	t := j.t
	r := Run(t, j.logDir, nil, 3*time.Minute, slices.Concat([]string{"verify"}, j.common, []string{"--show", "100000"}, extra)...)
	if r.Code != 0 && r.Code != 1 {
		t.Fatalf("verify --sql: %s", r)
	}
	v := sqlVerdict{Result: r}
	num := func(re *regexp.Regexp, i int) int64 {
		m := re.FindStringSubmatch(r.Stdout)
		if m == nil {
			t.Fatalf("verify --sql printed no %s:\n%s", re, r)
		}
		n, _ := strconv.ParseInt(m[i], 10, 64)
		return n
	}
	v.records = num(verifyRecordsRE, 1)
	v.rejected, v.dead = num(verifyRejectedRE, 1), num(verifyRejectedRE, 2)
	v.matching = num(verifyCountRE("matching"), 1)
	v.missing = num(verifyCountRE("missing"), 1)
	v.extra = num(verifyCountRE("extra"), 1)
	v.different = num(verifyCountRE("different"), 1)
	for _, m := range verifyNDiffRE.FindAllStringSubmatch(r.Stdout, -1) {
		want, _ := strconv.ParseInt(m[1], 10, 64)
		got, _ := strconv.ParseInt(m[2], 10, 64)
		switch {
		case got > want:
			v.countsHigh++
		case got < want:
			v.countsLow++
		}
	}
	t.Logf("verify --sql: exit %d; %d records, %d rejected, %d dead letters; groups: %d matching, %d missing, %d extra, %d different (counts listed too high %d, too low %d)",
		r.Code, v.records, v.rejected, v.dead, v.matching, v.missing, v.extra, v.different, v.countsHigh, v.countsLow)
	return v
}

// requireExact fails the test unless verify --sql passed with every
// record read, every group matching, and exactly the bad records
// rejected and dead-lettered.
func (j *sqlCrashJob) requireExact(v sqlVerdict) {
	t := j.t
	if v.Code != 0 || v.missing+v.extra+v.different != 0 || v.matching == 0 || !strings.Contains(v.Stdout, "OK: all") {
		t.Errorf("verify --sql: the sink differs from the query recomputed (logs in %s)\n%s", j.logDir, v.Result)
	}
	if v.records != j.in.n {
		t.Errorf("verify --sql read %d records up to the job's positions, %d were produced", v.records, j.in.n)
	}
	if v.rejected != j.in.bad || v.dead != j.in.bad {
		t.Errorf("%d bad records produced; the recomputation rejected %d and the sink holds %d dead letters", j.in.bad, v.rejected, v.dead)
	}
}
