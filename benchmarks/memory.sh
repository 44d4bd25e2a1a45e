#!/usr/bin/env bash
# Peak RSS and CPU of `microbatch run` draining a backlog at default flags,
# every strategy (issue 17, item 4).
#
#   benchmarks/memory.sh [-n EVENTS] [-f FORMAT] [-m BINARY] [STRATEGY...]
#
# Needs Apache Kafka, MariaDB and Redis on loopback (`eval "$(scripts/services.sh
# env)"`). Produces EVENTS (default 4,000,000) events of FORMAT (default
# spaced) into a topic named after both, once (it is reused), then runs each
# strategy on a fresh job with nothing but the sink, the topic and
# --until-idle 2s, under /usr/bin/time. STRATEGY is txn, single, idempotent,
# at-least-once, at-most-once, ckpt-xa, ckpt-wal, ckpt-file or ckpt-kafka
# (default: all). -m measures a given microbatch binary (another version)
# instead of building this checkout. Prints one markdown row per strategy.
set -euo pipefail

n=4000000 format=spaced bin=""
while getopts "n:f:m:" o; do
	case $o in
	n) n=$OPTARG ;;
	f) format=$OPTARG ;;
	m) bin=$OPTARG ;;
	*) sed -n '2,14p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
strategies=("$@")
[ ${#strategies[@]} -gt 0 ] || strategies=(txn single idempotent at-least-once at-most-once ckpt-xa ckpt-wal ckpt-file ckpt-kafka)
: "${MICROBATCH_TEST_KAFKA:?set it: eval \"\$(scripts/services.sh env)\"}" "${MICROBATCH_TEST_MYSQL:?}" "${MICROBATCH_TEST_REDIS:?}"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "$bin" ]; then
	bin="$work/microbatch"
	(cd "$repo" && go build -o "$bin" ./cmd/microbatch)
fi
kafka=$MICROBATCH_TEST_KAFKA
topic="memory-$format-$n"
# Produce only into a topic that is not there yet (produce creates it).
if ! "$bin" run --brokers "$kafka" --topic "$topic" --job memory-probe --sink "sqlite://$work/probe.db" --dry-run >/dev/null 2>&1; then
	"$bin" produce --brokers "$kafka" --topic "$topic" --count "$n" --format "$format" --partitions 4 >/dev/null
fi
echo "| strategy | peak RSS | CPU s | wall s |"
echo "|---|--:|--:|--:|"
for s in "${strategies[@]}"; do
	job="memory-$s-$$-$RANDOM"
	case $s in
	idempotent) args=(--strategy idempotent --sink "$MICROBATCH_TEST_REDIS") ;;
	ckpt-xa) args=(--strategy checkpoint --sink "$MICROBATCH_TEST_MYSQL" --state-dir "$work/$job") ;;
	ckpt-wal) args=(--strategy checkpoint --sink-mode wal --sink "$MICROBATCH_TEST_MYSQL" --state-dir "$work/$job") ;;
	ckpt-file) args=(--strategy checkpoint --sink "file://$work/$job-out" --state-dir "$work/$job") ;;
	ckpt-kafka) args=(--strategy checkpoint --sink "kafka://$kafka/$job-out" --state-dir "$work/$job") ;;
	*) args=(--strategy "$s" --sink "$MICROBATCH_TEST_MYSQL") ;;
	esac
	/usr/bin/time -f '%M %e %U %S' -o "$work/time" "$bin" run --brokers "$kafka" --topic "$topic" --job "$job" "${args[@]}" --until-idle 2s -q >"$work/log" 2>&1 ||
		{ echo "$s: run failed:" >&2; tail -5 "$work/log" >&2; exit 1; }
	read -r kb wall user sys <"$work/time"
	printf '| %s | %d MiB | %.1f | %.1f |\n' "$s" $((kb / 1024)) "$(echo "$user + $sys" | bc)" "$wall"
done
