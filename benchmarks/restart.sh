#!/usr/bin/env bash
# Restart after SIGKILL → first committed batch, default flags against a
# fixed --instance-id, the two measured alternately on the same broker.
#
#   benchmarks/restart.sh [-n RESTARTS] [-b BROKERS] [-s SINK_DIR] [-m BINARY]
#
# Without -b it starts the dev broker (`microbatch broker`). Each round:
# start `run` on a backlog, wait for its first "batch committed" line, note
# the time from the process start, SIGKILL it 0.5 s later, produce 4,000
# more events, restart at once. Sinks are SQLite files in SINK_DIR (a
# temporary directory by default). -m measures a given microbatch binary
# (another version) instead of building this checkout. Prints min /
# median / max per variant.
set -euo pipefail

n=10 brokers="" dir="" bin=""
while getopts "n:b:s:m:" o; do
	case $o in
	n) n=$OPTARG ;;
	b) brokers=$OPTARG ;;
	s) dir=$OPTARG ;;
	m) bin=$OPTARG ;;
	*) sed -n '2,14p' "$0" >&2; exit 2 ;;
	esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
work="$(mktemp -d)"
dir=${dir:-$work}
mb="$work/microbatch"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
if [[ -n $bin ]]; then
	cp "$bin" "$mb"
else
	(cd "$repo" && go build -o "$mb" ./cmd/microbatch)
fi

if [[ -z $brokers ]]; then
	"$mb" broker --listen 127.0.0.1:0 >"$work/broker.log" 2>&1 &
	pids+=($!)
	disown
	for _ in $(seq 1 100); do
		brokers=$(grep -o 'listening on [^ ]*' "$work/broker.log" | head -n1 | cut -d' ' -f3 || true)
		[[ -n $brokers ]] && break
		sleep 0.1
	done
	[[ -n $brokers ]] || { echo "restart.sh: the dev broker did not start:" >&2; cat "$work/broker.log" >&2; exit 1; }
fi

# first_commit LOG START: seconds from START ($EPOCHREALTIME) until the
# first "batch committed" line is in LOG (polled every 10 ms, up to 60 s).
first_commit() {
	local log=$1 start=$2
	for _ in $(seq 1 6000); do
		if grep -q 'batch committed' "$log"; then
			echo "$EPOCHREALTIME - $start" | bc
			return
		fi
		sleep 0.01
	done
	echo "restart.sh: no commit within 60 s; log $log:" >&2
	tail -20 "$log" >&2
	exit 1
}

declare -A times
variants=(default instance-id)
for v in "${variants[@]}"; do
	topic="restart-$v-$$"
	"$mb" produce --brokers "$brokers" --topic "$topic" --partitions 8 --count 20000 >/dev/null
done
skip_default=20000 skip_instance=20000
for i in $(seq 0 "$n"); do
	for v in "${variants[@]}"; do
		topic="restart-$v-$$"
		extra=()
		[[ $v == instance-id ]] && extra=(--instance-id "restart-$$-0")
		log="$work/$v.log"
		start=$EPOCHREALTIME
		"$mb" run --brokers "$brokers" --topic "$topic" --job "$topic" \
			--sink "sqlite://$dir/$topic.db" "${extra[@]}" >"$log" 2>&1 &
		pid=$!
		pids+=("$pid")
		t=$(first_commit "$log" "$start")
		# Round 0 is the first start (nothing to take over): not a restart.
		((i > 0)) && times[$v]+="$t "
		sleep 0.5
		kill -9 "$pid"
		wait "$pid" 2>/dev/null || true
		if [[ $v == default ]]; then s=$skip_default; skip_default=$((s + 4000)); else s=$skip_instance; skip_instance=$((s + 4000)); fi
		"$mb" produce --brokers "$brokers" --topic "$topic" --partitions 8 --skip "$s" --count 4000 >/dev/null
	done
done

echo "restart after SIGKILL → first commit, $n restarts each, broker $brokers"
for v in "${variants[@]}"; do
	# shellcheck disable=SC2086
	printf '%-12s %s\n' "$v" "$(printf '%s\n' ${times[$v]} | sort -n | awk '
		{ a[NR] = $1 }
		END { printf "min %.0f ms  median %.0f ms  max %.0f ms", a[1] * 1000, a[int((NR + 1) / 2)] * 1000, a[NR] * 1000 }')"
done
