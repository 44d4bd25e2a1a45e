// Command kafka-enrich reads the built-in events ({"id","key","amount","ts"})
// from one Kafka topic, adds a "tier" to each and writes it to another
// topic, exactly once:
//
//	go run ./examples/kafka-enrich -brokers localhost:9092 -in events -out events-enriched
//
// Every transaction holds a batch of output records AND the input offsets
// after the batch, committed for the consumer group -group (Kafka's
// consume-transform-produce, KIP-98). Either both become visible or
// neither does. A restart first aborts what the dead run left open
// (fencing it, by the fixed transactional id), then reads the group's
// committed offsets and continues from there, so a read_committed reader
// of the output sees each input event exactly once. Partitions without a
// committed offset start at the earliest one, except that it refuses to
// when the group has no offsets at all but the output holds committed
// records (expired offsets?) unless -from-start: see the README.
//
// Records that are not events go, unchanged, to <out>-dead-letters in the
// same transactions. It prints one line per committed transaction and,
// with -idle, stops once nothing arrived for that long.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/kafkasink"
)

type options struct {
	brokers   []string
	in, out   string
	group     string
	txnID     string
	batch     int
	linger    time.Duration
	idle      time.Duration
	pause     time.Duration
	fromStart bool
	// crashBeforeCommit is a test hook, see crashHook.
	crashBeforeCommit int64
}

func main() {
	var o options
	brokers := flag.String("brokers", "localhost:9092", "Kafka bootstrap brokers, comma separated")
	flag.StringVar(&o.in, "in", "events", "input topic")
	flag.StringVar(&o.out, "out", "events-enriched", "output topic (created if missing, like <out>-dead-letters)")
	flag.StringVar(&o.group, "group", "kafka-enrich", "consumer group whose offsets commit with the output")
	flag.StringVar(&o.txnID, "txn-id", "kafka-enrich", "transactional id prefix; keep it fixed per job so that a restart fences the old run")
	flag.IntVar(&o.batch, "batch", 500, "most input records per transaction")
	flag.DurationVar(&o.linger, "linger", 100*time.Millisecond, "how long a transaction waits for more records")
	flag.DurationVar(&o.idle, "idle", 0, "stop after this long without input (0: run until interrupted)")
	flag.DurationVar(&o.pause, "pause", 0, "sleep after each transaction (to watch it, or kill it mid-way)")
	flag.BoolVar(&o.fromStart, "from-start", false, "start from the earliest offsets even though -group has no committed offsets and the output already holds committed records (see README: expired offsets)")
	flag.Parse()
	o.brokers = strings.Split(*brokers, ",")
	var err error
	if o.crashBeforeCommit, err = crashHook(); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-enrich:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-enrich:", err)
		os.Exit(1)
	}
}

// event is the input; enriched the output.
type event struct {
	ID     int64  `json:"id"`
	Key    string `json:"key"`
	Amount int64  `json:"amount"`
	TS     int64  `json:"ts"`
}

type enriched struct {
	event
	Tier string `json:"tier"`
	// Where it came from: topic/partition@offset.
	Source string `json:"source"`
}

func tier(amount int64) string {
	switch {
	case amount >= 750:
		return "gold"
	case amount >= 250:
		return "silver"
	default:
		return "bronze"
	}
}

