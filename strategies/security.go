package strategies

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// kafkaConfig is the sarama configuration for clientID with the job's
// Kafka security applied. Its errors are configuration errors (a missing
// CA file, say), never retried.
func (c Config) kafkaConfig(clientID string) (*sarama.Config, error) {
	conf, err := c.Kafka.Config(clientID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return conf, nil
}

// isTLSFailure reports a TLS handshake that failed on certificates or
// protocol — a server not trusted, a name that does not match, a server
// that does not speak TLS — which retrying cannot fix.
func isTLSFailure(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		alert    tls.AlertError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &header) || errors.As(err, &alert)
}
