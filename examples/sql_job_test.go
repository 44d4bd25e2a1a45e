package examples_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies"
)

// sqlJobGroup is what the example's default query keeps per (minute, key):
// amounts in hundredths, so that the expected values are exact integers.
type sqlJobGroup struct {
	events                    int64
	amount, smallest, largest int64
}

// centsText is an amount of hundredths as a record writes it: an integer
// when it is whole (as the built-in events), else a decimal with two
// places, so that the sums mix both as a user's data may.
func centsText(c int64) string {
	if c%100 == 0 {
		return strconv.FormatInt(c/100, 10)
	}
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

// TestSQLJob runs the sql-job example's default windowed query (per minute
// and key: COUNT, SUM, MIN, MAX of amount) into MariaDB; it is killed
// between batches, then inside a partition's open transaction with its
// groups written, and run again. Every (minute, key) row then equals the
// one computed here from what was produced, exactly, keys differing only
// by case or a trailing space stay rows of their own, and the two bad
// records are dead-lettered once each. A double-counted batch shows up as
// a wrong count and sum.
func TestSQLJob(t *testing.T) {
	bin := binary(t, "sql-job")
	dsn := mariaDB.dsn(t)
	brokers := startDevBroker(t, 3)
	topic := uniqueName("sqlev")
	if err := kafkautil.EnsureTopic(brokers, topic, 3); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	const minute = int64(60_000)
	base := int64(1_700_000_040_000) // a minute boundary
	type win struct {
		start int64
		key   string
	}
	want := map[win]sqlJobGroup{}
	// "k0", "K0" and "k0 " are three groups: the table's keys are bytes.
	keyset := []string{"k0", "K0", "k0 ", "k1", "k2", "k3"}
	keys, values := make([]string, 0, n+2), make([]string, 0, n+2)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		k := keyset[rng.IntN(len(keyset))]
		ts := base + rng.Int64N(10*minute) // ten minutes
		cents := rng.Int64N(200_001) - 100_000
		if i%3 != 0 {
			cents -= cents % 100 // two thirds whole, as the built-in events
		}
		keys = append(keys, k)
		values = append(values, fmt.Sprintf(`{"id":%d,"key":%q,"amount":%s,"ts":%d}`, i, k, centsText(cents), ts))
		w := win{ts - ts%minute, k}
		g, ok := want[w]
		if !ok {
			g.smallest, g.largest = cents, cents
		}
		g.events++
		g.amount += cents
		g.smallest, g.largest = min(g.smallest, cents), max(g.largest, cents)
		want[w] = g
	}
	bad := []string{
		"not an event",
		fmt.Sprintf(`{"id":%d,"key":"k1","amount":"12","ts":%d}`, n, base), // a string in SUM
	}
	keys, values = append(keys, "bad", "k1"), append(values, bad...)
	produce(t, brokers, topic, keys, values)
	produced := map[string]bool{}
	for w := range want {
		produced[w.key] = true
	}
	for _, k := range []string{"k0", "K0", "k0 "} {
		if !produced[k] {
			t.Fatalf("no event with key %q: the test can't show it stays its own row", k)
		}
	}

	table, job := uniqueName("per_minute"), uniqueName("sqljob")
	w := openSQL(t, dsn)
	t.Cleanup(func() { w.DB().Exec("DROP TABLE " + table) })
	sql := "INSERT INTO " + table + " SELECT TUMBLE(ts, '1m') AS minute, `key`, COUNT(*) AS events, " +
		"SUM(amount) AS amount, MIN(amount) AS smallest, MAX(amount) AS largest FROM " + topic +
		" GROUP BY minute, `key`"
	args := []string{"-brokers", strings.Join(brokers, ","), "-sink", dsn, "-job", job, "-sql", sql,
		"-max-batch", "300", "-idle", "1s", "-interval", "50ms", "-instance-id", "sqljob-1"}
	// Killed between batches, through its test hook: when the third batch
	// is planned, before it read or wrote anything. Then the 7th time a
	// partition's groups are written in its open transaction, its offset
	// not yet: in the 3rd batch of that run, as the 3 partitions reach that
	// point once a batch.
	between := startEnv(t, []string{"SQL_JOB_CRASH_AT=" + strategies.CrashAfterPlan + ":3"}, bin, args...).waitKilled(60 * time.Second)
	if !strings.Contains(between, "table:  "+table) {
		t.Fatalf("run killed between batches printed no plan for table %s:\n%s", table, between)
	}
	if c := len(regexp.MustCompile(`(?m)^batch \d+ committed`).FindAllString(between, -1)); c != 2 {
		t.Fatalf("run killed by its hook when its 3rd batch was planned committed %d batches, want 2:\n%s", c, between)
	}
	crashed := startEnv(t, []string{"SQL_JOB_CRASH_AT=" + strategies.CrashAfterWriteBeforeOffsets + ":7"}, bin, args...).waitKilled(60 * time.Second)
	if !strings.Contains(crashed, "test hook: SIGKILL") || !strings.Contains(crashed, " committed") {
		t.Fatalf("run killed by its hook after writing:\n%s", crashed)
	}
	t.Logf("run killed by its hook after writing:\n%s", crashed)
	last := start(t, bin, args...)
	out := last.wait(60 * time.Second)
	t.Logf("last run: %v\n%s", time.Since(last.started), out)
	m := regexp.MustCompile(`done: \d+ batches, (\d+) records`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("last run:\n%s", out)
	}
	if rest, _ := strconv.Atoi(m[1]); rest <= 0 || rest >= n {
		t.Fatalf("last run read %d records: the runs before should have committed some, not all of %d", rest, n)
	}

	rows, err := w.DB().Query("SELECT minute, `key`, events, amount, smallest, largest FROM " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[win]bool{}
	for rows.Next() {
		var minuteStart time.Time
		var key []byte
		var events int64
		var amount, smallest, largest string
		if err := rows.Scan(&minuteStart, &key, &events, &amount, &smallest, &largest); err != nil {
			t.Fatal(err)
		}
		w := win{minuteStart.UnixMilli(), string(key)}
		got[w] = true
		g, ok := want[w]
		if !ok {
			t.Errorf("row (%s, %q) was never produced", minuteStart.UTC(), key)
			continue
		}
		if events != g.events {
			t.Errorf("(%s, %q): events = %d, want %d", minuteStart.UTC(), key, events, g.events)
		}
		for _, c := range []struct {
			name string
			got  string
			want int64
		}{{"amount", amount, g.amount}, {"smallest", smallest, g.smallest}, {"largest", largest, g.largest}} {
			r, ok := new(big.Rat).SetString(c.got)
			if !ok || r.Cmp(big.NewRat(c.want, 100)) != 0 {
				t.Errorf("(%s, %q): %s = %s, want %s", minuteStart.UTC(), key, c.name, c.got, centsText(c.want))
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for w := range want {
		if !got[w] {
			t.Errorf("row (%d, %q) missing", w.start, w.key)
		}
	}

	var dead []string
	if err := w.DB().Select(&dead, "SELECT payload FROM mb_dead_letters WHERE job = ? ORDER BY payload", job); err != nil {
		t.Fatal(err)
	}
	slices.Sort(bad)
	if !slices.Equal(dead, bad) {
		t.Errorf("dead letters %q, want %q once each", dead, bad)
	}
}
