package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/systemtest"
)

// TestOffsetsShowPositions: what `offsets show` says about positions a
// run can't simply go on from, and that `run` does what it says.
//   - A job with no stored positions: said so, with where a run starts,
//     and the whole log counted as lag (it printed "-" and total lag 0).
//   - A stored offset past the log end: flagged, with run's exit 1 and
//     the reset that fixes it (it showed lag 0 and no warning); run then
//     exits 1 as said, and after the reset it runs.
//   - A stored offset before the log start (records deleted): the same.
//   - A missing topic: exit 4, as docs/operations.md lists for offsets.
//
// run --dry-run shows a position outside the log as run's stop too (it
// showed "nothing to read").
//
// On the dev broker into SQLite, and on Apache Kafka into MariaDB.
func TestOffsetsShowPositions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) (brokers, sink string)
	}{
		{"kfakeToSQLite", func(t *testing.T) (string, string) {
			db := t.TempDir() + "/sink.db"
			// An existing database without tables: no job ever ran here.
			if err := os.WriteFile(db, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return systemtest.StartBroker(t).Addr, "sqlite://" + db
		}},
		{"ApacheKafkaToMariaDB", func(t *testing.T) (string, string) {
			return testutil.NeedServer(t, testutil.EnvKafka), testutil.NeedServer(t, testutil.EnvMySQL)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			brokers, sink := c.setup(t)
			testOffsetsShowPositions(t, brokers, sink)
		})
	}
}

type showPartition struct {
	Partition  int32  `json:"partition"`
	NextOffset *int64 `json:"next_offset"`
	LogStart   int64  `json:"log_start"`
	LogEnd     int64  `json:"log_end"`
	Lag        int64  `json:"lag"`
	Status     string `json:"status"`
	Note       string `json:"note"`
}

type showReport struct {
	Partitions []showPartition `json:"partitions"`
	Lag        int64           `json:"lag"`
	Note       string          `json:"note"`
}

