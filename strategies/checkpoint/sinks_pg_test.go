package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
)

// TestPostgresNoPreparedTransactionsRefused: checkpoint mode into a
// PostgreSQL server that allows no prepared transactions stops at start
// with ErrConfig (exit 2) naming the setting to change; the server's
// answer is stood in for (the test server allows 64, and its settings are
// not ours to change). The real server's answer is read and let through.
func TestPostgresNoPreparedTransactionsRefused(t *testing.T) {
	dsn := testutil.FreshPostgresDatabase(t, testutil.NeedServer(t, testutil.EnvPostgres))
	spec, err := ParseSink(dsn, SinkMode2PC)
	if err != nil || spec.Kind != SinkPG2PC {
		t.Fatalf("ParseSink(postgres://…, 2pc) = %+v, %v; want the pg2pc sink", spec, err)
	}
	cfg := Config{Job: "pg-noprep", Sink: dsn, SinkMode: SinkMode2PC, OperatorParallelism: 1}
	cfg.setDefaults()
	cfg.maxPrepared = func(context.Context) (int, error) { return 0, nil }
	s, err := openSinks(t.Context(), cfg, spec, 1)
	if err == nil {
		s.close()
		t.Fatal("openSinks accepted a server with max_prepared_transactions = 0")
	}
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "set max_prepared_transactions") {
		t.Fatalf("openSinks = %v, want an ErrConfig naming max_prepared_transactions", err)
	}

	cfg.maxPrepared = nil
	s, err = openSinks(t.Context(), cfg, spec, 1)
	if err != nil {
		t.Fatalf("openSinks on the test server: %v", err)
	}
	if got := s.String(); !strings.HasSuffix(got, "(prepared transactions)") {
		t.Errorf("sink %q, want it named as prepared transactions", got)
	}
	s.close()
}
