package main

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// addKafkaSecurityFlags registers how a command reaches Kafka: TLS and
// SASL. Every command that talks to the job's brokers calls it.
func addKafkaSecurityFlags(fs *pflag.FlagSet) {
	fs.Bool("kafka-tls", false, "connect to Kafka over TLS")
	fs.String("kafka-ca-file", "", "PEM file of the CA(s) that signed the brokers' certificates (empty: the system's roots)")
	fs.String("kafka-cert-file", "", "PEM client certificate for mutual TLS (with --kafka-key-file)")
	fs.String("kafka-key-file", "", "PEM private key of --kafka-cert-file")
	fs.Bool("kafka-tls-insecure", false, "accept any broker certificate (testing only)")
	fs.String("kafka-sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.String("kafka-user", "", "SASL user")
	fs.String("kafka-password", "", "SASL password (prefer MICROBATCH_KAFKA_PASSWORD or --kafka-password-file: a flag shows in ps)")
	fs.String("kafka-password-file", "", "file holding the SASL password (a trailing newline is ignored)")
}

// kafkaSecurity reads the flags of addKafkaSecurityFlags.
func kafkaSecurity(s *settings) (kafkautil.Security, error) {
	tls, err := s.boolean("kafka-tls")
	if err != nil {
		return kafkautil.Security{}, err
	}
	insecure, err := s.boolean("kafka-tls-insecure")
	if err != nil {
		return kafkautil.Security{}, err
	}
	sec := kafkautil.Security{
		TLS:                tls,
		CAFile:             s.str("kafka-ca-file"),
		CertFile:           s.str("kafka-cert-file"),
		KeyFile:            s.str("kafka-key-file"),
		InsecureSkipVerify: insecure,
		SASLMechanism:      strings.ToUpper(s.str("kafka-sasl-mechanism")),
		User:               s.str("kafka-user"),
	}
	// Not s.str: spaces may belong to a password.
	if sec.Password, err = secret(s, "kafka-password", "kafka-password-file"); err != nil {
		return sec, err
	}
	if err := sec.Validate(); err != nil {
		return sec, configError{err}
	}
	return sec, nil
}

// secret returns the value of flag, or the contents of fileFlag's file
// without its trailing newline; both set is a configuration error.
func secret(s *settings, flag, fileFlag string) (string, error) {
	value, file := "", s.str(fileFlag)
	if flag != "" {
		value = s.v.GetString(flag)
	}
	if file == "" {
		return value, nil
	}
	if value != "" {
		return "", badConfig("%s and %s: give one, not both", flag, fileFlag)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		// The path is not secret; the error of ReadFile holds no content.
		return "", badConfig("%s: %v", fileFlag, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", badConfig("%s: %s is empty", fileFlag, file)
	}
	return pw, nil
}

// addSinkSecurityFlags registers the sink's password file and CA file.
func addSinkSecurityFlags(fs *pflag.FlagSet) {
	fs.String("sink-password-file", "", "file holding the sink's password, put into the --sink DSN (mysql://, redis://, rediss:// or go-sql-driver; a trailing newline is ignored)")
	fs.String("sink-ca-file", "", "PEM file of the CA(s) the sink's TLS certificate is checked against: MySQL (sets tls=microbatch) or rediss://")
}

// sinkDSN returns dsn with --sink-password-file and --sink-ca-file applied.
func sinkDSN(s *settings, dsn string) (string, error) {
	if file := s.str("sink-password-file"); file != "" {
		pw, err := secret(s, "", "sink-password-file")
		if err != nil {
			return "", err
		}
		if dsn, err = writers.WithPassword(dsn, pw); err != nil {
			return "", configError{fmt.Errorf("sink-password-file: %w", err)}
		}
	}
	if file := s.str("sink-ca-file"); file != "" {
		roots, err := readRoots(file)
		if err != nil {
			return "", badConfig("sink-ca-file: %v", err)
		}
		if dsn, err = writers.WithRootCAs(dsn, roots); err != nil {
			return "", configError{fmt.Errorf("sink-ca-file: %w", err)}
		}
	}
	return dsn, nil
}

func readRoots(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// secureSettings fills cfg.Kafka and applies the sink's secrets to
// cfg.Sink.
func secureSettings(s *settings, cfg *strategies.Config) error {
	var err error
	if cfg.Kafka, err = kafkaSecurity(s); err != nil {
		return err
	}
	if len(cfg.Brokers) == 0 && (cfg.Kafka != kafkautil.Security{}) {
		return badConfig("kafka TLS/SASL settings need --brokers (the embedded demo broker is plaintext)")
	}
	cfg.Sink, err = sinkDSN(s, cfg.Sink)
	return err
}