func testOffsetsShowPositions(t *testing.T, brokers, sink string) {
	dir := t.TempDir()
	topic, job := systemtest.UniqueName(t, "t"), systemtest.UniqueName(t, "j")
	common := []string{"--brokers", brokers, "--topic", topic, "--job", job, "--sink", sink}
	cmd := func(args ...string) systemtest.Result {
		t.Helper()
		return systemtest.Run(t, dir, nil, 2*time.Minute, append(args, common...)...)
	}
	mustOK := func(args ...string) string {
		t.Helper()
		r := cmd(args...)
		if r.Code != 0 {
			t.Fatalf("microbatch %s: %s", strings.Join(args, " "), r)
		}
		return r.Stdout
	}
	show := func() (table string, rep showReport) {
		t.Helper()
		if err := json.Unmarshal([]byte(mustOK("offsets", "show", "--json")), &rep); err != nil {
			t.Fatalf("offsets show --json: %v", err)
		}
		if len(rep.Partitions) != 4 {
			t.Fatalf("offsets show: %d partitions, want 4", len(rep.Partitions))
		}
		return mustOK("offsets", "show"), rep
	}
	runIdle := func() systemtest.Result {
		t.Helper()
		return cmd("run", "--interval", "200ms", "--until-idle", "1s")
	}

	events, _ := systemtest.Produce(t, brokers, topic, 9, 0, 2000)

	// No stored positions: the whole log is the lag.
	table, rep := show()
	if !strings.Contains(table, "job "+job+" has no stored positions: a run starts every partition at its earliest offset") ||
		!strings.Contains(table, fmt.Sprintf("total lag %d\n", events)) {
		t.Errorf("offsets show of a job that never ran:\n%s\nwant it to say so and total lag %d", table, events)
	}
	if rep.Lag != events || rep.Note == "" {
		t.Errorf("offsets show --json of a job that never ran: lag %d, note %q; want lag %d and a note", rep.Lag, rep.Note, events)
	}
	for _, p := range rep.Partitions {
		if p.NextOffset != nil || p.Status != "none" || p.Lag != p.LogEnd-p.LogStart {
			t.Errorf("partition without a position: %+v, want no next offset, status none, lag = the whole log", p)
		}
	}
	if r := runIdle(); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}

	// Past the end: as if the topic had been recreated smaller.
	w := sinktest.OpenSQL(t, sink)
	ends := testutil.EndOffsets(t, kafkautil.SplitBrokers(brokers), topic)
	ahead := ends[2] + 1000
	if _, err := w.DB().Exec(`UPDATE mb_offsets SET next_offset = ? WHERE job = ? AND topic = ? AND part = 2`, ahead, job, topic); err != nil {
		t.Fatal(err)
	}
	table, rep = show()
	wantPast := fmt.Sprintf("partition 2: next offset %d is past the log end %d", ahead, ends[2])
	if p := rep.Partitions[2]; p.Status != "past_end" || !strings.Contains(table, "PAST THE LOG END") || !strings.Contains(table, wantPast) ||
		!strings.Contains(p.Note, "run stops with exit 1") || !strings.Contains(p.Note, "offsets reset --to earliest|latest|<offset> --partitions 2") {
		t.Errorf("offsets show with partition 2 past its end:\n%s\n%+v\nwant it flagged (%q), with run's exit 1 and the reset", table, p, wantPast)
	}
	if dry := cmd("run", "--dry-run"); dry.Code != 0 || !strings.Contains(dry.Stdout, "none: past the log end, run stops (exit 1") {
		t.Errorf("run --dry-run with partition 2 past its end: %s\nwant its first batch shown as none, run stopping", dry)
	}
	r := runIdle()
	if r.Code != 1 || !strings.Contains(r.Stderr, "stored offset is past the end of the partition") {
		t.Fatalf("run with partition 2 past its end: %s\nwant exit 1, as offsets show says", r)
	}
	mustOK("offsets", "reset", "--to", "latest", "--partitions", "2")
	if _, rep = show(); rep.Partitions[2].Status != "ok" {
		t.Errorf("partition 2 after the reset: %+v", rep.Partitions[2])
	}
	if r := runIdle(); r.Code != 0 {
		t.Fatalf("run after the reset: %s", r)
	}

	// Before the start: partition 1 rewound, then records deleted under it.
	mustOK("offsets", "reset", "--to", "earliest", "--partitions", "1")
	deleteRecords(t, brokers, topic, 1, 100)
	table, rep = show()
	wantBefore := "partition 1: next offset 0 is before the log start 100 (offsets 0..99 were deleted"
	if p := rep.Partitions[1]; p.Status != "before_start" || !strings.Contains(table, "BEFORE THE LOG START") || !strings.Contains(table, wantBefore) ||
		!strings.Contains(p.Note, "run stops with exit 1") || !strings.Contains(p.Note, "offsets reset --to earliest --partitions 1") || p.Lag != p.LogEnd {
		t.Errorf("offsets show with partition 1 before its start:\n%s\n%+v\nwant it flagged (%q), with run's exit 1, the reset and lag from offset 0", table, p, wantBefore)
	}
	if dry := cmd("run", "--dry-run"); dry.Code != 0 || !strings.Contains(dry.Stdout, "none: before the log start, run stops (exit 1") {
		t.Errorf("run --dry-run with partition 1 before its start: %s\nwant its first batch shown as none, run stopping", dry)
	}
	r = runIdle()
	if r.Code != 1 || !strings.Contains(r.Stderr, "stored offset is before the log start") {
		t.Fatalf("run with partition 1 before its start: %s\nwant exit 1, as offsets show says", r)
	}
	mustOK("offsets", "reset", "--to", "earliest", "--partitions", "1")
	if r := runIdle(); r.Code != 0 {
		t.Fatalf("run after the reset: %s", r)
	}
	if _, rep = show(); rep.Lag != 0 {
		t.Errorf("lag after the last run: %d, want 0", rep.Lag)
	}

	// A missing topic: exit 4, documented.
	r = systemtest.Run(t, dir, nil, time.Minute, "offsets", "show", "--brokers", brokers, "--topic", systemtest.UniqueName(t, "missing"), "--job", job, "--sink", sink)
	if r.Code != 4 || !strings.Contains(r.Stderr, "no such topic") {
		t.Errorf("offsets show of a missing topic: %s\nwant exit 4", r)
	}
	if codes := offsetsExitCodes(t); !strings.Contains(codes, "`4`") {
		t.Errorf("the exit codes of offsets in docs/operations.md do not list 4 (a missing topic): %q", codes)
	}
}

// deleteRecords deletes partition part's records before offset before
// (as retention would).
func deleteRecords(t *testing.T, brokers, topic string, part int32, before int64) {
	t.Helper()
	client, err := sarama.NewClient(kafkautil.SplitBrokers(brokers), kafkautil.Config("microbatch-test"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	defer admin.Close() // closes the client
	if err := admin.DeleteRecords(topic, map[int32]int64{part: before}); err != nil {
		t.Fatalf("deleting %s/%d's records before %d: %v", topic, part, before, err)
	}
}

// offsetsExitCodes is docs/operations.md's list of the exit codes of
// `microbatch offsets`: the paragraph starting "Exit codes:" in its section.
func offsetsExitCodes(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile("(?s)\n## Fixing a job's position: `microbatch offsets`\n(.*?)\n## ").FindSubmatch(b)
	if section == nil {
		t.Fatal("docs/operations.md: no section \"Fixing a job's position: `microbatch offsets`\"")
	}
	codes := regexp.MustCompile(`(?s)Exit codes:(.*?)(?:\n\n|$)`).FindSubmatch(section[1])
	if codes == nil {
		t.Fatal("docs/operations.md: the offsets section has no \"Exit codes:\" paragraph")
	}
	return string(codes[1])
}
