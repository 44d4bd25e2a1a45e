package kafkasink

import "github.com/microbatch/microbatch/internal/kafkautil"

// Security is how a Kafka writer (and strategies.Config.Kafka)
// authenticates to the brokers and encrypts the connection: TLS (CAFile,
// CertFile/KeyFile for mutual TLS) and SASL (SASLMechanism one of
// SASLPlain, SASLScramSHA256, SASLScramSHA512, with User and Password).
// The zero value is plaintext without authentication. The Password is
// never logged or printed: String leaves it out.
type Security = kafkautil.Security

// SASL mechanisms for Security.SASLMechanism ("" = no SASL).
const (
	SASLPlain       = kafkautil.SASLPlain
	SASLScramSHA256 = kafkautil.SASLScramSHA256
	SASLScramSHA512 = kafkautil.SASLScramSHA512
)
