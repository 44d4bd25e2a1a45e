package strategies

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/strategies/checkpoint"
)

// The broker settings the preflight reads.
const (
	brokerTxnMaxTimeout    = "transaction.max.timeout.ms"
	brokerGroupMinSession  = "group.min.session.timeout.ms"
	brokerGroupMaxSession  = "group.max.session.timeout.ms"
	brokerLimitsLogMessage = "broker limits not checked: going on"
)

// checkBrokerLimits returns ErrConfig if a setting is outside the limits
// of the brokers that will enforce it: the session timeout, for the
// strategies that join a consumer group (the group coordinator's
// bounds), and the transaction timeout of checkpoint mode's Kafka sink
// (the sink cluster's transaction.max.timeout.ms). client is connected to
// cfg.Brokers.
func checkBrokerLimits(cfg Config, client sarama.Client) error {
	log := cfg.Logger
	if cfg.Strategy != StrategyCheckpoint {
		coord, err := client.Coordinator(cfg.Group.ID)
		if err != nil {
			log.Debug(brokerLimitsLogMessage, "group", cfg.Group.ID, "err", fmt.Errorf("finding the group coordinator: %w", err))
			return nil
		}
		limits, err := describeBroker(client, coord.ID(), brokerGroupMinSession, brokerGroupMaxSession)
		if err != nil {
			log.Debug(brokerLimitsLogMessage, "broker", coord.Addr(), "err", err)
			return nil
		}
		if ms, ok := limits[brokerGroupMinSession]; ok && cfg.Group.SessionTimeout < msDuration(ms) {
			return fmt.Errorf("%w: session-timeout %s is below the broker's %s %d (%s): raise --session-timeout, or lower the broker's bound",
				ErrConfig, cfg.Group.SessionTimeout, brokerGroupMinSession, ms, msDuration(ms))
		}
		if ms, ok := limits[brokerGroupMaxSession]; ok && cfg.Group.SessionTimeout > msDuration(ms) {
			return fmt.Errorf("%w: session-timeout %s is above the broker's %s %d (%s): lower --session-timeout, or raise the broker's bound",
				ErrConfig, cfg.Group.SessionTimeout, brokerGroupMaxSession, ms, msDuration(ms))
		}
		return nil
	}
	spec, err := parseCheckpointSink(cfg.Sink, cfg.Checkpoint.SinkMode)
	if err != nil || spec.Kind != checkpoint.SinkKafka {
		return nil // Validate reported a bad sink; no other uses transactions
	}
	sinkClient := client
	if !sameBrokers(spec.Brokers, cfg.Brokers) {
		conf, err := cfg.kafkaConfig(clientIDPrefix + cfg.Job)
		if err != nil {
			return err
		}
		// An unreachable sink cluster fails the run soon after; the
		// preflight does not wait for it longer than a try.
		conf.Metadata.Retry.Max = 0
		conf.Net.DialTimeout = min(conf.Net.DialTimeout, 10*time.Second)
		if sinkClient, err = sarama.NewClient(spec.Brokers, conf); err != nil {
			log.Debug(brokerLimitsLogMessage, "brokers", spec.Brokers, "err", err)
			return nil
		}
		defer sinkClient.Close()
	}
	// The transaction coordinators are spread over the cluster, whose
	// brokers share the setting: any one of them tells it. (Finding a
	// transaction's coordinator could create the transaction state topic,
	// which a dry run must not.)
	brokers := sinkClient.Brokers()
	if len(brokers) == 0 {
		log.Debug(brokerLimitsLogMessage, "brokers", spec.Brokers, "err", "no brokers in the metadata")
		return nil
	}
	b := slices.MinFunc(brokers, func(x, y *sarama.Broker) int { return int(x.ID()) - int(y.ID()) })
	limits, err := describeBroker(sinkClient, b.ID(), brokerTxnMaxTimeout)
	if err != nil {
		log.Debug(brokerLimitsLogMessage, "broker", b.Addr(), "err", err)
		return nil
	}
	if ms, ok := limits[brokerTxnMaxTimeout]; ok && cfg.Checkpoint.KafkaTxnTimeout > msDuration(ms) {
		return fmt.Errorf("%w: kafka-txn-timeout %s is above the broker's %s %d (%s): lower --kafka-txn-timeout (and the checkpoint settings it must cover), or raise the broker's limit",
			ErrConfig, cfg.Checkpoint.KafkaTxnTimeout, brokerTxnMaxTimeout, ms, msDuration(ms))
	}
	return nil
}

// describeBroker reads the integer settings names of broker id with the
// cluster admin's DescribeConfigs. A setting the broker left out is
// missing from the map.
func describeBroker(client sarama.Client, id int32, names ...string) (map[string]int64, error) {
	// Not closed: closing an admin closes its client, the caller's. It
	// holds nothing else.
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("describing broker %d: %w", id, err)
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{
		Type: sarama.BrokerResource, Name: strconv.Itoa(int(id)), ConfigNames: names,
	})
	if err != nil {
		return nil, fmt.Errorf("describing broker %d: %w", id, err)
	}
	out := make(map[string]int64, len(names))
	for _, e := range entries {
		if !slices.Contains(names, e.Name) {
			continue
		}
		if v, err := strconv.ParseInt(e.Value, 10, 64); err == nil {
			out[e.Name] = v
		}
	}
	return out, nil
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// sameBrokers: the two bootstrap lists name the same brokers.
func sameBrokers(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