func run(ctx context.Context, o options) error {
	conf := sarama.NewConfig()
	conf.Version = sarama.V3_0_0_0
	conf.ClientID = "kafka-enrich"
	// The input may itself be written by transactions: skip aborted ones.
	conf.Consumer.IsolationLevel = sarama.ReadCommitted
	client, err := sarama.NewClient(o.brokers, conf)
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(o.in)
	if err != nil {
		return fmt.Errorf("input topic %s: %w", o.in, err)
	}
	dlq := o.out + "-dead-letters"
	if err := ensureTopics(client, int32(len(parts)), o.out, dlq); err != nil {
		return err
	}

	// 1. Take over the transactional ids: Recover aborts whatever the last
	// run left open and fences it, should it still be alive.
	w, err := kafkasink.New(kafkasink.Config{Brokers: o.brokers, TransactionalID: o.txnID})
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Recover(ctx, nil); err != nil {
		return err
	}

	// 2. Only now read the group's offsets: nothing of ours is pending.
	next, err := committedOffsets(client, o.group, o.in, parts)
	if err != nil {
		return err
	}
	if err := checkStart(client, o, next); err != nil {
		return err
	}
	fmt.Printf("starting at %s %v\n", o.in, next)

	// 3. Read every partition from there.
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer consumer.Close()
	msgs := make(chan *sarama.ConsumerMessage, o.batch)
	errs := make(chan error, len(parts))
	for _, p := range parts {
		start := next[p]
		if start < 0 {
			start = sarama.OffsetOldest
		}
		pc, err := consumer.ConsumePartition(o.in, p, start)
		if err != nil {
			return fmt.Errorf("reading %s/%d from %d: %w", o.in, p, start, err)
		}
		defer pc.AsyncClose()
		go func() {
			for m := range pc.Messages() {
				msgs <- m
			}
		}()
		go func() {
			for err := range pc.Errors() {
				errs <- err
			}
		}()
	}

	// 4. One transaction per batch: records, then the offsets after them.
	// Each transaction commits the offsets of every partition we know a
	// position of, not only of those in the batch: a committed offset
	// expires offsets.retention.minutes after it was last committed, and a
	// quiet partition's offset must not (README, "Where it starts").
	positions := map[int32]int64{}
	for p, off := range next {
		if off >= 0 {
			positions[p] = off
		}
	}
	lastInput := time.Now()
	for txn := int64(0); ; txn++ {
		var batch []*sarama.ConsumerMessage
		timer := time.NewTimer(o.linger)
	collect:
		for len(batch) < o.batch {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			case err := <-errs:
				timer.Stop()
				return err
			case <-timer.C:
				if len(batch) > 0 {
					break collect
				}
				if o.idle > 0 && time.Since(lastInput) >= o.idle {
					fmt.Println("idle: done")
					return nil
				}
				timer.Reset(o.linger)
			case <-ctx.Done():
				timer.Stop()
				fmt.Println("interrupted: the batch in hand was not committed and will be read again")
				return nil
			}
		}
		timer.Stop()
		lastInput = time.Now()
		if err := commitBatch(ctx, w, txn, o, dlq, batch, positions); err != nil {
			return err
		}
		if o.pause > 0 {
			time.Sleep(o.pause)
		}
	}
}

// commitBatch writes batch and the input offsets after it in one
// transaction and, once committed, advances positions.
func commitBatch(ctx context.Context, w *kafkasink.Txn, txn int64, o options, dlq string, batch []*sarama.ConsumerMessage, positions map[int32]int64) (err error) {
	if err := w.Begin(ctx, txn); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = w.Abort(context.WithoutCancel(ctx), writers.Pending{}) // the open one
		}
	}()
	nextOffsets := map[int32]int64{}
	bad := 0
	for _, m := range batch {
		var ev event
		topic := o.out
		var value []byte
		if jerr := json.Unmarshal(m.Value, &ev); jerr != nil || ev.Key == "" {
			topic, value = dlq, m.Value
			bad++
		} else {
			value, err = json.Marshal(enriched{event: ev, Tier: tier(ev.Amount),
				Source: fmt.Sprintf("%s/%d@%d", m.Topic, m.Partition, m.Offset)})
			if err != nil {
				return err
			}
		}
		if err := w.Write(ctx, topic, m.Key, value); err != nil {
			return err
		}
		nextOffsets[m.Partition] = m.Offset + 1
	}
	all := maps.Clone(positions)
	maps.Copy(all, nextOffsets)
	if err := w.WriteOffsets(ctx, o.group, map[string]map[int32]int64{o.in: all}); err != nil {
		return err
	}
	p, err := w.PreCommit(ctx)
	if err != nil {
		return err
	}
	if o.crashBeforeCommit > 0 && txn+1 == o.crashBeforeCommit {
		// TEST HOOK (see crashHook): die with this transaction's records
		// and offsets on the brokers but not committed. The next run's
		// Recover aborts it.
		fmt.Printf("txn %d: test hook: SIGKILL before the commit\n", txn)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if err := w.Commit(ctx, p); err != nil {
		return err
	}
	maps.Copy(positions, nextOffsets)
	fmt.Printf("txn %d committed: %d records, %d dead letters, next offsets %v\n", txn, len(batch), bad, nextOffsets)
	return nil
}

