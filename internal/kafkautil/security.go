package kafkautil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// SASL mechanisms accepted by Security.SASLMechanism ("" = no SASL).
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Security is how microbatch authenticates to Kafka and encrypts the
// connection. The zero value is plaintext without authentication.
//
// Password is a secret: nothing in microbatch logs or prints it, and
// String leaves it out.
type Security struct {
	TLS                bool
	CAFile             string // PEM roots to trust instead of the system's
	CertFile, KeyFile  string // client certificate (mutual TLS)
	InsecureSkipVerify bool   // trust any server certificate (testing only)
	SASLMechanism      string // "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	User, Password     string
}

// String describes the settings without the password.
func (s Security) String() string {
	out := "plaintext"
	if s.TLS {
		out = "tls"
	}
	if s.SASLMechanism != "" {
		out += fmt.Sprintf(" sasl=%s user=%s", s.SASLMechanism, s.User)
	}
	return out
}

// Validate reports settings that cannot work together.
func (s Security) Validate() error {
	if !s.TLS && (s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" || s.InsecureSkipVerify) {
		return errors.New("kafka: --kafka-ca-file, --kafka-cert-file, --kafka-key-file and --kafka-tls-insecure need --kafka-tls")
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return errors.New("kafka: a client certificate needs both --kafka-cert-file and --kafka-key-file")
	}
	switch s.SASLMechanism {
	case "":
		if s.User != "" || s.Password != "" {
			return errors.New("kafka: a user or password needs --kafka-sasl-mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.User == "" {
			return fmt.Errorf("kafka: SASL %s needs --kafka-user", s.SASLMechanism)
		}
		if s.Password == "" {
			return fmt.Errorf("kafka: SASL %s needs a password (--kafka-password, MICROBATCH_KAFKA_PASSWORD or --kafka-password-file)", s.SASLMechanism)
		}
	default:
		return fmt.Errorf("kafka: unknown SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", s.SASLMechanism)
	}
	return nil
}

// TLSConfig returns the client TLS configuration, or nil without TLS.
func (s Security) TLSConfig() (*tls.Config, error) {
	if !s.TLS {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.InsecureSkipVerify} //nolint:gosec // opt-in
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: reading CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka: CA file %s holds no PEM certificate", s.CAFile)
		}
		c.RootCAs = pool
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: loading client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Apply validates s and sets TLS and SASL on c.
func (s Security) Apply(c *sarama.Config) error {
	if err := s.Validate(); err != nil {
		return err
	}
	tc, err := s.TLSConfig()
	if err != nil {
		return err
	}
	if tc != nil {
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = tc
	}
	if s.SASLMechanism == "" {
		return nil
	}
	c.Net.SASL.Enable = true
	c.Net.SASL.Handshake = true
	// v1 (SaslAuthenticate, Kafka 1.0+) is told why authentication failed;
	// with v0 the broker just closes the connection, which reads as an
	// unreachable server.
	c.Net.SASL.Version = sarama.SASLHandshakeV1
	c.Net.SASL.User = s.User
	c.Net.SASL.Password = s.Password
	switch s.SASLMechanism {
	case SASLPlain:
		c.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	case SASLScramSHA256:
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case SASLScramSHA512:
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	}
	return nil
}

// Config returns Config(clientID) with s applied.
func (s Security) Config(clientID string) (*sarama.Config, error) {
	c := Config(clientID)
	if err := s.Apply(c); err != nil {
		return nil, err
	}
	return c, nil
}

// ErrSASLClosed means that, with SASL on, Kafka closed the connection
// instead of answering: brokers speaking the original SASL handshake (and
// kfake) refuse a wrong user, password or mechanism that way, and a TLS
// port closes on a plaintext client the same way. Waiting would not help:
// callers treat it as refused credentials.
var ErrSASLClosed = errors.New("Kafka closed the connection during SASL authentication")

// NewClient connects a sarama client to brokers with conf (from
// s.Config). The error names the brokers, never the password, and is
// ErrSASLClosed where that is what happened.
func (s Security) NewClient(brokers []string, conf *sarama.Config) (sarama.Client, error) {
	c, err := sarama.NewClient(brokers, conf)
	if err != nil {
		return nil, s.ConnectError(brokers, err)
	}
	return c, nil
}

// ConnectError is err, from connecting to brokers, as NewClient returns
// it: for the clients sarama makes itself (a producer, a consumer group).
func (s Security) ConnectError(brokers []string, err error) error {
	where := strings.Join(brokers, ",")
	// A closed connection reads as io.EOF, or as io.ErrUnexpectedEOF when
	// the broker wrote something first: a TLS port answers a plaintext
	// client with an alert record, which reads as the start of a response.
	if s.SASLMechanism != "" && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return fmt.Errorf("connecting to Kafka %s: %w (%s, user %q: wrong user, password or mechanism? or does the port expect TLS?): %w",
			where, ErrSASLClosed, s.SASLMechanism, s.User, err)
	}
	return fmt.Errorf("connecting to Kafka %s: %w", where, err)
}

// scramClient adapts xdg-go/scram to sarama.SCRAMClient.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (x *scramClient) Begin(user, pass, authzID string) error {
	c, err := x.hash.NewClient(user, pass, authzID)
	if err != nil {
		return err
	}
	x.conv = c.NewConversation()
	return nil
}

func (x *scramClient) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *scramClient) Done() bool                            { return x.conv.Done() }
