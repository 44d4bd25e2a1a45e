package examples_test

// The examples are built once (go build -o) and run as users would run
// them, against the servers of the test suite (MICROBATCH_TEST_MYSQL,
// MICROBATCH_TEST_KAFKA) or an in-process dev broker, and killed with
// SIGKILL mid-way to show that a restart ends exactly once.

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

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
