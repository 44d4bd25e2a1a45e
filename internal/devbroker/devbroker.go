package devbroker

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options configure a dev broker.
type Options struct {
	Listen     string   // host:port; "127.0.0.1:0" picks a free port
	Topics     []string // created at start if missing
	Partitions int32    // for Topics and auto-created topics
	DataDir    string   // "" keeps everything in memory
	// Users, when set, turn on SASL: only these (super)users may connect.
	Users []User
	// TLS, when set, makes the broker listen with TLS only.
	TLS *tls.Config
}

// User is a SASL user of the dev broker.
type User struct {
	Mechanism      string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Name, Password string
}

// minSessionTimeout is the broker's group.min.session.timeout.ms.
const minSessionTimeout = 500 * time.Millisecond

// Broker is a running dev broker.
type Broker struct {
	c *kfake.Cluster
}

// Start starts a broker.
func Start(o Options) (*Broker, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	addr := o.Listen
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(int(o.Partitions)),
		// Tests run consumer groups with short session timeouts. Set as a
		// broker config as well: kfake enforces the option but reports
		// the config (Kafka's default, 6 s) to DescribeConfigs, which is
		// what a run's preflight reads.
		kfake.GroupMinSessionTimeout(minSessionTimeout),
		kfake.BrokerConfigs(map[string]string{
			"group.min.session.timeout.ms": strconv.FormatInt(minSessionTimeout.Milliseconds(), 10),
		}),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, addr) }),
	}
	if len(o.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(o.Partitions, o.Topics...))
	}
	if o.DataDir != "" {
		opts = append(opts, kfake.DataDir(o.DataDir))
	}
	if len(o.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range o.Users {
			opts = append(opts, kfake.Superuser(u.Mechanism, u.Name, u.Password))
		}
	}
	if o.TLS != nil {
		opts = append(opts, kfake.TLS(o.TLS))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting dev broker on %s: %w", o.Listen, err)
	}
	return &Broker{c: c}, nil
}

// Addrs are the broker addresses clients should use.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker, persisting its state if it has a data dir.
func (b *Broker) Close() { b.c.Close() }
