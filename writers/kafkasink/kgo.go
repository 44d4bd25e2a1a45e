package kafkasink

import (
	"fmt"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The slots' producers are franz-go clients: sarama's AsyncProducer passes
// every record through four goroutines and channels, which cost more CPU
// per record than encoding and sending it (benchmarks/README.md).

// producerOpts translates conf (the sarama base with Security applied)
// into the options every slot's producer shares; each adds its
// TransactionalID. From a caller's base it takes the client id, the
// network settings (dial timeout, TLS, SASL PLAIN and SCRAM), the
// largest batch (MaxMessageBytes), compression and the flush frequency
// (linger).
func producerOpts(cfg Config, conf *sarama.Config) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(conf.ClientID),
		kgo.DialTimeout(conf.Net.DialTimeout),
		kgo.TransactionTimeout(cfg.TxnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxVersions(txnV1Versions()),
		// Sarama's hash partitioner, so that a key's records land in the
		// partition they did before the client changed.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a))),
		// A record not delivered within the transaction timeout can't be
		// part of a transaction that commits: fail it, and the
		// transaction, instead of retrying for ever.
		kgo.RecordDeliveryTimeout(cfg.TxnTimeout),
		kgo.DisableClientMetrics(),
		// Records a producer holds unacknowledged before Write blocks:
		// a few lingers' worth at the rate one subtask writes, so that a
		// job's peak memory stays bounded (franz-go's default, 50,000
		// per producer, added 50 MiB to a two-subtask job).
		kgo.MaxBufferedRecords(maxBufferedRecords),
	}
	if conf.Producer.MaxMessageBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(min(conf.Producer.MaxMessageBytes, 1<<30))))
	}
	if conf.Producer.Flush.Frequency > 0 {
		opts = append(opts, kgo.ProducerLinger(conf.Producer.Flush.Frequency))
	}
	switch conf.Producer.Compression {
	case sarama.CompressionNone:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case sarama.CompressionGZIP:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case sarama.CompressionSnappy:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case sarama.CompressionLZ4:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case sarama.CompressionZSTD:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	}
	if conf.Net.TLS.Enable {
		tc := conf.Net.TLS.Config
		if tc == nil {
			opts = append(opts, kgo.DialTLS())
		} else {
			opts = append(opts, kgo.DialTLSConfig(tc.Clone()))
		}
	}
	if conf.Net.SASL.Enable {
		user, pass := conf.Net.SASL.User, conf.Net.SASL.Password
		switch conf.Net.SASL.Mechanism {
		case sarama.SASLTypePlaintext, "":
			opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		case sarama.SASLTypeSCRAMSHA256:
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case sarama.SASLTypeSCRAMSHA512:
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		default:
			return nil, fmt.Errorf("SASL mechanism %s is not supported by the Kafka sink (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", conf.Net.SASL.Mechanism)
		}
	}
	return opts, nil
}

// maxBufferedRecords bounds each producer's records in flight.
const maxBufferedRecords = 10_000

// txnV1Versions caps the request versions at those of transaction
// version 1: Produce v11 (partitions added by AddPartitionsToTxn), EndTxn
// v4 and TxnOffsetCommit v4. From transaction version 2 (KIP-890 part 2,
// Kafka 4.0's default) on, every EndTxn bumps the producer's epoch, so a
// slot's transactions would not share the identity that Pending holds and
// the package doc's argument for reusing a slot rests on. A broker with
// transaction version 2 enabled still serves version 1 clients.
func txnV1Versions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	return v
}

// fnv32a is FNV-1a, 32 bits (hash/fnv's New32a, without its allocation).
func fnv32a(b []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}
