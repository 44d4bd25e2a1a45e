// Package kafkautil holds the sarama configuration shared by every part of
// microbatch that talks to Kafka, and the deterministic event producer used
// by `microbatch produce`, the demo and tests.
package kafkautil
