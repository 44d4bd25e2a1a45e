package redissink

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// The steps of TestRedisLayoutGolden, in order.

// plans: claims, offsets, and batch 1's plan with the plan log's refusals.
func (l *layoutRun) plans() {
	ctx, a := context.Background(), l.a
	var err error
	l.e1, err = a.Claim(ctx)
	l.log("claim", l.e1, err)
	l.log("init", a.InitOffsets(ctx, "in", map[int32]int64{0: 0, 1: 0, 2: 0, 3: 5}))
	l.log("init again", a.InitOffsets(ctx, "in", map[int32]int64{0: 9, 4: 1}))
	l.log("init bad", a.InitOffsets(ctx, "in", map[int32]int64{-1: 9}))
	l.e2, err = a.ClaimPartitions(ctx, "in", []int32{0, 1}, 7)
	l.log("claimparts", l.e2, err)
	l.e3, err = a.ClaimPartitions(ctx, "in", []int32{2, 3}, 1)
	l.log("claimparts2", l.e3, err)
	l.id1, err = a.NextBatchID(ctx)
	l.log("nextid", l.id1, err)
	l.b1 = []record.Range{lr(0, 0, 10), lr(1, 0, 20)}
	l.log("logplan stale", a.LogPlan(ctx, l.e1, l.id1, l.b1))
	l.log("logplan", a.LogPlan(ctx, l.e2, l.id1, l.b1))
	l.log("logplan again", a.LogPlan(ctx, l.e2, l.id1, l.b1))
	l.log("logplan other", a.LogPlan(ctx, l.e2, l.id1, l.b1[:1]))
	l.log("logplan pending conflict", a.LogPlan(ctx, l.e2, l.id1+1, []record.Range{lr(0, 0, 11)}))
	l.log("logplan dup", a.LogPlan(ctx, l.e2, l.id1+1, []record.Range{lr(0, 0, 11), lr(0, 11, 12)}))
	l.log("logplan empty", a.LogPlan(ctx, l.e2, l.id1+1, nil))
	l.dump("after plan")
}

// contributions: batch 1's contributions, one with dead letters inline,
// one with dead letters large enough to be staged, then its fold.
func (l *layoutRun) contributions() {
	ctx, a, e1, e2, b1 := context.Background(), l.a, l.e1, l.e2, l.b1
	dls := []record.DeadLetter{{Topic: "in", Partition: 0, Offset: 3, Reason: "bad \xff json", Payload: []byte{0, 1, 0xff}},
		{Topic: "in", Partition: 0, Offset: 4, Reason: strings.Repeat("é", 700), Payload: []byte("x")}}
	l.log("write stale", a.WriteContribution(ctx, e1, b1[0], []Total{{Key: "k", Events: 1, Amount: 1}}, nil))
	l.log("write", a.WriteContribution(ctx, e2, b1[0], []Total{{Key: "k", Events: 1, Amount: 1},
		{Key: "k", Events: 2, Amount: math.MaxInt64}, {Key: "j", Events: 1, Amount: -4}}, dls))
	l.log("write out of range dl", a.WriteContribution(ctx, e2, b1[0], nil, []record.DeadLetter{{Topic: "in", Partition: 0, Offset: 10}}))
	big := bytes.Repeat([]byte("abcdefgh"), (3<<20)/8)
	bigdls := []record.DeadLetter{{Topic: "in", Partition: 1, Offset: 1, Reason: "big", Payload: big},
		{Topic: "in", Partition: 1, Offset: 2, Reason: "big2", Payload: big},
		{Topic: "in", Partition: 1, Offset: 5, Reason: "huge", Payload: bytes.Repeat([]byte("z"), 5<<20)}}
	l.log("write big", a.WriteContribution(ctx, e2, b1[1], []Total{{Key: "k", Events: 5, Amount: 5},
		{Key: "z", Events: 1, Amount: math.MinInt64}}, bigdls))
	l.dump("after writes")
	l.log("fold wrong batch", l.fold(a.Fold(ctx, e2, l.id1+5, b1)))
	l.log("fold stale", l.fold(a.Fold(ctx, e1, l.id1, b1)))
	l.log("fold", l.fold(a.Fold(ctx, e2, l.id1, b1)))
	l.log("fold again", l.fold(a.Fold(ctx, e2, l.id1, b1)))
	l.log("write late", a.WriteContribution(ctx, e2, b1[0], []Total{{Key: "k", Events: 1, Amount: 1}}, nil))
	l.dump("after fold")
}

