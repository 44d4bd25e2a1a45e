package main_test

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microbatch/microbatch/benchmarks"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestBenchPostgres runs `microbatch bench --postgres` on a tiny
// configuration — pg-txn and the pg-at-least-once control, the throughput
// and fault phases, one random kill plus the crash points — and checks
// that the PostgreSQL rows ran into PostgreSQL and say so in the JSON, the
// table and the chart, that pg-txn stayed exact while the control
// duplicated, and that the recorded command hides the password.
func TestBenchPostgres(t *testing.T) {
	t.Parallel()
	// A database of its own: the shared one's tables may belong to
	// another test's user.
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	systemtest.Binary(t)
	out := filepath.Join(t.TempDir(), "results")
	start := time.Now()
	r := systemtest.Run(t, t.TempDir(), nil, 5*time.Minute, "bench", "--strategies", "pg-txn,pg-at-least-once", "--phases", "throughput,faults",
		"--events", "3000", "--crashes", "1", "--interval", "200ms", "--baseline-events", "100", "--postgres", dsn, "--out", out)
	t.Logf("bench took %s", time.Since(start).Round(time.Millisecond))
	if r.Code != 0 {
		t.Fatalf("microbatch bench: %s", r)
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res benchmarks.Results
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if !strings.Contains(res.Machine.Postgres, "PostgreSQL") {
		t.Errorf("machine.postgres = %q, want the server's version", res.Machine.Postgres)
	}
	if u, _ := url.Parse(dsn); u != nil {
		if pw, ok := u.User.Password(); ok && strings.Contains(string(raw), pw) {
			t.Errorf("results.json holds the PostgreSQL password (command %q)", res.Command)
		}
	}
	if !strings.Contains(res.Command, "--postgres postgres://") {
		t.Errorf("command %q does not record --postgres", res.Command)
	}
	if len(res.Rows) != 2 || len(res.Errors) != 0 {
		t.Fatalf("want 2 rows and no errors, got %d rows, errors %v", len(res.Rows), res.Errors)
	}
	for _, row := range res.Rows {
		c, f := row.Clean, row.Fault
		if row.Sink != "PostgreSQL" {
			t.Errorf("%s: sink %q, want PostgreSQL", row.Name, row.Sink)
		}
		if c.EventsPerSec <= 0 || !c.Exact || !f.Ran || f.Kills != 1 || f.PointsReached != len(f.Points) {
			t.Errorf("%s: clean run %+v, fault run %+v", row.Name, c, f)
		}
		switch row.Name {
		case "pg-txn":
			if row.Strategy != "txn" || f.Duplicates != 0 || f.Losses != 0 || f.Verdict != "OK: exactly once" {
				t.Errorf("pg-txn (strategy %s) after crashes: %d duplicates, %d losses, %q", row.Strategy, f.Duplicates, f.Losses, f.Verdict)
			}
		case "pg-at-least-once":
			if f.Duplicates == 0 || f.Losses != 0 {
				t.Errorf("the control came out with %d duplicates, %d losses: the kills missed", f.Duplicates, f.Losses)
			}
		default:
			t.Errorf("unexpected row %q", row.Name)
		}
	}
	if res.FaultValidity != "valid" {
		t.Errorf("fault run %s: %s", res.FaultValidity, res.FaultNote)
	}
	target := false
	for _, tg := range res.Targets {
		if strings.HasPrefix(tg.Name, "pg-txn / pg-at-least-once") {
			target = tg.Status == "met" || tg.Status == "missed"
		}
	}
	if !target {
		t.Errorf("no judged pg-txn / pg-at-least-once target in %+v", res.Targets)
	}
	md, _ := os.ReadFile(filepath.Join(out, "results.md"))
	for _, want := range []string{"| pg-txn | PostgreSQL | exactly-once |", "| pg-at-least-once | PostgreSQL |", "PostgreSQL: PostgreSQL "} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(out, "chart.svg"))
	if !strings.Contains(string(svg), "pg-txn") || !strings.Contains(string(svg), "pg-at-least-once") {
		t.Errorf("chart.svg does not name the PostgreSQL rows")
	}
}

// TestBenchPostgresConfigErrors: --postgres takes PostgreSQL only, and
// the pg-* names are known; bad values exit 2 before anything starts.
func TestBenchPostgresConfigErrors(t *testing.T) {
	systemtest.Binary(t)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"mysql DSN as postgres", []string{"--postgres", "mysql://u:pw@db/app"}, []string{"postgres", "not PostgreSQL"}},
		{"bad postgres DSN", []string{"--postgres", "oracle://x"}, []string{"postgres", "oracle"}},
		{"XA on PostgreSQL", []string{"--strategies", "pg-checkpoint-xa"}, []string{`"pg-checkpoint-xa"`, "pg-checkpoint-2pc"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := systemtest.Run(t, dir, nil, time.Minute, append([]string{"bench", "--out", filepath.Join(dir, "out")}, c.args...)...)
			checkConfigError(t, r, c.want...)
			if strings.Contains(r.Stderr, ":pw@") {
				t.Errorf("the refusal prints the password:\n%s", r)
			}
		})
	}
}
