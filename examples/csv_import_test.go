package examples_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
