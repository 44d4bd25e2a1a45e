package redissink

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// TestRedisLayoutGolden pins the Redis layout, a public contract (README,
// "Redis layout"): a scenario of every call, with its errors, and the
// job's keys dumped byte for byte after each step, compared with
// testdata/layout.golden. The golden file was written by the same
// scenario against the Redis writer before it moved into this package, so
// the move changed no key, value or error text. A change to the file is a
// change to the contract: -update rewrites it.
func TestRedisLayoutGolden(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w)
	l := &layoutRun{t: t, a: layoutJob{job, w}, c: w.Client(), job: job.Name(), display: w.String()}
	l.plans()
	l.contributions()
	l.foldsPastInt64()
	l.foldErrors()
	l.rows()
	l.inspection()
	l.reset()
	l.sources()
	got := l.out.Bytes()
	golden := filepath.Join("testdata", "layout.golden")
	if *updateGolden {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("the Redis layout changed at line %d:\ngot  %s\nwant %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("the Redis layout changed: %d lines, want %d", len(gl), len(wl))
	}
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/layout.golden")

// layoutAPI is what the scenario calls: a Job and its Sink's source
// positions.
type layoutAPI interface {
	Claim(ctx context.Context) (int64, error)
	ClaimPartitions(ctx context.Context, topic string, parts []int32, minEpoch int64) (int64, error)
	NextBatchID(ctx context.Context) (int64, error)
	Offsets(ctx context.Context, topic string) (map[int32]int64, error)
	InitOffsets(ctx context.Context, topic string, start map[int32]int64) error
	LogPlan(ctx context.Context, epoch, batchID int64, ranges []record.Range) error
	LastPlan(ctx context.Context) (int64, []record.Range, bool, error)
	PendingRanges(ctx context.Context, topic string, parts []int32) ([]PlannedRange, error)
	WriteContribution(ctx context.Context, epoch int64, r record.Range, totals []Total, dls []record.DeadLetter) error
	WriteRowsContribution(ctx context.Context, epoch int64, r record.Range, u writers.Upsert, rows [][]any, dls []record.DeadLetter) error
	Fold(ctx context.Context, epoch, batchID int64, ranges []record.Range) (int, error)
	FoldRows(ctx context.Context, epoch, batchID int64, ranges []record.Range, u writers.Upsert) (int, error)
	Rows(ctx context.Context, table, column string) (map[string]string, error)
	Totals(ctx context.Context) (int64, *big.Int, int64, error)
	DeadLetterCount(ctx context.Context) (int64, error)
	Positions(ctx context.Context, topic string) (map[int32]Position, error)
	ResetOffsets(ctx context.Context, topic string, to map[int32]int64) (int64, []offsets.Change, error)
	ClaimSource(ctx context.Context, source string) (offsets.SourcePosition, error)
	CommitSource(ctx context.Context, a offsets.SourceAdvance, write func(redis.Pipeliner) error) error
	SourceLanded(ctx context.Context, a offsets.SourceAdvance) (bool, error)
}

type layoutJob struct {
	*Job
	s *Sink
}

func (a layoutJob) ClaimSource(ctx context.Context, source string) (offsets.SourcePosition, error) {
	return a.s.ClaimSource(ctx, a.name, source)
}

func (a layoutJob) CommitSource(ctx context.Context, adv offsets.SourceAdvance, write func(redis.Pipeliner) error) error {
	return a.s.CommitSource(ctx, adv, write)
}

func (a layoutJob) SourceLanded(ctx context.Context, adv offsets.SourceAdvance) (bool, error) {
	return a.s.SourceLanded(ctx, adv)
}

// layoutRun is the scenario's state: the epochs and batch ids it took, and
// its output, in which the job's name and the sink's address read JOB and
// SINK.
type layoutRun struct {
	t              testing.TB
	a              layoutAPI
	c              redis.UniversalClient
	job, display   string
	out            bytes.Buffer
	e1, e2, e3, e4 int64
	id1, id3, id5  int64
	b1, b3, b5     []record.Range
}

func lr(p int32, from, to int64) record.Range {
	return record.Range{Topic: "in", Partition: p, From: from, To: to}
}

// log writes a call's results.
func (l *layoutRun) log(what string, vals ...any) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", what)
	for _, v := range vals {
		if e, ok := v.(error); ok {
			fmt.Fprintf(&b, " err=%q", e.Error())
			continue
		}
		fmt.Fprintf(&b, " %+v", v)
	}
	l.out.WriteString(l.anon(b.String()) + "\n")
}

func (l *layoutRun) anon(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, l.job, "JOB"), l.display, "SINK")
}

func (l *layoutRun) fold(n int, err error) string {
	if err != nil {
		return fmt.Sprintf("err=%q", err.Error())
	}
	return fmt.Sprint(n)
}

// dump writes every key of the job with its content; values longer than
// 200 bytes as their length and FNV-1a hash.
func (l *layoutRun) dump(label string) {
	ctx := context.Background()
	keys, err := l.c.Keys(ctx, "mb:{"+l.job+"}:*").Result()
	if err != nil {
		l.t.Fatal(err)
	}
	sort.Strings(keys)
	fmt.Fprintf(&l.out, "== dump %s\n", label)
	for _, k := range keys {
		switch typ := l.c.Type(ctx, k).Val(); typ {
		case "string":
			fmt.Fprintf(&l.out, "%s = %q\n", l.anon(k), l.c.Get(ctx, k).Val())
		case "hash":
			m := l.c.HGetAll(ctx, k).Val()
			fs := make([]string, 0, len(m))
			for f := range m {
				fs = append(fs, f)
			}
			sort.Strings(fs)
			for _, f := range fs {
				fmt.Fprintf(&l.out, "%s [%q] = %q\n", l.anon(k), f, l.anon(shortValue(m[f])))
			}
		default:
			fmt.Fprintf(&l.out, "%s type %s\n", l.anon(k), typ)
		}
	}
}

func shortValue(v string) string {
	if len(v) <= 200 {
		return v
	}
	var h uint64 = 14695981039346656037
	for i := 0; i < len(v); i++ {
		h ^= uint64(v[i])
		h *= 1099511628211
	}
	return fmt.Sprintf("<%d bytes, fnv %x>", len(v), h)
}
