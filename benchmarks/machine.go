package benchmarks

import (
	"bufio"
	"context"
	"os"
	"strings"

	"github.com/microbatch/microbatch/writers/redissink"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

// cpuModel reads the CPU model name from /proc/cpuinfo ("" elsewhere).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// sqlVersion names the SQL server, e.g. "MySQL-compatible 10.11.6-MariaDB".
func sqlVersion(ctx context.Context, w *sqlsink.Writer) string {
	var v string
	if err := w.DB().QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err == nil {
		return v
	}
	if err := w.DB().QueryRowContext(ctx, "SELECT 'SQLite ' || sqlite_version()").Scan(&v); err == nil {
		return v
	}
	return w.String()
}

// redisVersion reads redis_version from INFO server.
func redisVersion(ctx context.Context, r *redissink.Sink) string {
	info, err := r.Client().Info(ctx, "server").Result()
	if err != nil {
		return r.String()
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "Redis " + v
		}
	}
	return r.String()
}
