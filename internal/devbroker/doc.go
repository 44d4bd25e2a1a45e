// Package devbroker runs the embedded development Kafka broker (kfake), used
// by `microbatch broker` and by `microbatch run` without --brokers. It is a
// real Kafka-protocol server, not a mock, but single-node and not tuned for
// production.
package devbroker
