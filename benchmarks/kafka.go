package benchmarks

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/kafkautil"
)

// devBroker is a `microbatch broker` subprocess (kfake) the bench started.
type devBroker struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{} // stdout reached EOF
}

var brokerLineRE = regexp.MustCompile(`^dev broker listening on (\S+)$`)

// startDevBroker starts `bin broker --listen 127.0.0.1:0` and waits for
// the address it prints. Its output goes to logPath.
func startDevBroker(bin string, partitions int32, logPath string) (*devBroker, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "broker", "--listen", "127.0.0.1:0", "--partitions", strconv.Itoa(int(partitions)))
	cmd.Env = childEnv()
	cmd.Stderr = f
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the dev broker: %w", err)
	}
	b := &devBroker{cmd: cmd, done: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		defer close(b.done)
		defer f.Close()
		sc := bufio.NewScanner(pipe)
		for n := 0; sc.Scan(); n++ {
			if n == 0 {
				first <- sc.Text()
			}
			fmt.Fprintln(f, sc.Text())
		}
	}()
	select {
	case line := <-first:
		if m := brokerLineRE.FindStringSubmatch(line); m != nil {
			b.addr = m[1]
			return b, nil
		}
		b.stop()
		return nil, fmt.Errorf("the dev broker printed %q, not its address (log %s)", line, logPath)
	case <-b.done:
		b.stop()
		return nil, fmt.Errorf("the dev broker exited at start (log %s)", logPath)
	case <-time.After(30 * time.Second):
		b.stop()
		return nil, fmt.Errorf("the dev broker printed no address within 30s (log %s)", logPath)
	}
}

// stop ends the broker with SIGTERM (SIGKILL after 30s) and waits for it.
func (b *devBroker) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	_ = b.cmd.Wait()
}

// brokerKind names the Kafka implementation behind brokers: kfake reports
// the cluster id "kfake"; anything else is a Kafka-protocol broker named by
// its cluster id and the number of brokers.
func brokerKind(brokers []string) string {
	client, err := sarama.NewClient(brokers, kafkautil.Config("microbatch-bench-info"))
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer client.Close()
	bs := client.Brokers()
	if len(bs) == 0 {
		return "unknown (no brokers in metadata)"
	}
	b := bs[0]
	if err := b.Open(client.Config()); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
		return "unknown (" + err.Error() + ")"
	}
	md, err := b.GetMetadata(&sarama.MetadataRequest{Version: 5})
	if err != nil || md.ClusterID == nil {
		return fmt.Sprintf("Kafka-protocol broker, %d node(s)", len(bs))
	}
	if *md.ClusterID == "kfake" {
		return fmt.Sprintf("kfake (franz-go's Kafka-protocol dev broker), %d node(s)", len(bs))
	}
	return fmt.Sprintf("Kafka (cluster id %s, not kfake), %d node(s)", *md.ClusterID, len(bs))
}

// topicSize sums the high-water marks of topic's partitions: its record
// count for a topic written without transactions.
func topicSize(brokers []string, topic string) (int64, error) {
	ends, err := kafkautil.EndOffsets(brokers, topic)
	var n int64
	for _, e := range ends {
		n += e
	}
	return n, err
}

// ensureWorkload makes topic hold exactly the first events events of the
// seed's sequence: created and produced if new, topped up if short, reused
// if complete. A topic holding more is refused (a throughput run drains all
// of it).
func ensureWorkload(ctx context.Context, w Workload, brokers []string, topic string) (produced bool, err error) {
	if err := kafkautil.EnsureTopic(brokers, topic, w.Partitions); err != nil {
		return false, err
	}
	have, err := topicSize(brokers, topic)
	if err != nil {
		return false, err
	}
	switch {
	case have == w.Events:
		return false, nil
	case have > w.Events:
		return false, fmt.Errorf("topic %s holds %d records, more than the %d events of the workload", topic, have, w.Events)
	}
	_, err = kafkautil.Produce(ctx, kafkautil.ProduceOptions{
		Brokers: brokers, Topic: topic, Count: w.Events - have, Skip: have, Keys: w.Keys, Seed: w.Seed, Format: w.Format,
	})
	return true, err
}

// feeder keeps input flowing while runs are killed (kafkautil.Feeder).
type feeder struct{ f *kafkautil.Feeder }

const feedChunk = 1000

func startFeeder(w Workload, brokers []string, topic string, rate float64, events, amount int64) *feeder {
	return &feeder{kafkautil.StartFeeder(kafkautil.ProduceOptions{
		Brokers: brokers, Topic: topic, Count: feedChunk, Keys: w.Keys, Seed: w.Seed, Format: w.Format, Rate: rate,
	}, event.Expected{Events: events, Amount: amount})}
}

// finish stops the feeder and returns the input's totals.
func (f *feeder) finish() (events, amount int64, err error) {
	t, err := f.f.Finish()
	return t.Events, t.Amount, err
}

// deleteTopics removes the bench's per-run topics (best effort).
func deleteTopics(brokers []string, topics []string) {
	if len(topics) == 0 {
		return
	}
	client, err := sarama.NewClient(brokers, kafkautil.Config("microbatch-bench-cleanup"))
	if err != nil {
		return
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return
	}
	defer admin.Close()
	existing, err := admin.ListTopics()
	if err != nil {
		return
	}
	for _, t := range topics {
		for _, name := range []string{t, t + "-dead-letters"} {
			if _, ok := existing[name]; ok {
				_ = admin.DeleteTopic(name)
			}
		}
	}
}

// expectedOf computes the totals of the first n events of the workload.
func expectedOf(w Workload, n int64) event.Expected { return event.ExpectedTotals(w.Seed, w.Keys, n) }

// splitBrokers is kafkautil.SplitBrokers, for the CLI's string form.
func splitBrokers(s string) []string { return kafkautil.SplitBrokers(strings.TrimSpace(s)) }

// workloadTopic names the topic holding w's events. Compact keeps the name
// it had before formats existed, so an existing workload is reused.
func workloadTopic(w Workload) string {
	name := fmt.Sprintf("mb-bench-e%d-p%d-k%d-s%d", w.Events, w.Partitions, w.Keys, w.Seed)
	if w.Format != "" && w.Format != event.FormatCompact {
		name += "-" + string(w.Format)
	}
	return name
}