// foldsPastInt64: batch 2's sums leave int64 and one comes back.
func (l *layoutRun) foldsPastInt64() {
	ctx, a, e2 := context.Background(), l.a, l.e2
	id2, err := a.NextBatchID(ctx)
	l.log("nextid2", id2, err)
	b2 := []record.Range{lr(0, 10, 20), lr(1, 20, 30)}
	l.log("logplan2", a.LogPlan(ctx, e2, id2, b2))
	l.log("write2a", a.WriteContribution(ctx, e2, b2[0], []Total{{Key: "k", Events: 1, Amount: math.MaxInt64},
		{Key: "z", Events: 1, Amount: math.MaxInt64}}, nil))
	l.log("write2b", a.WriteContribution(ctx, e2, b2[1], []Total{{Key: "k", Events: 1, Amount: math.MinInt64},
		{Key: "k", Events: 1, Amount: math.MinInt64}}, nil))
	l.log("fold2", l.fold(a.Fold(ctx, e2, id2, b2)))
	l.dump("after fold2")
}

// foldErrors: batch 3's contribution missing, corrupt, with an unknown
// field, with staged dead letters missing; ranges of partitions that are
// fenced.
func (l *layoutRun) foldErrors() {
	ctx, a, e2 := context.Background(), l.a, l.e2
	l.id3, _ = a.NextBatchID(ctx)
	l.b3 = []record.Range{lr(0, 20, 25)}
	b3, id3 := l.b3, l.id3
	ck := "mb:{" + l.job + "}:contrib:in:0:20-25"
	l.log("logplan3", a.LogPlan(ctx, e2, id3, b3))
	l.log("fold3 missing", l.fold(a.Fold(ctx, e2, id3, b3)))
	l.c.HSet(ctx, ck, "t:q", "notanumber", "m", "x")
	l.log("fold3 corrupt", l.fold(a.Fold(ctx, e2, id3, b3)))
	l.c.Del(ctx, ck)
	l.c.HSet(ctx, ck, "x:q", "1")
	l.log("fold3 unknown", l.fold(a.Fold(ctx, e2, id3, b3)))
	l.c.HSet(ctx, ck, "n", "3")
	l.log("fold3 staged", l.fold(a.Fold(ctx, e2, id3, b3)))
	l.log("fold3 unplanned part", l.fold(a.Fold(ctx, e2, id3, []record.Range{lr(4, 1, 3)})))
	l.log("fold3 no offset", l.fold(a.Fold(ctx, e2, id3, []record.Range{lr(9, 1, 3)})))
}

// rows: a user-defined job's rows, added (batch 3) and replaced (batch 4).
func (l *layoutRun) rows() {
	ctx, a, e2, b3, id3 := context.Background(), l.a, l.e2, l.b3, l.id3
	add := writers.Upsert{Table: "per_key", Keys: []string{"k"}, Values: []string{"n", "total"}, Merge: writers.MergeAdd}
	set := writers.Upsert{Table: "last_seen", Keys: []string{"region", "k"}, Values: []string{"at"}, Merge: writers.MergeReplace}
	l.log("write rows", a.WriteRowsContribution(ctx, e2, b3[0], add, [][]any{{"a", 1, 2}, {"a", int64(3), math.MaxInt64}, {"b", 1, 1}}, nil))
	l.log("write rows bad", a.WriteRowsContribution(ctx, e2, b3[0], add, [][]any{{"a", "x", 2}}, nil))
	l.log("write rows width", a.WriteRowsContribution(ctx, e2, b3[0], add, [][]any{{"a", 1}}, nil))
	l.log("fold rows as totals", l.fold(a.Fold(ctx, e2, id3, b3)))
	l.log("fold rows other", l.fold(a.FoldRows(ctx, e2, id3, b3, set)))
	l.log("fold rows", l.fold(a.FoldRows(ctx, e2, id3, b3, add)))
	id4, _ := a.NextBatchID(ctx)
	b4 := []record.Range{lr(0, 25, 30)}
	l.log("logplan4", a.LogPlan(ctx, e2, id4, b4))
	l.log("write rows replace", a.WriteRowsContribution(ctx, e2, b4[0], set,
		[][]any{{"eu", "2026", "t1"}, {"eu", "2026", 3.5}, {"us", "x", true}}, nil))
	l.log("fold rows replace", l.fold(a.FoldRows(ctx, e2, id4, b4, set)))
	rows, err := a.Rows(ctx, "per_key", "total")
	l.log("rows", rows, err)
	l.dump("after rows")
}

