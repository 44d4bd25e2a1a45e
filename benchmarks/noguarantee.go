package benchmarks

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
	"golang.org/x/sync/errgroup"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
)

// The no-guarantee pipeline: the bar exactly-once is measured against.
// It is what a user would write who wants the per-key totals and no
// guarantee at all: franz-go's kgo consumer reads the topic, fastjson
// parses each record and takes the four fields the built-in job takes
// (id, key, amount, ts), and an event.Aggregator per partition folds
// key → (events, amount) in memory, as the job's decoder and fold do.
// It writes nothing and commits nothing: no offsets, no sink, no
// transaction. A strategy that reads, decodes and folds the same records
// and also makes them durable exactly once can at best match it; the
// ratio to it is the price of the guarantee (and of the sink).
//
// It is not a ceiling in the raw reader's sense: it uses a different
// client, and fastjson's parser alone is more lenient than the job's
// decoder (it takes 01 or NaN, and does not check UTF-8), so a strategy
// may beat it. It is checked, not trusted: every read's totals are
// compared key by key with the generator's (foldExact).

// NoGuaranteeSettings describe the pipeline, shown with its results.
type NoGuaranteeSettings struct {
	// FetchBytes is kgo's FetchMaxPartitionBytes and FetchMaxBytes: the
	// raw ceiling's fetch size, so the two readers ask for as much.
	FetchBytes int32 `json:"fetch_bytes"`
	// MaxWait is kgo's FetchMaxWait.
	MaxWait time.Duration `json:"max_wait"`
}

// DefaultNoGuaranteeSettings are the raw ceiling's fetch size and wait.
var DefaultNoGuaranteeSettings = NoGuaranteeSettings{FetchBytes: DefaultRawSettings.FetchBytes, MaxWait: DefaultRawSettings.MaxWait}

func (s NoGuaranteeSettings) String() string {
	return fmt.Sprintf("franz-go kgo consumer (direct partitions from the start, %d MiB per fetch, max wait %s, read-uncommitted, nothing committed); "+
		"a goroutine per partition parses each record with a reused fastjson Parser (ParseBytes, then one visit of the top-level members for id, key, amount, ts) "+
		"and folds key → events, amount in an event.Aggregator; the partitions' folds are merged at the end; nothing is written",
		s.FetchBytes>>20, s.MaxWait)
}

// NoGuaranteeRead is one read of a whole topic by the pipeline.
type NoGuaranteeRead struct {
	Duration time.Duration // client creation → every partition folded up to its end offset
	CPU      time.Duration // this process's CPU time over Duration (the pipeline's, as the bench does nothing else meanwhile)
	Records  int64         // records read
	Rejected int64         // records fastjson refused or without the four fields (not folded)
	Totals   map[string]event.Expected
}

// EventsPerSec is the read's rate.
func (r NoGuaranteeRead) EventsPerSec() float64 { return float64(r.Records) / r.Duration.Seconds() }

// noGuaranteeConsume reads every partition of topic from its log start to
// the end offset it had before the read (taken outside the timing),
// parses and folds every record, and returns the totals. A partition is
// done when a record at or past its end offset minus one has been seen:
// right for a topic written without transactions, as the workload is (a
// commit marker as the last offset would leave it waiting for ctx).
func noGuaranteeConsume(ctx context.Context, brokers []string, topic string, s NoGuaranteeSettings) (NoGuaranteeRead, error) {
	ends, err := kafkautil.EndOffsets(brokers, topic)
	if err != nil {
		return NoGuaranteeRead{}, err
	}
	return noGuaranteeRead(ctx, brokers, topic, ends, s)
}