// committedOffsets returns the group's next offset for each partition of
// topic, -1 where it has none. It asks with require_stable, as a Java
// read_committed consumer does: while a transaction with offsets for a
// partition is still being completed, the broker answers
// UNSTABLE_OFFSET_COMMIT and we ask again. A coordinator that moved, is
// loading the offsets (a broker just restarted) or is not there yet is
// asked again a few times, with backoff.
func committedOffsets(client sarama.Client, group, topic string, parts []int32) (map[int32]int64, error) {
	deadline := time.Now().Add(time.Minute)
	backoff, coordinatorTries := 100*time.Millisecond, 0
	for {
		out, retry, err := fetchOffsets(client, group, topic, parts)
		switch {
		case err == nil && !retry:
			return out, nil
		case err != nil && !coordinatorError(err):
			return nil, err
		case err != nil: // the coordinator: find it again, a few times
			if coordinatorTries++; coordinatorTries > 6 {
				return nil, err
			}
			fmt.Printf("reading offsets of group %s: %v: retrying in %v\n", group, err, backoff)
			_ = client.RefreshCoordinator(group)
			time.Sleep(backoff)
			backoff = min(2*backoff, 3*time.Second)
		default: // unstable
			if time.Now().After(deadline) {
				return nil, errors.New("group offsets stayed unstable for a minute")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// fetchOffsets asks the group's coordinator once; retry reports an
// UNSTABLE_OFFSET_COMMIT.
func fetchOffsets(client sarama.Client, group, topic string, parts []int32) (out map[int32]int64, retry bool, err error) {
	b, err := client.Coordinator(group)
	if err != nil {
		return nil, false, err
	}
	req := sarama.NewOffsetFetchRequest(client.Config().Version, group, map[string][]int32{topic: parts})
	req.RequireStable = true
	res, err := b.FetchOffset(req)
	if err != nil {
		return nil, false, err
	}
	out = map[int32]int64{}
	for _, p := range parts {
		blk := res.GetBlock(topic, p)
		code := res.Err
		if code == sarama.ErrNoError && blk != nil {
			code = blk.Err
		}
		switch {
		case code == sarama.ErrNoError && blk != nil:
			out[p] = blk.Offset
		case code == sarama.ErrGroupIDNotFound: // some brokers, for a new group
			out[p] = -1
		case code == sarama.ErrUnstableOffsetCommit:
			retry = true
		default:
			return nil, false, fmt.Errorf("reading offsets of group %s: %w", group, code)
		}
	}
	return out, retry, nil
}

// coordinatorError: the group coordinator moved, is loading, or is not
// known yet; asking again (after finding it again) may work.
func coordinatorError(err error) bool {
	return errors.Is(err, sarama.ErrNotCoordinatorForConsumer) ||
		errors.Is(err, sarama.ErrOffsetsLoadInProgress) ||
		errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable)
}

// checkStart logs each partition without a committed offset, which starts
// at the earliest offset retained. If the group has no offsets at all
// while the output already holds committed records, the group's offsets
// most likely expired (offsets.retention.minutes after the group was last
// active): starting from the earliest would write again what is retained
// of the input, so it refuses unless -from-start.
func checkStart(client sarama.Client, o options, next map[int32]int64) error {
	var none []int32
	for p, off := range next {
		if off < 0 {
			none = append(none, p)
		}
	}
	if len(none) == 0 {
		return nil
	}
	if len(none) == len(next) && !o.fromStart {
		has, err := hasCommittedRecords(client, o.out)
		if err != nil {
			return err
		}
		if has {
			return fmt.Errorf("group %s has no committed offsets for %s, but %s already holds committed records: "+
				"were the group's offsets expired (offsets.retention.minutes)? Starting at the earliest offsets "+
				"would write again what the input retains; pass -from-start to do so anyway", o.group, o.in, o.out)
		}
	}
	slices.Sort(none)
	for _, p := range none {
		fmt.Printf("group %s has no committed offset for partition %d: starting at the earliest\n", o.group, p)
	}
	return nil
}

// hasCommittedRecords reports whether a read_committed reader of topic
// gets a record. A partition holding only aborted records (or an open
// transaction) delivers none: after a short wait, it counts as empty.
func hasCommittedRecords(client sarama.Client, topic string) (bool, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return false, err
	}
	consumer, err := sarama.NewConsumerFromClient(client) // read_committed, like the client
	if err != nil {
		return false, err
	}
	defer consumer.Close()
	got := make(chan struct{}, len(parts))
	reading := 0
	for _, p := range parts {
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return false, err
		}
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return false, err
		}
		if newest <= oldest {
			continue // empty
		}
		pc, err := consumer.ConsumePartition(topic, p, oldest)
		if err != nil {
			return false, err
		}
		defer pc.AsyncClose()
		reading++
		go func() {
			if _, ok := <-pc.Messages(); ok {
				got <- struct{}{}
			}
		}()
	}
	if reading == 0 {
		return false, nil
	}
	select {
	case <-got:
		return true, nil
	case <-time.After(2 * time.Second):
		return false, nil
	}
}

// crashHook reads KAFKA_ENRICH_CRASH_BEFORE_COMMIT. TEST HOOK, not for
// production: with n > 0, the n-th transaction of this run is written and
// flushed (records and offsets on the brokers) and then, instead of being
// committed, the process SIGKILLs itself. examples_test.go uses it to
// show that a restart aborts it and nobody reading read_committed sees it.
func crashHook() (int64, error) {
	v := os.Getenv("KAFKA_ENRICH_CRASH_BEFORE_COMMIT")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("KAFKA_ENRICH_CRASH_BEFORE_COMMIT=%q: want a transaction number from 1", v)
	}
	return n, nil
}

func ensureTopics(client sarama.Client, partitions int32, topics ...string) error {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return err
	}
	// Not admin.Close(): it would close the shared client.
	for _, t := range topics {
		err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", t, err)
		}
	}
	return client.RefreshMetadata(topics...)
}
