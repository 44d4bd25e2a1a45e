package kafkautil

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

func TestSecurityValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  Security
		want string // "" = valid
	}{
		{"zero", Security{}, ""},
		{"tls", Security{TLS: true, CAFile: "ca.pem"}, ""},
		{"plain", Security{SASLMechanism: SASLPlain, User: "u", Password: "pw-Q9"}, ""},
		{"scram512", Security{SASLMechanism: SASLScramSHA512, User: "u", Password: "pw-Q9"}, ""},
		{"ca without tls", Security{CAFile: "ca.pem"}, "need --kafka-tls"},
		{"cert without key", Security{TLS: true, CertFile: "c.pem"}, "both --kafka-cert-file and --kafka-key-file"},
		{"no user", Security{SASLMechanism: SASLPlain, Password: "pw-Q9"}, "needs --kafka-user"},
		{"no password", Security{SASLMechanism: SASLScramSHA256, User: "u"}, "needs a password"},
		{"password without sasl", Security{Password: "pw-Q9"}, "needs --kafka-sasl-mechanism"},
		{"unknown mechanism", Security{SASLMechanism: "GSSAPI", User: "u", Password: "pw-Q9"}, "unknown SASL mechanism"},
	} {
		err := tc.sec.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), tc.sec.Password) && tc.sec.Password != "" {
			t.Errorf("%s: error shows the password", tc.name)
		}
	}
}

func TestSecurityApply(t *testing.T) {
	c := Config("x")
	sec := Security{SASLMechanism: SASLScramSHA256, User: "u", Password: "pw-Q9"}
	if err := sec.Apply(c); err != nil {
		t.Fatal(err)
	}
	if !c.Net.SASL.Enable || c.Net.SASL.Mechanism != sarama.SASLTypeSCRAMSHA256 || c.Net.SASL.SCRAMClientGeneratorFunc == nil || c.Net.TLS.Enable {
		t.Fatalf("SASL not applied: %+v", c.Net.SASL)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := sec.String(); strings.Contains(s, "pw-Q9") {
		t.Errorf("String shows the password: %s", s)
	}
	if err := (Security{TLS: true, CAFile: "/nonexistent.pem"}).Apply(Config("x")); err == nil {
		t.Error("a missing CA file was accepted")
	}
}
