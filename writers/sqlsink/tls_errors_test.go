package sqlsink

import (
	"context"
	"net/url"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/writers"
)

// A server certificate the client refuses is a setting to fix, not an
// outage: writers.IsRetryable says no, so a run exits at once instead of
// waiting for --outage-timeout. pgx wraps the refusal in the ConnectError
// a server that is down gives, which is retried.
func TestTLSRefusedNotRetryable(t *testing.T) {
	ctx := context.Background()
	t.Run("PostgreSQL", func(t *testing.T) {
		u, err := url.Parse(testutil.NeedServer(t, testutil.EnvPostgresTLS))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Del("sslrootcert") // the system's roots: the test CA is not among them
		q.Set("connect_timeout", "5")
		u.RawQuery = q.Encode()
		_, err = Open(ctx, u.String())
		checkRetryable(t, err, "", false)
	})
	t.Run("MariaDB", func(t *testing.T) {
		u, err := url.Parse(testutil.NeedServer(t, testutil.EnvMySQL))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("tls", "true") // verified against the system's roots
		u.RawQuery = q.Encode()
		_, err = Open(ctx, u.String())
		checkRetryable(t, err, "", false)
	})
	t.Run("refused connection still retryable", func(t *testing.T) {
		_, err := Open(ctx, "postgres://mb:pw@127.0.0.1:1/db?sslmode=verify-full&connect_timeout=2")
		checkRetryable(t, err, "", true)
		if writers.IsRetryable(nil) {
			t.Fatal("IsRetryable(nil)")
		}
	})
}
