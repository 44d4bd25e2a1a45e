package testutil

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func pgConnect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", redactDSN(dsn), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}

// pgTLS reports whether the session runs over TLS, as the server sees it.
func pgTLS(t *testing.T, conn *pgx.Conn) bool {
	t.Helper()
	var ssl bool
	if err := conn.QueryRow(t.Context(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil {
		t.Fatalf("reading pg_stat_ssl: %v", err)
	}
	return ssl
}

// The PostgreSQL of scripts/services.sh is what the PostgreSQL sink's tests
// need: prepared transactions enabled (the checkpoint mode's two-phase
// commit), and TLS with the test CA as a user that can't log in without it.
func TestPostgresServer(t *testing.T) {
	dsn := NeedServer(t, EnvPostgres)
	conn := pgConnect(t, dsn)
	var s string
	if err := conn.QueryRow(t.Context(), "SHOW max_prepared_transactions").Scan(&s); err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(s); err != nil || n <= 0 {
		t.Errorf("max_prepared_transactions = %q, want > 0 (the two-phase commit sink needs it)", s)
	}
	if pgTLS(t, conn) {
		t.Errorf("%s (sslmode=disable) runs over TLS", EnvPostgres)
	}

	tlsDSN := NeedServer(t, EnvPostgresTLS)
	if !strings.Contains(tlsDSN, "sslmode=verify-full") {
		t.Errorf("%s = %s, want sslmode=verify-full", EnvPostgresTLS, redactDSN(tlsDSN))
	}
	if !pgTLS(t, pgConnect(t, tlsDSN)) {
		t.Errorf("%s connected without TLS", EnvPostgresTLS)
	}
	// Its user is refused without TLS: a connection as it proves TLS.
	u, err := url.Parse(tlsDSN)
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery = "sslmode=disable"
	if c, err := pgx.Connect(t.Context(), u.String()); err == nil {
		_ = c.Close(context.Background())
		t.Errorf("the user of %s logged in without TLS", EnvPostgresTLS)
	}
}

func TestFreshPostgresDatabase(t *testing.T) {
	dsn := NeedServer(t, EnvPostgres)
	var name string
	var held *pgx.Conn
	t.Cleanup(func() {
		if held != nil {
			_ = held.Close(context.Background())
		}
	})
	t.Run("fresh", func(t *testing.T) {
		fresh := FreshPostgresDatabase(t, dsn)
		conn, err := pgx.Connect(t.Context(), fresh)
		if err != nil {
			t.Fatalf("connecting to %s: %v", redactDSN(fresh), err)
		}
		held = conn
		if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "mbtest_") || !strings.Contains(fresh, "/"+name+"?") {
			t.Fatalf("connected to %q through %s", name, redactDSN(fresh))
		}
		var tables int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Errorf("fresh database %s has %d tables", name, tables)
		}
		if _, err := conn.Exec(t.Context(), "CREATE TABLE mb_totals (k TEXT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		// conn stays open past the cleanup: the drop must end its session.
	})
	var exists bool
	if err := pgConnect(t, dsn).QueryRow(t.Context(),
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s is still there after the test's cleanup", name)
	}
}