// noGuaranteeRead is noGuaranteeConsume up to the given end offsets.
func noGuaranteeRead(ctx context.Context, brokers []string, topic string, ends map[int32]int64, s NoGuaranteeSettings) (NoGuaranteeRead, error) {
	parts := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			parts[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(parts) == 0 {
		return NoGuaranteeRead{Totals: map[string]event.Expected{}}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start, cpu0 := time.Now(), selfCPU()
	client, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("microbatch-bench-no-guarantee"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchMaxBytes(s.FetchBytes), kgo.FetchMaxPartitionBytes(s.FetchBytes), kgo.FetchMaxWait(s.MaxWait))
	if err != nil {
		return NoGuaranteeRead{}, err
	}
	defer client.Close()

	// One folding goroutine per partition, fed over a bounded channel:
	// the partitions parse in parallel as the job's do, and the poll loop
	// waits when a partition's folder is behind.
	g, gctx := errgroup.WithContext(ctx)
	feeds := map[int32]chan []*kgo.Record{}
	folds := map[int32]*partitionFold{}
	for p := range parts {
		ch := make(chan []*kgo.Record, 4)
		f := &partitionFold{end: ends[p], agg: event.NewAggregator()}
		feeds[p], folds[p] = ch, f
		g.Go(func() error { return f.run(gctx, ch) })
	}
	g.Go(func() error {
		defer func() {
			for _, ch := range feeds {
				close(ch)
			}
		}()
		// next is the offset after the last record handed on; a partition
		// is done when it reaches its end.
		next := map[int32]int64{}
		left := len(parts)
		for left > 0 {
			fs := client.PollFetches(gctx)
			if err := gctx.Err(); err != nil {
				return err
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) {
				if ferr == nil {
					ferr = fmt.Errorf("fetching %s/%d: %w", t, p, err)
				}
			})
			if ferr != nil {
				return ferr
			}
			var sendErr error
			fs.EachPartition(func(fp kgo.FetchTopicPartition) {
				ch, ok := feeds[fp.Partition]
				if !ok || len(fp.Records) == 0 || sendErr != nil || next[fp.Partition] >= ends[fp.Partition] {
					return
				}
				next[fp.Partition] = fp.Records[len(fp.Records)-1].Offset + 1
				select {
				case ch <- fp.Records:
				case <-gctx.Done():
					sendErr = gctx.Err()
				}
				if next[fp.Partition] >= ends[fp.Partition] {
					left--
				}
			})
			if sendErr != nil {
				return sendErr
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return NoGuaranteeRead{}, fmt.Errorf("no-guarantee pipeline on %s: %w", topic, err)
	}
	out := NoGuaranteeRead{Totals: map[string]event.Expected{}}
	for _, f := range folds {
		out.Records += f.records
		out.Rejected += f.rejected
		for _, t := range f.agg.Totals() {
			e := out.Totals[t.Key]
			e.Events += t.Events
			e.Amount += t.Amount
			out.Totals[t.Key] = e
		}
	}
	out.Duration, out.CPU = time.Since(start), selfCPU()-cpu0
	return out, nil
}

// partitionFold parses and folds one partition's records below end.
type partitionFold struct {
	end      int64
	p        fastjson.Parser
	agg      *event.Aggregator
	records  int64
	rejected int64
}

func (f *partitionFold) run(ctx context.Context, in <-chan []*kgo.Record) error {
	var ev event.Event
	for recs := range in {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, r := range recs {
			if r.Offset >= f.end {
				break
			}
			f.records++
			if !f.parse(r.Value, &ev) {
				f.rejected++
				continue
			}
			f.agg.Add(&ev)
		}
	}
	return nil
}

// parse takes id, key, amount and ts from one record (the last of each,
// as the job's decoder does); false if fastjson refuses the record or a
// field is missing or of another type. ev.Key aliases the parser's copy.
func (f *partitionFold) parse(data []byte, ev *event.Event) bool {
	v, err := f.p.ParseBytes(data)
	if err != nil {
		return false
	}
	o, err := v.Object()
	if err != nil {
		return false
	}
	var id, key, amount, ts *fastjson.Value
	o.Visit(func(name []byte, v *fastjson.Value) {
		switch string(name) {
		case "id":
			id = v
		case "key":
			key = v
		case "amount":
			amount = v
		case "ts":
			ts = v
		}
	})
	if id == nil || key == nil || amount == nil || ts == nil {
		return false
	}
	if ev.ID, err = id.Int64(); err != nil {
		return false
	}
	if ev.Amount, err = amount.Int64(); err != nil {
		return false
	}
	if ev.TS, err = ts.Int64(); err != nil {
		return false
	}
	if ev.Key, err = key.StringBytes(); err != nil {
		return false
	}
	return true
}

// expectedPerKey is what an exact sink (or fold) holds for w, per key.
func expectedPerKey(w Workload) map[string]event.Expected {
	g := event.NewGenerator(w.Seed, w.Keys)
	out := make(map[string]event.Expected, w.Keys)
	for range w.Events {
		_, k, amount := g.Next()
		e := out[k]
		e.Events++
		e.Amount += amount
		out[k] = e
	}
	return out
}

// foldExact compares a fold's per-key totals with want: nil if every key
// holds exactly its events and amount. A skipped record leaves its key
// short, one read twice leaves it over; the first few differences are
// named.
func foldExact(got, want map[string]event.Expected) error {
	var diffs []string
	for k, w := range want {
		if g := got[k]; g != w {
			diffs = append(diffs, fmt.Sprintf("%s: %d events, amount %d; want %d, %d", k, g.Events, g.Amount, w.Events, w.Amount))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %d events, amount %d; want none", k, g.Events, g.Amount))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	n := len(diffs)
	diffs = diffs[:min(n, 5)]
	return fmt.Errorf("the fold is not exact: %d keys differ (%s%s)", n, strings.Join(diffs, "; "), map[bool]string{true: "; …", false: ""}[n > 5])
}

// noGuarantee measures the no-guarantee pipeline on the workload topic
// and checks its fold against the produced totals: a read whose fold is
// not exact is a failure of the bench, and its rate is not kept.
func (b *bench) noGuarantee() {
	defer b.prog.finished(b.estNoGuarantee())
	w := b.o.Workload
	b.prog.printf("no-guarantee pipeline: kgo + fastjson + per-key fold in memory over all %d events, nothing written", w.Events)
	r, err := noGuaranteeConsume(b.ctx, b.brokers, b.input, DefaultNoGuaranteeSettings)
	if err != nil {
		b.fail(nil, "no-guarantee pipeline: %v", err)
		return
	}
	ng := b.res.NoGuarantee
	if ng == nil {
		ng = &NoGuaranteeResult{Settings: DefaultNoGuaranteeSettings, Exact: true,
			Method: "the no-guarantee pipeline (" + DefaultNoGuaranteeSettings.String() + ") reads every partition to the end offset it had before the read; " +
				"timed from client creation to the last partition folded; its per-key totals are compared with the produced ones after every read (a read that is not exact fails the bench and is not kept); " +
				"run twice before the strategies and once after, the best of the three shown"}
		b.res.NoGuarantee = ng
	}
	if b.wantPerKey == nil {
		b.wantPerKey = expectedPerKey(w)
	}
	ng.Rejected = r.Rejected
	if err := foldExact(r.Totals, b.wantPerKey); err != nil {
		ng.Exact = false
		b.fail(nil, "no-guarantee pipeline: %d records read, %d refused: %v", r.Records, r.Rejected, err)
		return
	}
	rate := r.EventsPerSec()
	ng.Runs = append(ng.Runs, rate)
	ng.RunsCPU = append(ng.RunsCPU, r.CPU.Seconds()/float64(max(r.Records, 1))*1e6)
	b.prog.printf("no-guarantee pipeline: %s events in %s (%.2f CPU µs / event), fold exact: %s events/s", group(r.Records),
		r.Duration.Round(time.Millisecond), ng.RunsCPU[len(ng.RunsCPU)-1], group(int64(rate)))
}

// estNoGuarantee is one read's estimate in seconds, for the ETA.
func (b *bench) estNoGuarantee() float64 {
	return float64(b.o.Workload.Events)/400_000 + 1 + float64(b.o.Workload.Events)/20_000_000 // the read, the expected totals
}
