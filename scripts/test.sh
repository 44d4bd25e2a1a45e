#!/usr/bin/env bash
# The project's test command (CI runs it through .ci/run).
#
#   scripts/test.sh                      go vet ./... && go test -race -count=1 -timeout 18m ./...
#   scripts/test.sh -run Foo ./batch/... go test -race -count=1 -timeout 18m -run Foo ./batch/...
#                                        (no package given -> ./... is added; go vet is skipped
#                                         unless MICROBATCH_VET=1)
#
# Starts MariaDB, PostgreSQL, Redis and Apache Kafka on loopback with scripts/services.sh
# (installing them on first use), exports MICROBATCH_TEST_* for the tests and
# stops the servers again at exit -- unless they were already running before
# (then they are someone else's and are left alone) or MICROBATCH_KEEP_SERVICES=1.
# Exit code: that of the go commands (or of the service start-up, if that failed).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$REPO"

log() { printf 'test: %s\n' "$*" >&2; }

# Go from the official tarball often lives outside PATH in fresh shells.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || {
	log "error: 'go' not found (install Go $(awk '/^go / {print $2; exit}' go.mod) or newer)"
	exit 1
}

# -race needs cgo and a C compiler.
if ! command -v gcc >/dev/null 2>&1 && ! command -v cc >/dev/null 2>&1; then
	log "no C compiler (needed by go test -race); installing gcc"
	sudo=()
	[[ $EUID -ne 0 ]] && sudo=(sudo -n)
	{
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
			"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
				-o DPkg::Lock::Timeout=600 --no-install-recommends gcc libc6-dev
	} </dev/null >&2
fi
export CGO_ENABLED=1

SERVICES="$REPO/scripts/services.sh"

preexisting=0
if "$SERVICES" status >/dev/null 2>&1; then
	preexisting=1
fi

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
	local rc=$?
	if [[ ${MICROBATCH_KEEP_SERVICES:-0} == 1 ]]; then
		log "leaving the services running (MICROBATCH_KEEP_SERVICES=1); stop them with scripts/services.sh stop"
	elif ((preexisting)); then
		log "leaving the services running (they were running before this run)"
	else
		"$SERVICES" stop || log "warning: scripts/services.sh stop failed"
	fi
	return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$SERVICES" start
eval "$("$SERVICES" env)"

log "using servers:"
log "  Kafka:      $MICROBATCH_TEST_KAFKA ($MICROBATCH_TEST_KAFKA_KIND, KRaft single node)"
log "  MariaDB:    $MICROBATCH_TEST_MYSQL"
log "  PostgreSQL: $MICROBATCH_TEST_POSTGRES (TLS: $MICROBATCH_TEST_POSTGRES_TLS)"
log "  Redis:      $MICROBATCH_TEST_REDIS"
log "$(go version)"

vet_rc=0
fmt_rc=0
test_rc=0
if (($# == 0)); then
	log "go vet ./..."
	go vet ./... || vet_rc=$?
	log "gofmt -l"
	unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.services/*'))"
	if [[ -n $unformatted ]]; then
		log "gofmt would change: $unformatted"
		fmt_rc=1
	fi
	log "go test -race -count=1 -timeout 18m ./..."
	go test -race -count=1 -timeout 18m ./... || test_rc=$?
else
	# Add ./... unless the arguments already name packages. Arguments after
	# -args belong to the test binary.
	module="$(awk '/^module / {print $2; exit}' go.mod 2>/dev/null || true)"
	have_pkg=0
	for a in "$@"; do
		[[ $a == -args || $a == --args ]] && break
		case $a in
		. | ./* | .. | ../* | /* | *...*) have_pkg=1 ;;
		*)
			if [[ -n $module && ($a == "$module" || $a == "$module"/*) ]]; then
				have_pkg=1
			fi
			;;
		esac
	done
	args=("$@")
	if ((!have_pkg)); then
		args=()
		added=0
		for a in "$@"; do
			if ((!added)) && [[ $a == -args || $a == --args ]]; then
				args+=(./...)
				added=1
			fi
			args+=("$a")
		done
		((added)) || args+=(./...)
	fi
	if [[ ${MICROBATCH_VET:-0} == 1 ]]; then
		log "go vet ./..."
		go vet ./... || vet_rc=$?
	fi
	# A later -timeout in the user's arguments overrides this default.
	log "go test -race -count=1 -timeout 18m ${args[*]}"
	go test -race -count=1 -timeout 18m "${args[@]}" || test_rc=$?
fi

if ((vet_rc != 0)); then
	log "go vet failed (exit $vet_rc)"
fi
if ((fmt_rc != 0)); then
	log "gofmt check failed: run gofmt -w on the files above"
fi
if ((test_rc != 0)); then
	log "go test failed (exit $test_rc)"
	exit "$test_rc"
fi
((vet_rc != 0)) && exit "$vet_rc"
exit "$fmt_rc"