// inspection: batch 5 left pending, and what the reading calls report.
func (l *layoutRun) inspection() {
	ctx, a := context.Background(), l.a
	l.id5, _ = a.NextBatchID(ctx)
	l.b5 = []record.Range{lr(2, 0, 7), lr(3, 5, 9)}
	l.log("logplan5", a.LogPlan(ctx, l.e3, l.id5, l.b5))
	l.log("write5", a.WriteContribution(ctx, l.e3, l.b5[0], []Total{{Key: "p", Events: 1, Amount: 2}}, nil))
	p, err := a.PendingRanges(ctx, "in", []int32{3, 2, 0, 2})
	l.log("pending", fmt.Sprintf("%+v", p), err)
	lid, lrs, ok, err := a.LastPlan(ctx)
	l.log("lastplan", lid, lrs, ok, err)
	pos, err := a.Positions(ctx, "in")
	var ps []string
	for part, x := range pos {
		logged := ""
		if x.Logged != nil {
			logged = fmt.Sprintf("%+v", *x.Logged)
		}
		ps = append(ps, fmt.Sprintf("%d:%d/%d/%s/%v", part, x.NextOffset, x.Epoch, logged, x.Pending))
	}
	sort.Strings(ps)
	l.log("positions", strings.Join(ps, " "), err)
	ev, am, nk, err := a.Totals(ctx)
	l.log("totals", ev, am, nk, err)
	n, err := a.DeadLetterCount(ctx)
	l.log("deadcount", n, err)
	offs, err := a.Offsets(ctx, "in")
	l.log("offsets", offs, err)
	l.dump("before reset")
}

// reset: offsets reset, then the refusals of a fold and of writes whose
// plan, offset or plan entry is missing, moved or corrupt.
func (l *layoutRun) reset() {
	ctx, a, id5, b5 := context.Background(), l.a, l.id5, l.b5
	ep, ch, err := a.ResetOffsets(ctx, "in", map[int32]int64{2: 3, 0: 1, 7: 4})
	l.log("reset", ep, ch, err)
	l.log("fold after reset", l.fold(a.Fold(ctx, l.e3, id5, b5)))
	l.dump("after reset")
	l.e4, err = a.Claim(ctx)
	l.log("claim again", l.e4, err)
	e4 := l.e4
	l.log("fold no plan", l.fold(a.Fold(ctx, e4, id5, []record.Range{lr(4, 1, 3)})))
	l.log("logplan9", a.LogPlan(ctx, e4, id5+1, []record.Range{lr(9, 0, 3)}))
	l.log("fold no offset", l.fold(a.Fold(ctx, e4, id5+1, []record.Range{lr(9, 0, 3)})))
	l.log("write no offset", a.WriteContribution(ctx, e4, lr(9, 0, 3), nil, nil))
	l.c.HSet(ctx, "mb:{"+l.job+"}:offsets", "in/3", "6")
	l.log("fold moved", l.fold(a.Fold(ctx, e4, id5, b5[1:])))
	l.log("write moved", a.WriteContribution(ctx, e4, b5[1], nil, nil))
	l.c.HSet(ctx, "mb:{"+l.job+"}:plan:parts", "in/3", "garbage")
	l.log("logplan corrupt", a.LogPlan(ctx, e4, id5+2, []record.Range{lr(3, 6, 8)}))
	l.dump("after errors")
}

// sources: a plain job's source position, with a replay and a chunk
// whose command fails inside EXEC.
func (l *layoutRun) sources() {
	ctx, a := context.Background(), l.a
	sp, err := a.ClaimSource(ctx, "feed.csv")
	l.log("claimsource", sp, err)
	adv := offsets.SourceAdvance{Job: l.job, Source: "feed.csv", From: "", To: "p1", Epoch: sp.Epoch}
	l.log("commitsource", a.CommitSource(ctx, adv, func(p redis.Pipeliner) error { p.Incr(ctx, "mb:{"+l.job+"}:user:n"); return nil }))
	l.log("commitsource replay", a.CommitSource(ctx, adv, func(p redis.Pipeliner) error { return nil }))
	l.c.Set(ctx, "mb:{"+l.job+"}:user:s", "x", 0)
	adv2 := offsets.SourceAdvance{Job: l.job, Source: "feed.csv", From: "p1", To: "p2", Epoch: sp.Epoch}
	l.log("commitsource partial", a.CommitSource(ctx, adv2, func(p redis.Pipeliner) error {
		p.HSet(ctx, "mb:{"+l.job+"}:user:s", "f", "v")
		return nil
	}))
	landed, err := a.SourceLanded(ctx, adv2)
	l.log("landed", landed, err)
	l.dump("end")
}
