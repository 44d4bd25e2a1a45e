package redissink

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/offsets"
)

// The positions of sources that are not Kafka (Sink.ClaimSource,
// CommitSource, SourceLanded), the Redis twins of sqlsink.Writer's.

func TestRedisSourcePositions(t *testing.T) {
	w := openRedisSink(t)
	ctx := t.Context()
	j := redisJob(t, w)
	job := j.Name()
	claim, err := w.ClaimSource(ctx, job, "feed")
	if err != nil {
		t.Fatal(err)
	}
	counter := "mb:{" + job + "}:user:count"
	add := func(n int64) func(redis.Pipeliner) error {
		return func(p redis.Pipeliner) error { p.IncrBy(ctx, counter, n); return nil }
	}
	a1 := offsets.SourceAdvance{Job: job, Source: "feed", From: "", To: "page:2", Epoch: claim.Epoch}
	if err := w.CommitSource(ctx, a1, add(5)); err != nil {
		t.Fatal(err)
	}
	if err := w.CommitSource(ctx, a1, add(5)); !errors.Is(err, offsets.ErrConflict) {
		t.Fatalf("replay: %v, want ErrConflict", err)
	}
	before := snapshot(t, w, j)
	if err := w.CommitSource(ctx, offsets.SourceAdvance{Job: job, Source: "feed", From: "page:2", To: "page:3", Epoch: claim.Epoch},
		func(redis.Pipeliner) error { return errors.New("transform failed") }); err == nil {
		t.Fatal("a failing write committed")
	}
	sameSnapshot(t, "failed chunk", before, snapshot(t, w, j))
	claim2, err := w.ClaimSource(ctx, job, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if claim2.Position != "page:2" || claim2.Epoch != claim.Epoch+1 || claim2.Chunks != 1 {
		t.Fatalf("second claim = %+v", claim2)
	}
	a2 := offsets.SourceAdvance{Job: job, Source: "feed", From: "page:2", To: "page:3", Epoch: claim.Epoch}
	if err := w.CommitSource(ctx, a2, add(7)); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("zombie: %v, want ErrFenced", err)
	}
	a2.Epoch = claim2.Epoch
	if err := w.CommitSource(ctx, a2, add(7)); err != nil {
		t.Fatal(err)
	}
	if n, err := w.Client().Get(ctx, counter).Int64(); err != nil || n != 12 {
		t.Fatalf("counter = %d (%v), want 12: each committed chunk once", n, err)
	}
}

// A chunk that doesn't move its source is refused: otherwise it could be
// committed again and again (a watermark that didn't advance).
func TestRedisSourceAdvanceMustMove(t *testing.T) {
	w := openRedisSink(t)
	job := redisJob(t, w).Name()
	claim, err := w.ClaimSource(t.Context(), job, "wm")
	if err != nil {
		t.Fatal(err)
	}
	err = w.CommitSource(t.Context(), offsets.SourceAdvance{Job: job, Source: "wm", Epoch: claim.Epoch}, func(redis.Pipeliner) error { return nil })
	if err == nil {
		t.Fatal("an advance from \"\" to \"\" was accepted")
	}
}

// A queued command that fails inside EXEC doesn't roll the others back:
// CommitSource says so (ErrPartialCommit) instead of reporting a plain
// failure, and SourceLanded tells the chunk moved the source.
func TestRedisCommitSourcePartial(t *testing.T) {
	w := openRedisSink(t)
	ctx := t.Context()
	job := redisJob(t, w).Name()
	claim, err := w.ClaimSource(ctx, job, "feed")
	if err != nil {
		t.Fatal(err)
	}
	str, counter := "mb:{"+job+"}:user:str", "mb:{"+job+"}:user:count"
	if err := w.Client().Set(ctx, str, "text", 0).Err(); err != nil {
		t.Fatal(err)
	}
	a := offsets.SourceAdvance{Job: job, Source: "feed", From: "", To: "p1", Epoch: claim.Epoch}
	err = w.CommitSource(ctx, a, func(p redis.Pipeliner) error {
		p.IncrBy(ctx, counter, 2)
		p.HSet(ctx, str, "f", "v") // WRONGTYPE when EXEC runs it
		return nil
	})
	if !errors.Is(err, ErrPartialCommit) || !strings.Contains(err.Error(), "hset") {
		t.Fatalf("CommitSource = %v, want ErrPartialCommit naming hset", err)
	}
	if landed, err := w.SourceLanded(ctx, a); err != nil || !landed {
		t.Fatalf("SourceLanded = %v, %v; want true", landed, err)
	}
	if n, _ := w.Client().Get(ctx, counter).Int64(); n != 2 {
		t.Fatalf("counter = %d, want 2 (the commands that worked ran)", n)
	}
}
