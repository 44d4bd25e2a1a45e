package strategies

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"

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

// saslClosed marks err as ErrDenied when SASL is on and the broker closed
// the connection (EOF) after accepting it: brokers speaking the original
// SASL handshake (and kfake) refuse a wrong password that way instead of
// answering SASL_AUTHENTICATION_FAILED, and waiting would not help. A
// plaintext client at a TLS port is closed the same way, so the message
// names that too.
func saslClosed(cfg Config, err error) error {
	if cfg.Kafka.SASLMechanism == "" || !errors.Is(err, io.EOF) || isTLSFailure(err) {
		return err
	}
	return fmt.Errorf("%w: Kafka closed the connection during SASL %s authentication of user %q (wrong user, password or mechanism? or does the port expect TLS?): %w",
		ErrDenied, cfg.Kafka.SASLMechanism, cfg.Kafka.User, err)
}
