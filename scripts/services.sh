#!/usr/bin/env bash
# Real servers for the integration tests, all on loopback, all state in one
# directory: MariaDB, PostgreSQL, Redis and a single-node Apache Kafka 4.x (KRaft).
#
#   scripts/services.sh start    install what is missing, start (or reuse) all four, wait until they answer
#                                (each also serves TLS, see below; the test CA is made once per state dir)
#   scripts/services.sh env      print `export MICROBATCH_TEST_*=...` lines (use: eval "$(scripts/services.sh env)")
#   scripts/services.sh status   show what is running (exit 0 only if all four answer)
#   scripts/services.sh stop     stop them (SIGTERM, SIGINT for PostgreSQL; SIGKILL after a bound), remove the state dir
#   scripts/services.sh kafka-tool CLASS ARGS...   run a Kafka CLI class (TopicCommand, ConsoleProducer, ...)
#   scripts/services.sh kafka-libs   print the directory of the Kafka jars (exit 1 if `start` has not installed them);
#                                    the system tests start private brokers from it
#
# No systemd/service is used: every server is a plain background process, so
# this works in a bare container or CI. Needs root (or sudo) only to apt-get
# install mariadb-server / postgresql / redis-server / chromium when they are
# missing. PostgreSQL refuses to run as root: run as root, the script runs it
# as a system user it creates (mbpostgres).
#
# TLS: a self-signed test CA and a server certificate for 127.0.0.1/localhost
# (openssl, <state dir>/tls). MariaDB and PostgreSQL offer TLS on their port
# (user mbtls must use it; PostgreSQL logins are SCRAM-SHA-256), Redis has a
# second, TLS-only port, and Kafka a second listener,
# SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; one test user for all
# three). `env` prints where they are and the test-only credentials;
# <state dir>/kafka/client-sasl-ssl.properties is a --command-config for kafka-tool.
#
# Environment (all optional):
#   MICROBATCH_SERVICES_DIR            state dir (default: <repo>/.services)
#   MICROBATCH_TEST_MYSQL_PORT         MariaDB port, plaintext and TLS (default 13306)
#   MICROBATCH_TEST_POSTGRES_PORT      PostgreSQL port, plaintext and TLS (default 15432)
#   MICROBATCH_TEST_REDIS_PORT         Redis port              (default 16379)
#   MICROBATCH_TEST_REDIS_TLS_PORT     Redis TLS port          (default 16380)
#   MICROBATCH_TEST_KAFKA_PORT         Kafka broker port       (default 19092)
#   MICROBATCH_TEST_KAFKA_CONTROLLER_PORT  KRaft controller port (default 19093)
#   MICROBATCH_TEST_KAFKA_SASL_SSL_PORT    Kafka SASL_SSL port   (default 19094)
#   MICROBATCH_KAFKA_VERSION           Apache Kafka 4.x version (default 4.3.1)
#   MICROBATCH_KAFKA_HEAP              Kafka max heap          (default 1g)
#   MICROBATCH_SERVICES_TIMEOUT_KAFKA  seconds to wait for Kafka (default 120); _MYSQL (60), _POSTGRES (60), _REDIS (30)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DIR="$(realpath -m "${MICROBATCH_SERVICES_DIR:-$REPO/.services}")"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/microbatch"

MYSQL_PORT="${MICROBATCH_TEST_MYSQL_PORT:-13306}"
PG_PORT="${MICROBATCH_TEST_POSTGRES_PORT:-15432}"
REDIS_PORT="${MICROBATCH_TEST_REDIS_PORT:-16379}"
REDIS_TLS_PORT="${MICROBATCH_TEST_REDIS_TLS_PORT:-16380}"
KAFKA_PORT="${MICROBATCH_TEST_KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${MICROBATCH_TEST_KAFKA_CONTROLLER_PORT:-19093}"
KAFKA_SASL_SSL_PORT="${MICROBATCH_TEST_KAFKA_SASL_SSL_PORT:-19094}"
KAFKA_VERSION_WANTED="${MICROBATCH_KAFKA_VERSION:-4.3.1}"
KAFKA_HEAP="${MICROBATCH_KAFKA_HEAP:-1g}"
TIMEOUT_KAFKA="${MICROBATCH_SERVICES_TIMEOUT_KAFKA:-120}"
TIMEOUT_MYSQL="${MICROBATCH_SERVICES_TIMEOUT_MYSQL:-60}"
TIMEOUT_POSTGRES="${MICROBATCH_SERVICES_TIMEOUT_POSTGRES:-60}"
TIMEOUT_REDIS="${MICROBATCH_SERVICES_TIMEOUT_REDIS:-30}"
STOP_TIMEOUT="${MICROBATCH_SERVICES_STOP_TIMEOUT:-30}"

MYSQL_DB=mbtest
MYSQL_USER=mb
MYSQL_PASS=mbpass
# Like mb, but REQUIRE SSL: a connection as mbtls is proof of TLS.
MYSQL_TLS_USER=mbtls

# PostgreSQL: the same names; mbtls may log in over TLS only (pg_hba.conf).
PG_DB=mbtest
PG_USER=mb
PG_PASS=mbpass
PG_TLS_USER=mbtls

# The Kafka SASL_SSL listener's user, for PLAIN and both SCRAMs. Test-only:
# the broker listens on loopback. No ',', ']' or '"' (kafka-storage --add-scram syntax).
KAFKA_SASL_USER=mbsasl
KAFKA_SASL_PASS=mbsasl-test-pw-4711

# The test CA (ca.pem) and the server certificate it signed (server.pem,
# server.key; kafka-keystore.pem is key + certificate for Kafka's PEM keystore).
TLS_DIR="$DIR/tls"
TLS_CA="$TLS_DIR/ca.pem"
TLS_CERT="$TLS_DIR/server.pem"
TLS_KEY="$TLS_DIR/server.key"
TLS_KAFKA_PEM="$TLS_DIR/kafka-keystore.pem"

MARKER="$DIR/.microbatch-services"

log() { printf 'services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- helpers

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
	timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# port_taken_msg PORT ENVVAR: error text for a port held by a stranger.
port_taken_msg() {
	local port=$1 var=$2 pid="" who=""
	if command -v ss >/dev/null 2>&1; then
		pid="$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2 || true)"
	fi
	if [[ -n $pid ]]; then
		who=" by pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?'), cwd $(readlink "/proc/$pid/cwd" 2>/dev/null || echo '?'))"
	fi
	printf 'port %s is taken%s, which is not from %s; stop it, or point MICROBATCH_SERVICES_DIR at the dir that owns it, or set %s\n' \
		"$port" "$who" "$DIR" "$var"
}

# proc_ours PID: the process exists and belongs to this state dir (its cwd or
# its command line is under $DIR). Guards against pid reuse.
proc_ours() {
	local pid=$1 cwd cmd
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -d /proc/$pid ]] || return 1
	# A zombie is not alive.
	if [[ -r /proc/$pid/stat ]] && [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]]; then
		return 1
	fi
	cwd="$(readlink "/proc/$pid/cwd" 2>/dev/null || true)"
	if [[ -n $cwd && ( $cwd == "$DIR" || $cwd == "$DIR"/* ) ]]; then
		return 0
	fi
	cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
	[[ $cmd == *"$DIR/"* ]]
}

# pid_of PIDFILE: prints the pid if the file names a live process of ours.
pid_of() {
	local f=$1 pid
	[[ -s $f ]] || return 1
	pid="$(tr -dc '0-9' <"$f")"
	proc_ours "$pid" || return 1
	printf '%s\n' "$pid"
}

# stop_pid NAME PID [SIGNAL]: SIGNAL (default TERM), wait up to
# STOP_TIMEOUT s, then SIGKILL.
stop_pid() {
	local name=$1 pid=$2 sig=${3:-TERM} i
	proc_ours "$pid" || return 0
	log "stopping $name (pid $pid)"
	kill -"$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
		proc_ours "$pid" || return 0
		sleep 0.2
	done
	log "$name (pid $pid) did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		proc_ours "$pid" || return 0
		sleep 0.1
	done
	log "warning: $name (pid $pid) is still there after SIGKILL"
}

# stray_pids: server processes of ours that no pid file points at any more.
stray_pids() {
	local p comm
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[[ $p == "$$" || $p == "$BASHPID" ]] && continue
		comm="$(cat "/proc/$p/comm" 2>/dev/null || true)"
		case $comm in
		mariadbd | mysqld | postgres | redis-server | redis-check-aof | java) ;;
		*) continue ;;
		esac
		proc_ours "$p" && printf '%s\n' "$p"
	done
	return 0
}

# url_path_escape S: S with every byte but [A-Za-z0-9/._~-] %-escaped (for a
# file path in a URL's query).
url_path_escape() {
	local s=$1 out="" c i
	local LC_ALL=C
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case $c in
		[A-Za-z0-9/._~-]) out+=$c ;;
		*) out+="$(printf '%%%02X' "'$c")" ;;
		esac
	done
	printf '%s\n' "$out"
}

tail_log() {
	local f
	for f in "$@"; do
		[[ -s $f ]] || continue
		log "---- last lines of $f ----"
		tail -n 40 "$f" >&2 || true
		log "---- end of $f ----"
	done
}

# Launch a command as a detached background process (own session, so a ^C in
# the terminal that ran `start` does not kill it), cwd $1, output to $2.
# Sets LAUNCHED_PID. The lock fd is closed so servers do not inherit it.
launch() {
	local cwd=$1 out=$2
	shift 2
	(
		exec 8>&- 9>&-
		cd "$cwd"
		exec setsid "$@" >"$out" 2>&1 </dev/null
	) &
	LAUNCHED_PID=$!
}

ensure_dir() {
	if [[ -e $DIR && ! -d $DIR ]]; then
		die "$DIR exists and is not a directory"
	fi
	mkdir -p "$DIR"
	[[ -e $MARKER ]] || printf 'state of scripts/services.sh; removed by "scripts/services.sh stop"\n' >"$MARKER"
}

# Serialize concurrent start/stop runs on the same state dir.
take_lock() {
	ensure_dir
	exec 9>"$DIR/.lock"
	if ! flock -n 9; then
		log "another scripts/services.sh is working on $DIR; waiting for it"
		flock -w 900 9 || die "timed out waiting for the lock on $DIR/.lock"
	fi
	# The other run may have been a `stop` that removed the dir.
	ensure_dir
}

# ---------------------------------------------------------------- installs

find_mariadbd() {
	local c
	for c in mariadbd mysqld /usr/sbin/mariadbd /usr/sbin/mysqld /usr/libexec/mariadbd; do
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return 0
		fi
	done
	return 1
}

find_install_db() {
	local c
	for c in mariadb-install-db mysql_install_db /usr/bin/mariadb-install-db /usr/bin/mysql_install_db; do
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return 0
		fi
	done
	return 1
}

find_mysql_client() {
	local c
	for c in mariadb mysql; do
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return 0
		fi
	done
	return 1
}

java_major() {
	java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}' | awk -F. '{ if ($1 == "1") print $2; else print $1 }'
}

apt_install() {
	local sudo=() created_policy=0 rc=0
	if [[ $EUID -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install: $*"
		sudo=(sudo -n)
	fi
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install these yourself: $*"
	log "installing with apt-get: $* (one-time)"
	# Keep the packages' maintainer scripts from starting system-wide
	# mariadb/redis services (we run our own instances): policy-rc.d 101 =
	# "action forbidden". Only if there is no policy already, and removed after.
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\n# temporary, from microbatch scripts/services.sh\nexit 101\n' |
			"${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
		"${sudo[@]}" chmod 755 /usr/sbin/policy-rc.d
		created_policy=1
	fi
	{
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
			"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
				-o DPkg::Lock::Timeout=600 \
				-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
				--no-install-recommends "$@"
	} </dev/null >"$CACHE_ROOT/apt.log" 2>&1 || rc=$?
	if ((created_policy)); then
		"${sudo[@]}" rm -f /usr/sbin/policy-rc.d || true
	fi
	if ((rc != 0)); then
		tail -n 40 "$CACHE_ROOT/apt.log" >&2 || true
		die "apt-get install $* failed (exit $rc); full log: $CACHE_ROOT/apt.log"
	fi
}

install_missing() {
	local pkgs=()
	mkdir -p "$CACHE_ROOT"
	find_mariadbd >/dev/null || pkgs+=(mariadb-server)
	find_install_db >/dev/null || pkgs+=(mariadb-server)
	find_mysql_client >/dev/null || pkgs+=(mariadb-client)
	# Debian's postgresql (the distribution's major version): initdb, postgres,
	# psql and pg_isready in /usr/lib/postgresql/<major>/bin.
	pg_bin_dir >/dev/null || pkgs+=(postgresql)
	[[ $EUID -ne 0 ]] || command -v setpriv >/dev/null 2>&1 || pkgs+=(util-linux)
	command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
	command -v redis-cli >/dev/null 2>&1 || pkgs+=(redis-tools)
	command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
	command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
	command -v flock >/dev/null 2>&1 || pkgs+=(util-linux)
	command -v openssl >/dev/null 2>&1 || pkgs+=(openssl)
	# Headless browser for the status page's browser test (cmd/microbatch).
	command -v chromium >/dev/null 2>&1 || pkgs+=(chromium)
	if ((${#pkgs[@]})); then
		# unique, order kept
		mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | awk '!seen[$0]++')
		apt_install "${pkgs[@]}"
	fi
	find_mariadbd >/dev/null || die "mariadbd not found even after installing mariadb-server"
	pg_bin_dir >/dev/null || die "initdb/postgres not found even after installing postgresql"
	[[ -x "$(pg_bin_dir)/psql" && -x "$(pg_bin_dir)/pg_isready" ]] ||
		die "psql/pg_isready not found next to $(pg_bin_dir)/postgres (apt-get install postgresql-client)"
	local jv
	jv="$(java_major || true)"
	if [[ -z $jv || $jv -lt 17 ]]; then
		die "Apache Kafka 4.x needs Java 17 or newer; 'java -version' says: $(java -version 2>&1 | head -n1)"
	fi
}

kafka_libs_dir() { printf '%s\n' "$CACHE_ROOT/kafka-$1/libs"; }

# Resolve the Kafka jars from Maven Central once per version into the cache.
ensure_kafka_jars() {
	local v=$1 libs tmp mlog
	[[ $v =~ ^4\.[0-9]+\.[0-9]+$ ]] || die "MICROBATCH_KAFKA_VERSION must be an Apache Kafka 4.x release like 4.3.1 (got '$v')"
	libs="$(kafka_libs_dir "$v")"
	if [[ -f $libs/.complete ]]; then
		return 0
	fi
	mkdir -p "$(dirname "$libs")"
	# Another run may be resolving the same version right now.
	exec 8>"$(dirname "$libs")/.lock"
	flock -w 900 8 || die "timed out waiting for $(dirname "$libs")/.lock"
	if [[ -f $libs/.complete ]]; then
		exec 8>&-
		return 0
	fi
	tmp="$libs.tmp.$$"
	mlog="$(dirname "$libs")/maven.log"
	rm -rf "$tmp"
	log "resolving Apache Kafka $v jars from Maven Central into $libs (one-time)"
	if ! (cd "$(dirname "$libs")" && mvn -q -B -Dstyle.color=never \
		-f "$REPO/scripts/kafka/pom.xml" \
		-Dkafka.version="$v" \
		dependency:copy-dependencies -DoutputDirectory="$tmp") </dev/null >"$mlog" 2>&1; then
		tail -n 40 "$mlog" >&2 || true
		rm -rf "$tmp"
		die "maven could not resolve Apache Kafka $v; full log: $mlog"
	fi
	[[ -f $tmp/kafka_2.13-$v.jar ]] || { rm -rf "$tmp"; die "kafka_2.13-$v.jar missing after maven run (see $mlog)"; }
	touch "$tmp/.complete"
	rm -rf "$libs"
	mv "$tmp" "$libs"
	exec 8>&-
}

# ---------------------------------------------------------------- TLS

# ensure_tls: make the test CA and the server certificate once per state dir
# (under the lock; `stop` removes them with the dir).
ensure_tls() {
	[[ -f $TLS_DIR/.complete ]] && return 0
	command -v openssl >/dev/null 2>&1 || die "openssl not found (apt-get install openssl)"
	local tmp="$TLS_DIR.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	log "TLS: making a test CA and a server certificate for 127.0.0.1/localhost in $TLS_DIR"
	if ! (
		set -e
		cd "$tmp"
		umask 077
		openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
			-keyout ca.key -out ca.pem -subj "/CN=microbatch services.sh test CA" \
			-addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign'
		openssl req -new -newkey rsa:2048 -nodes -sha256 \
			-keyout server.key -out server.csr -subj "/CN=localhost"
		printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
			'extendedKeyUsage=serverAuth' 'subjectAltName=IP:127.0.0.1,DNS:localhost' >server.ext
		openssl x509 -req -sha256 -days 3650 -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
			-extfile server.ext -out server.pem
		openssl verify -CAfile ca.pem server.pem
		# Kafka's PEM keystore: an unencrypted PKCS#8 key, then the chain.
		openssl pkcs8 -topk8 -nocrypt -in server.key -out server.pk8
		cat server.pk8 server.pem >kafka-keystore.pem
		rm -f ca.key ca.srl server.csr server.ext server.pk8
		chmod 644 ca.pem server.pem
	) >"$DIR/tls.log" 2>&1; then
		tail_log "$DIR/tls.log"
		rm -rf "$tmp"
		die "TLS: making the test certificates with openssl failed"
	fi
	touch "$tmp/.complete"
	rm -rf "$TLS_DIR"
	mv "$tmp" "$TLS_DIR"
}

# tls_answers PORT: a TLS server on 127.0.0.1:PORT shows a certificate the
# test CA signed for 127.0.0.1.
tls_answers() {
	[[ -f $TLS_CA ]] || return 1
	timeout 5 openssl s_client -connect "127.0.0.1:$1" -CAfile "$TLS_CA" -verify_return_error \
		-verify_ip 127.0.0.1 </dev/null >/dev/null 2>&1
}

# ---------------------------------------------------------------- MariaDB

MY_DIR="$DIR/mariadb"
MY_PIDFILE="$MY_DIR/mariadb.pid"
MY_ERRLOG="$MY_DIR/mariadb.err"

mysql_socket() {
	local s="$MY_DIR/mariadb.sock"
	# unix socket paths are limited to 107 bytes
	if ((${#s} > 100)); then
		s="/tmp/microbatch-mariadb-$(printf '%s' "$DIR" | md5sum | cut -c1-12).sock"
	fi
	printf '%s\n' "$s"
}

mysql_answers() {
	"$(find_mysql_client)" --no-defaults --connect-timeout=3 --protocol=TCP -h127.0.0.1 -P"$MYSQL_PORT" \
		-u"$MYSQL_USER" -p"$MYSQL_PASS" -N -B -e 'select 1' "$MYSQL_DB" >/dev/null 2>&1
}

# As the REQUIRE SSL user, verifying the server against the test CA.
mysql_tls_answers() {
	[[ -f $TLS_CA ]] || return 1
	"$(find_mysql_client)" --no-defaults --connect-timeout=3 --protocol=TCP -h127.0.0.1 -P"$MYSQL_PORT" \
		--ssl --ssl-ca="$TLS_CA" --ssl-verify-server-cert \
		-u"$MYSQL_TLS_USER" -p"$MYSQL_PASS" -N -B -e 'select 1' "$MYSQL_DB" >/dev/null 2>&1
}

mysql_root() {
	"$(find_mysql_client)" --no-defaults --connect-timeout=5 -S "$(mysql_socket)" -uroot "$@"
}

# A server that started is assumed fine once it answers as root on its socket.
mysql_root_answers() {
	mysql_root -N -B -e 'select 1' >/dev/null 2>&1
}

mysql_launch() {
	local pid
	if pid="$(pid_of "$MY_PIDFILE")"; then
		if mysql_answers && mysql_tls_answers; then
			log "MariaDB: reusing running server (pid $pid) on 127.0.0.1:$MYSQL_PORT"
			MY_STATE=reused
			return 0
		fi
		log "MariaDB: pid $pid is there but does not answer (or not over TLS as $MYSQL_TLS_USER); restarting it"
		stop_pid MariaDB "$pid"
	fi
	if port_open "$MYSQL_PORT"; then
		die "$(port_taken_msg "$MYSQL_PORT" MICROBATCH_TEST_MYSQL_PORT)"
	fi
	local mariadbd install_db sock user_opt=()
	mariadbd="$(find_mariadbd)"
	install_db="$(find_install_db)"
	sock="$(mysql_socket)"
	[[ $EUID -eq 0 ]] && user_opt=(--user=root)
	rm -rf "$MY_DIR"
	rm -f "$sock"
	mkdir -p "$MY_DIR/data" "$MY_DIR/tmp"
	log "MariaDB: initializing a fresh datadir in $MY_DIR/data"
	if ! "$install_db" --no-defaults --datadir="$MY_DIR/data" "${user_opt[@]}" \
		--auth-root-authentication-method=normal --skip-test-db \
		>"$MY_DIR/install.log" 2>&1 </dev/null; then
		tail_log "$MY_DIR/install.log"
		die "MariaDB: $install_db failed"
	fi
	launch "$MY_DIR" "$MY_DIR/mariadbd.out" "$mariadbd" --no-defaults \
		--datadir="$MY_DIR/data" --tmpdir="$MY_DIR/tmp" \
		--socket="$sock" --pid-file="$MY_PIDFILE" --log-error="$MY_ERRLOG" \
		--port="$MYSQL_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
		"${user_opt[@]}" \
		--ssl-ca="$TLS_CA" --ssl-cert="$TLS_CERT" --ssl-key="$TLS_KEY" \
		--max-allowed-packet=64M --innodb-flush-log-at-trx-commit=1 \
		--character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
		--max-connections=1000 --innodb-buffer-pool-size=256M \
		--innodb-lock-wait-timeout=50
	pid=$LAUNCHED_PID
	printf '%s\n' "$pid" >"$MY_PIDFILE"
	MY_STATE=started
	log "MariaDB: started pid $pid on 127.0.0.1:$MYSQL_PORT"
}

mysql_wait() {
	[[ ${MY_STATE:-} == started ]] || return 0
	local deadline=$((SECONDS + TIMEOUT_MYSQL)) pid
	until mysql_root_answers; do
		if ! pid="$(pid_of "$MY_PIDFILE")"; then
			tail_log "$MY_ERRLOG" "$MY_DIR/mariadbd.out"
			die "MariaDB exited during startup"
		fi
		if ((SECONDS >= deadline)); then
			tail_log "$MY_ERRLOG" "$MY_DIR/mariadbd.out"
			die "MariaDB did not answer within ${TIMEOUT_MYSQL}s"
		fi
		sleep 0.3
	done
	local u
	{
		# Anonymous accounts would shadow mb@'%' for local connections.
		echo "DELETE FROM mysql.global_priv WHERE User='';"
		echo "FLUSH PRIVILEGES;"
		echo "CREATE DATABASE IF NOT EXISTS \`$MYSQL_DB\`;"
		for u in "'$MYSQL_USER'@'%'" "'$MYSQL_USER'@'127.0.0.1'" "'$MYSQL_USER'@'localhost'"; do
			echo "CREATE USER IF NOT EXISTS $u IDENTIFIED BY '$MYSQL_PASS';"
			echo "GRANT ALL PRIVILEGES ON *.* TO $u WITH GRANT OPTION;"
		done
		for u in "'$MYSQL_TLS_USER'@'%'" "'$MYSQL_TLS_USER'@'127.0.0.1'" "'$MYSQL_TLS_USER'@'localhost'"; do
			echo "CREATE USER IF NOT EXISTS $u IDENTIFIED BY '$MYSQL_PASS' REQUIRE SSL;"
			echo "GRANT ALL PRIVILEGES ON *.* TO $u;"
		done
		echo "FLUSH PRIVILEGES;"
	} | mysql_root >"$MY_DIR/setup.log" 2>&1 || {
		tail_log "$MY_DIR/setup.log" "$MY_ERRLOG"
		die "MariaDB: creating database/user failed"
	}
	# MySQL 8 has XA_RECOVER_ADMIN; MariaDB does not (ALL covers XA RECOVER there).
	for u in "'$MYSQL_USER'@'%'" "'$MYSQL_USER'@'127.0.0.1'" "'$MYSQL_USER'@'localhost'" \
		"'$MYSQL_TLS_USER'@'%'" "'$MYSQL_TLS_USER'@'127.0.0.1'" "'$MYSQL_TLS_USER'@'localhost'"; do
		mysql_root -e "GRANT XA_RECOVER_ADMIN ON *.* TO $u" >/dev/null 2>&1 || true
	done
	local deadline2=$((SECONDS + 15))
	until mysql_answers; do
		if ((SECONDS >= deadline2)); then
			tail_log "$MY_ERRLOG"
			die "MariaDB answers as root but not as $MYSQL_USER@127.0.0.1:$MYSQL_PORT"
		fi
		sleep 0.3
	done
	if ! mysql_tls_answers; then
		tail_log "$MY_ERRLOG"
		die "MariaDB answers, but not over TLS (as $MYSQL_TLS_USER, server certificate checked against $TLS_CA)"
	fi
	log "MariaDB: ready, TLS too ($("$(find_mysql_client)" --no-defaults -h127.0.0.1 -P"$MYSQL_PORT" -u"$MYSQL_USER" -p"$MYSQL_PASS" -N -B -e 'select version()' 2>/dev/null || echo '?'))"
}

# ---------------------------------------------------------------- Redis

RD_DIR="$DIR/redis"
RD_PIDFILE="$RD_DIR/redis.pid"
RD_LOG="$RD_DIR/redis.log"

redis_answers() {
	[[ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null || true)" == PONG ]]
}

# The TLS port, the server checked against the test CA.
redis_tls_answers() {
	[[ -f $TLS_CA ]] || return 1
	[[ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_TLS_PORT" --tls --cacert "$TLS_CA" ping 2>/dev/null || true)" == PONG ]]
}

redis_launch() {
	local pid
	if pid="$(pid_of "$RD_PIDFILE")"; then
		if redis_answers && redis_tls_answers; then
			log "Redis: reusing running server (pid $pid) on 127.0.0.1:$REDIS_PORT (TLS :$REDIS_TLS_PORT)"
			RD_STATE=reused
			return 0
		fi
		log "Redis: pid $pid is there but does not answer (or not over TLS on :$REDIS_TLS_PORT); restarting it"
		stop_pid Redis "$pid"
	fi
	if port_open "$REDIS_PORT"; then
		die "$(port_taken_msg "$REDIS_PORT" MICROBATCH_TEST_REDIS_PORT)"
	fi
	if port_open "$REDIS_TLS_PORT"; then
		die "$(port_taken_msg "$REDIS_TLS_PORT" MICROBATCH_TEST_REDIS_TLS_PORT)"
	fi
	rm -rf "$RD_DIR"
	mkdir -p "$RD_DIR"
	launch "$RD_DIR" "$RD_DIR/redis.out" redis-server \
		--port "$REDIS_PORT" --bind 127.0.0.1 \
		--tls-port "$REDIS_TLS_PORT" --tls-cert-file "$TLS_CERT" --tls-key-file "$TLS_KEY" \
		--tls-ca-cert-file "$TLS_CA" --tls-auth-clients no \
		--save '' --appendonly yes --appendfsync always \
		--dir "$RD_DIR" --daemonize no --logfile "$RD_LOG" \
		--pidfile "$RD_DIR/redis-server.pid"
	pid=$LAUNCHED_PID
	printf '%s\n' "$pid" >"$RD_PIDFILE"
	RD_STATE=started
	log "Redis: started pid $pid on 127.0.0.1:$REDIS_PORT (TLS :$REDIS_TLS_PORT)"
}

redis_wait() {
	[[ ${RD_STATE:-} == started ]] || return 0
	local deadline=$((SECONDS + TIMEOUT_REDIS))
	until redis_answers; do
		if ! pid_of "$RD_PIDFILE" >/dev/null; then
			tail_log "$RD_LOG" "$RD_DIR/redis.out"
			die "Redis exited during startup"
		fi
		if ((SECONDS >= deadline)); then
			tail_log "$RD_LOG" "$RD_DIR/redis.out"
			die "Redis did not answer within ${TIMEOUT_REDIS}s"
		fi
		sleep 0.2
	done
	if ! redis_tls_answers; then
		tail_log "$RD_LOG"
		die "Redis answers on :$REDIS_PORT but not over TLS on :$REDIS_TLS_PORT"
	fi
	log "Redis: ready, TLS too ($(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info server 2>/dev/null | tr -d '\r' | awk -F: '/^redis_version:/ {print "redis " $2}'))"
}

# ---------------------------------------------------------------- Kafka

KF_DIR="$DIR/kafka"
KF_PIDFILE="$KF_DIR/kafka.pid"
KF_LOG="$KF_DIR/logs/server.log"
KF_OUT="$KF_DIR/kafka.out"

kafka_running_version() {
	if [[ -s $KF_DIR/version ]]; then
		cat "$KF_DIR/version"
	else
		printf '%s\n' "$KAFKA_VERSION_WANTED"
	fi
}

# Cluster ids are 16 random bytes in URL-safe base64 without padding; Kafka's
# own generator avoids ids starting with '-' (they look like options).
random_cluster_id() {
	local id
	while :; do
		id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
		[[ $id != -* && ${#id} -eq 22 ]] && break
	done
	printf '%s\n' "$id"
}

# Run a Kafka command line tool class with the cached jars, quiet logging:
#   kafka_tool [timeout-seconds] CLASS ARGS...
kafka_tool() {
	local libs secs=600
	if [[ $1 =~ ^[0-9]+$ ]]; then
		secs=$1
		shift
	fi
	libs="$(kafka_libs_dir "$(kafka_running_version)")"
	timeout "$secs" java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
		-Dlog4j2.configurationFile="file:$KF_DIR/tools-log4j2.xml" \
		-cp "$libs/*" "$@"
}

write_kafka_config() {
	mkdir -p "$KF_DIR/data" "$KF_DIR/logs"
	cat >"$KF_DIR/server.properties" <<EOF
# generated by scripts/services.sh: single-node KRaft, broker + controller
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
log.dirs=$KF_DIR/data

# SASL_SSL for clients: PLAIN (user in the JAAS line) and SCRAM (users
# stored in the metadata log by kafka-storage format --add-scram). No
# authorizer: every authenticated user may do everything.
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USER="$KAFKA_SASL_PASS";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$TLS_KAFKA_PEM
listener.name.sasl_ssl.ssl.client.auth=none

num.partitions=4
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
delete.topic.enable=true

offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# tests run groups with short session timeouts (the default minimum is 6 s)
group.min.session.timeout.ms=500

message.max.bytes=2097152
replica.fetch.max.bytes=2097152

# small machine (2 cores)
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
EOF
	# For the Kafka CLI tools (kafka-tool ... --command-config this file).
	cat >"$KF_DIR/client-sasl-ssl.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$KAFKA_SASL_USER" password="$KAFKA_SASL_PASS";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_CA
EOF
	cat >"$KF_DIR/log4j2.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="server" fileName="${sys:kafka.logs.dir}/server.log" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
    <File name="controller" fileName="${sys:kafka.logs.dir}/controller.log" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
    <Logger name="org.apache.kafka.controller" level="INFO" additivity="false"><AppenderRef ref="controller"/></Logger>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.storage.internals.log.LogCleaner" level="WARN"/>
  </Loggers>
</Configuration>
EOF
	cat >"$KF_DIR/tools-log4j2.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="stderr" target="SYSTEM_ERR"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="stderr"/></Root>
  </Loggers>
</Configuration>
EOF
}

kafka_started_logged() {
	[[ -f $KF_LOG ]] && grep -q 'Kafka Server started' "$KF_LOG"
}

kafka_launch() {
	local pid
	if pid="$(pid_of "$KF_PIDFILE")"; then
		if [[ "$(kafka_running_version)" != "$KAFKA_VERSION_WANTED" ]]; then
			log "Kafka: running $(kafka_running_version) but $KAFKA_VERSION_WANTED is wanted; replacing it"
			stop_pid Kafka "$pid"
		elif port_open "$KAFKA_PORT" && kafka_started_logged && tls_answers "$KAFKA_SASL_SSL_PORT"; then
			log "Kafka: reusing running Apache Kafka $(kafka_running_version) (pid $pid) on 127.0.0.1:$KAFKA_PORT"
			KF_STATE=reused
			return 0
		elif port_open "$KAFKA_PORT" && kafka_started_logged; then
			log "Kafka: pid $pid serves, but not SASL_SSL on :$KAFKA_SASL_SSL_PORT with a certificate of $TLS_CA; restarting it"
			stop_pid Kafka "$pid"
		else
			log "Kafka: pid $pid is there but not serving; restarting it"
			stop_pid Kafka "$pid"
		fi
	fi
	local p
	for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_SSL_PORT"; do
		if port_open "$p"; then
			die "$(port_taken_msg "$p" "MICROBATCH_TEST_KAFKA_PORT / MICROBATCH_TEST_KAFKA_CONTROLLER_PORT / MICROBATCH_TEST_KAFKA_SASL_SSL_PORT")"
		fi
	done
	local v=$KAFKA_VERSION_WANTED libs cid out cls ok=0
	libs="$(kafka_libs_dir "$v")"
	rm -rf "$KF_DIR"
	mkdir -p "$KF_DIR"
	printf '%s\n' "$v" >"$KF_DIR/version"
	write_kafka_config
	cid="$(random_cluster_id)"
	printf '%s\n' "$cid" >"$KF_DIR/cluster.id"
	# 4.x still has the Scala kafka.tools.StorageTool; newer lines may only
	# have the Java org.apache.kafka.tools.StorageTool. Try both.
	for cls in kafka.tools.StorageTool org.apache.kafka.tools.StorageTool; do
		if out="$(kafka_tool "$cls" format --cluster-id "$cid" --config "$KF_DIR/server.properties" \
			--add-scram "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASS]" \
			--add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASS]" 2>&1 </dev/null)"; then
			ok=1
			break
		fi
		grep -q 'Could not find or load main class' <<<"$out" || break
	done
	printf '%s\n' "$out" >"$KF_DIR/format.log"
	if ((!ok)); then
		tail_log "$KF_DIR/format.log"
		die "Kafka: formatting the KRaft storage failed"
	fi
	launch "$KF_DIR" "$KF_OUT" java \
		-Xms256m -Xmx"$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
		-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Dkafka.logs.dir="$KF_DIR/logs" \
		-Dlog4j2.configurationFile="file:$KF_DIR/log4j2.xml" \
		-cp "$libs/*" kafka.Kafka "$KF_DIR/server.properties"
	pid=$LAUNCHED_PID
	printf '%s\n' "$pid" >"$KF_PIDFILE"
	KF_STATE=started
	log "Kafka: started Apache Kafka $v (pid $pid, cluster id $cid) on 127.0.0.1:$KAFKA_PORT (SASL_SSL :$KAFKA_SASL_SSL_PORT)"
}

kafka_wait() {
	[[ ${KF_STATE:-} == started ]] || return 0
	local deadline=$((SECONDS + TIMEOUT_KAFKA))
	until port_open "$KAFKA_PORT" && kafka_started_logged; do
		if ! pid_of "$KF_PIDFILE" >/dev/null; then
			tail_log "$KF_LOG" "$KF_OUT"
			die "Kafka exited during startup"
		fi
		if ((SECONDS >= deadline)); then
			tail_log "$KF_LOG" "$KF_OUT"
			die "Kafka did not start within ${TIMEOUT_KAFKA}s"
		fi
		sleep 0.5
	done
	# A real metadata round trip through the client library.
	local left=$((deadline - SECONDS))
	((left < 15)) && left=15
	if ! kafka_tool "$left" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" --list \
		>"$KF_DIR/metadata-check.log" 2>&1 </dev/null; then
		tail_log "$KF_DIR/metadata-check.log" "$KF_LOG"
		die "Kafka is up but a metadata request (TopicCommand --list) failed"
	fi
	# The same over SASL_SSL, as the SCRAM-SHA-512 user, the broker checked against the test CA.
	left=$((deadline - SECONDS))
	((left < 15)) && left=15
	if ! kafka_tool "$left" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_SASL_SSL_PORT" \
		--command-config "$KF_DIR/client-sasl-ssl.properties" --list \
		>"$KF_DIR/metadata-check-sasl-ssl.log" 2>&1 </dev/null; then
		tail_log "$KF_DIR/metadata-check-sasl-ssl.log" "$KF_LOG"
		die "Kafka is up but a metadata request over SASL_SSL (127.0.0.1:$KAFKA_SASL_SSL_PORT, SCRAM-SHA-512) failed"
	fi
	log "Kafka: ready (Apache Kafka $(kafka_running_version), KRaft, metadata request OK, over SASL_SSL too)"
}

# ---------------------------------------------------------------- PostgreSQL

# The cluster lives in $PG_DIR (mode 0700, owned by the user that runs it):
# data/ (initdb), tls/ (copies of the server certificate and key, 0600),
# postgres.log, and the unix socket (superuser access over it is trust, so
# only that user and root can reach it). PostgreSQL refuses to run as root:
# as root the script runs it as $PG_SYS_USER, a system user it creates.
PG_DIR="$DIR/postgres"
PG_PIDFILE="$PG_DIR/postgres.pid"
PG_LOG="$PG_DIR/postgres.log"
PG_SYS_USER=mbpostgres

# pg_bin_dir: the directory with initdb and postgres. Debian puts them in
# /usr/lib/postgresql/<major>/bin (the newest installed wins); elsewhere
# they may be on PATH.
pg_bin_dir() {
	local d best=""
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x $d/initdb && -x $d/postgres ]] || continue
		best="$(printf '%s\n%s\n' "$best" "$d" | sed '/^$/d' | sort -V | tail -n1)"
	done
	if [[ -z $best ]] && command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
		best="$(dirname "$(command -v postgres)")"
	fi
	[[ -n $best ]] || return 1
	printf '%s\n' "$best"
}

pg_socket_dir() {
	# unix socket paths are limited to 107 bytes: <dir>/.s.PGSQL.<port>
	if ((${#PG_DIR} > 80)); then
		printf '/tmp\n'
	else
		printf '%s\n' "$PG_DIR"
	fi
}

# AS_PG: the prefix that runs a command as the user the server runs as
# (empty unless root). setpriv (util-linux) needs no PAM session and execs
# without forking, so a launched server's pid is the postmaster's.
AS_PG=()
if [[ $EUID -eq 0 ]]; then
	AS_PG=(setpriv --reuid="$PG_SYS_USER" --regid="$PG_SYS_USER" --init-groups
		env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$PG_DIR")
fi

# pg_ensure_user: as root, the system user that runs the server, and a path
# it can walk to $PG_DIR. Directories above the state dir that it cannot
# traverse get an ACL entry for it (or, without setfacl, o+x: search, not read).
pg_ensure_user() {
	[[ $EUID -eq 0 ]] || return 0
	if ! getent passwd "$PG_SYS_USER" >/dev/null; then
		command -v useradd >/dev/null 2>&1 || die "PostgreSQL: useradd not found; create a system user $PG_SYS_USER yourself"
		log "PostgreSQL: creating the system user $PG_SYS_USER (PostgreSQL refuses to run as root)"
		useradd --system --user-group --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin --comment 'microbatch scripts/services.sh PostgreSQL' "$PG_SYS_USER" ||
			die "PostgreSQL: useradd $PG_SYS_USER failed"
	fi
	command -v setpriv >/dev/null 2>&1 || die "PostgreSQL: setpriv not found (apt-get install util-linux)"
	local d path="" parts
	IFS=/ read -r -a parts <<<"${DIR#/}"
	for d in "${parts[@]}"; do
		path="$path/$d"
		"${AS_PG[@]}" test -x "$path" && continue
		if command -v setfacl >/dev/null 2>&1 && setfacl -m "u:$PG_SYS_USER:x" "$path" 2>/dev/null; then
			log "PostgreSQL: $path was closed to $PG_SYS_USER; gave it search (x) by ACL, so the server can reach $PG_DIR"
		else
			chmod o+x "$path" || die "PostgreSQL: $PG_SYS_USER cannot reach $PG_DIR, and chmod o+x $path failed"
			log "PostgreSQL: $path was closed to $PG_SYS_USER; made it o+x (search, not read), so the server can reach $PG_DIR"
		fi
	done
}

# pg_q S: S as a quoted libpq conninfo value (a path may hold spaces).
pg_q() {
	local s=${1//\\/\\\\}
	s=${s//\'/\\\'}
	printf "'%s'" "$s"
}

# pg_psql USER CONNINFO-REST ARGS...: run psql (of the server's version), quietly, no psqlrc.
pg_psql() {
	local user=$1 conn=$2
	shift 2
	PGCONNECT_TIMEOUT=5 PGPASSWORD="$PG_PASS" timeout 20 "$(pg_bin_dir)/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
		"$conn user=$user" "$@" </dev/null
}

postgres_answers() {
	[[ "$(pg_psql "$PG_USER" "host=127.0.0.1 port=$PG_PORT dbname=$PG_DB sslmode=disable" -c 'select 1' 2>/dev/null || true)" == 1 ]]
}

# As the TLS-only user, the server's certificate verified against the test CA.
postgres_tls_answers() {
	[[ -f $TLS_CA ]] || return 1
	[[ "$(pg_psql "$PG_TLS_USER" "host=127.0.0.1 port=$PG_PORT dbname=$PG_DB sslmode=verify-full sslrootcert=$(pg_q "$TLS_CA")" \
		-c 'select ssl from pg_stat_ssl where pid = pg_backend_pid()' 2>/dev/null || true)" == t ]]
}

# Superuser over the unix socket (trust; the socket's dir is 0700).
pg_super() {
	pg_psql postgres "host=$(pg_q "$(pg_socket_dir)") port=$PG_PORT dbname=postgres" "$@"
}

postgres_launch() {
	local pid
	if pid="$(pid_of "$PG_PIDFILE")"; then
		if postgres_answers && postgres_tls_answers; then
			log "PostgreSQL: reusing running server (pid $pid) on 127.0.0.1:$PG_PORT"
			PG_STATE=reused
			return 0
		fi
		log "PostgreSQL: pid $pid is there but does not answer (or not over TLS as $PG_TLS_USER); restarting it"
		stop_pid PostgreSQL "$pid" INT
	fi
	if port_open "$PG_PORT"; then
		die "$(port_taken_msg "$PG_PORT" MICROBATCH_TEST_POSTGRES_PORT)"
	fi
	local bin owner sock
	PG_T0=$SECONDS
	bin="$(pg_bin_dir)" || die "PostgreSQL: initdb/postgres not found even after installing postgresql"
	sock="$(pg_socket_dir)"
	pg_ensure_user
	rm -rf "$PG_DIR"
	rm -f "$sock/.s.PGSQL.$PG_PORT" "$sock/.s.PGSQL.$PG_PORT.lock"
	mkdir -p "$PG_DIR/tls"
	install -m 0600 "$TLS_CERT" "$PG_DIR/tls/server.pem"
	install -m 0600 "$TLS_KEY" "$PG_DIR/tls/server.key"
	if [[ $EUID -eq 0 ]]; then
		chown -R "$PG_SYS_USER:$PG_SYS_USER" "$PG_DIR"
	fi
	chmod 0700 "$PG_DIR" "$PG_DIR/tls"
	owner="$(id -un)"
	[[ $EUID -eq 0 ]] && owner=$PG_SYS_USER
	log "PostgreSQL: initializing a fresh cluster in $PG_DIR/data ($("$bin/postgres" --version), as $owner)"
	if ! (
		cd "$PG_DIR"
		"${AS_PG[@]}" "$bin/initdb" -D "$PG_DIR/data" -U postgres --encoding=UTF8 --locale=C \
			--auth-local=trust --auth-host=scram-sha-256 --no-sync
	) >"$PG_DIR/initdb.log" 2>&1 </dev/null; then
		tail_log "$PG_DIR/initdb.log"
		die "PostgreSQL: initdb failed"
	fi
	# Later settings win over initdb's.
	cat >>"$PG_DIR/data/postgresql.conf" <<EOCONF

# ---- scripts/services.sh (test server: loopback only, not durable across an OS crash)
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sock'
unix_socket_permissions = 0700
max_connections = 400
max_prepared_transactions = 64
password_encryption = 'scram-sha-256'
ssl = on
ssl_cert_file = '$PG_DIR/tls/server.pem'
ssl_key_file = '$PG_DIR/tls/server.key'
fsync = off
full_page_writes = off
timezone = 'UTC'
lc_messages = 'C'
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
EOCONF
	# First match wins: the TLS user never without TLS; everyone else over
	# TCP with a SCRAM password; the unix socket (0700 dir) is trust.
	cat >"$PG_DIR/data/pg_hba.conf" <<EOHBA
# generated by scripts/services.sh
local     all  all             trust
hostnossl all  $PG_TLS_USER    127.0.0.1/32  reject
host      all  all             127.0.0.1/32  scram-sha-256
EOHBA
	[[ $EUID -eq 0 ]] && chown "$PG_SYS_USER:$PG_SYS_USER" "$PG_DIR/data/postgresql.conf" "$PG_DIR/data/pg_hba.conf"
	launch "$PG_DIR" "$PG_LOG" "${AS_PG[@]}" "$bin/postgres" -D "$PG_DIR/data"
	pid=$LAUNCHED_PID
	printf '%s\n' "$pid" >"$PG_PIDFILE"
	PG_STATE=started
	log "PostgreSQL: started pid $pid on 127.0.0.1:$PG_PORT"
}

postgres_wait() {
	[[ ${PG_STATE:-} == started ]] || return 0
	local deadline=$((SECONDS + TIMEOUT_POSTGRES)) bin
	bin="$(pg_bin_dir)"
	until "$bin/pg_isready" -q -h "$(pg_socket_dir)" -p "$PG_PORT" -U postgres -d postgres -t 2 >/dev/null 2>&1 &&
		pg_super -c 'select 1' >/dev/null 2>&1; do
		if ! pid_of "$PG_PIDFILE" >/dev/null; then
			tail_log "$PG_LOG"
			die "PostgreSQL exited during startup"
		fi
		if ((SECONDS >= deadline)); then
			tail_log "$PG_LOG"
			die "PostgreSQL did not answer within ${TIMEOUT_POSTGRES}s"
		fi
		sleep 0.2
	done
	# mb owns the test database and may create more (fresh databases per
	# test); mbtls (TLS only) acts as mb. Neither is a superuser: the sinks
	# must work without. pg_signal_backend: tests may end sessions (57P01).
	# (One -c each: CREATE DATABASE cannot run inside a transaction block.)
	if ! pg_super \
		-c "CREATE ROLE $PG_USER LOGIN CREATEDB PASSWORD '$PG_PASS'" \
		-c "CREATE ROLE $PG_TLS_USER LOGIN PASSWORD '$PG_PASS'" \
		-c "GRANT $PG_USER TO $PG_TLS_USER" \
		-c "GRANT pg_signal_backend TO $PG_USER" \
		-c "CREATE DATABASE $PG_DB OWNER $PG_USER" \
		>"$PG_DIR/setup.log" 2>&1; then
		tail_log "$PG_DIR/setup.log" "$PG_LOG"
		die "PostgreSQL: creating the roles/database failed"
	fi
	if ! postgres_answers; then
		tail_log "$PG_LOG"
		die "PostgreSQL answers as the superuser but not as $PG_USER@127.0.0.1:$PG_PORT (password, scram-sha-256)"
	fi
	if ! postgres_tls_answers; then
		tail_log "$PG_LOG"
		die "PostgreSQL answers, but not over TLS (as $PG_TLS_USER, sslmode=verify-full against $TLS_CA)"
	fi
	log "PostgreSQL: ready $((SECONDS - PG_T0))s after initdb began, TLS too ($(pg_psql "$PG_USER" "host=127.0.0.1 port=$PG_PORT dbname=$PG_DB sslmode=disable" -c 'show server_version' 2>/dev/null || echo '?'))"
}

# ---------------------------------------------------------------- commands

cmd_start() {
	local t0=$SECONDS
	install_missing
	ensure_kafka_jars "$KAFKA_VERSION_WANTED"
	take_lock
	log "state dir: $DIR"
	ensure_tls
	# Launch all four, then wait for all four (they boot in parallel).
	kafka_launch
	mysql_launch
	postgres_launch
	redis_launch
	mysql_wait
	postgres_wait
	redis_wait
	kafka_wait
	log "all services up in $((SECONDS - t0))s: mysql 127.0.0.1:$MYSQL_PORT (TLS too), postgres 127.0.0.1:$PG_PORT (TLS too), redis 127.0.0.1:$REDIS_PORT (TLS :$REDIS_TLS_PORT), kafka 127.0.0.1:$KAFKA_PORT (SASL_SSL :$KAFKA_SASL_SSL_PORT)"
}

cmd_env() {
	printf "export MICROBATCH_TEST_KAFKA='127.0.0.1:%s'\n" "$KAFKA_PORT"
	printf "export MICROBATCH_TEST_KAFKA_KIND='apache-kafka-%s'\n" "$(kafka_running_version)"
	printf "export MICROBATCH_TEST_MYSQL='mysql://%s:%s@127.0.0.1:%s/%s'\n" "$MYSQL_USER" "$MYSQL_PASS" "$MYSQL_PORT" "$MYSQL_DB"
	printf "export MICROBATCH_TEST_POSTGRES='postgres://%s:%s@127.0.0.1:%s/%s?sslmode=disable'\n" "$PG_USER" "$PG_PASS" "$PG_PORT" "$PG_DB"
	printf "export MICROBATCH_TEST_REDIS='redis://127.0.0.1:%s/0'\n" "$REDIS_PORT"
	# TLS (all three servers' certificates are signed by this CA) and Kafka SASL.
	printf "export MICROBATCH_TEST_TLS_CA='%s'\n" "$TLS_CA"
	printf "export MICROBATCH_TEST_KAFKA_SASL_SSL='127.0.0.1:%s'\n" "$KAFKA_SASL_SSL_PORT"
	printf "export MICROBATCH_TEST_KAFKA_SASL_USER='%s'\n" "$KAFKA_SASL_USER"
	printf "export MICROBATCH_TEST_KAFKA_SASL_PASSWORD='%s'\n" "$KAFKA_SASL_PASS"
	printf "export MICROBATCH_TEST_MYSQL_TLS='mysql://%s:%s@127.0.0.1:%s/%s'\n" "$MYSQL_TLS_USER" "$MYSQL_PASS" "$MYSQL_PORT" "$MYSQL_DB"
	printf "export MICROBATCH_TEST_REDIS_TLS='rediss://127.0.0.1:%s/0'\n" "$REDIS_TLS_PORT"
	printf "export MICROBATCH_TEST_POSTGRES_TLS='postgres://%s:%s@127.0.0.1:%s/%s?sslmode=verify-full&sslrootcert=%s'\n" \
		"$PG_TLS_USER" "$PG_PASS" "$PG_PORT" "$PG_DB" "$(url_path_escape "$TLS_CA")"
}

cmd_status() {
	local pid all=0
	if pid="$(pid_of "$MY_PIDFILE")"; then
		if mysql_answers && mysql_tls_answers; then
			echo "mariadb: running, pid $pid, 127.0.0.1:$MYSQL_PORT, answering, TLS too (log $MY_ERRLOG)"
		elif mysql_answers; then
			echo "mariadb: running, pid $pid, 127.0.0.1:$MYSQL_PORT, answering but NOT over TLS (log $MY_ERRLOG)"
			all=1
		else
			echo "mariadb: running, pid $pid, 127.0.0.1:$MYSQL_PORT, NOT answering (log $MY_ERRLOG)"
			all=1
		fi
	else
		echo "mariadb: not running"
		all=1
	fi
	if pid="$(pid_of "$PG_PIDFILE")"; then
		if postgres_answers && postgres_tls_answers; then
			echo "postgres: running, pid $pid, 127.0.0.1:$PG_PORT, answering, TLS too (log $PG_LOG)"
		elif postgres_answers; then
			echo "postgres: running, pid $pid, 127.0.0.1:$PG_PORT, answering but NOT over TLS (log $PG_LOG)"
			all=1
		else
			echo "postgres: running, pid $pid, 127.0.0.1:$PG_PORT, NOT answering (log $PG_LOG)"
			all=1
		fi
	else
		echo "postgres: not running"
		all=1
	fi
	if pid="$(pid_of "$RD_PIDFILE")"; then
		if redis_answers && redis_tls_answers; then
			echo "redis:   running, pid $pid, 127.0.0.1:$REDIS_PORT, answering, TLS :$REDIS_TLS_PORT too (log $RD_LOG)"
		elif redis_answers; then
			echo "redis:   running, pid $pid, 127.0.0.1:$REDIS_PORT, answering but NOT over TLS :$REDIS_TLS_PORT (log $RD_LOG)"
			all=1
		else
			echo "redis:   running, pid $pid, 127.0.0.1:$REDIS_PORT, NOT answering (log $RD_LOG)"
			all=1
		fi
	else
		echo "redis:   not running"
		all=1
	fi
	if pid="$(pid_of "$KF_PIDFILE")"; then
		if port_open "$KAFKA_PORT" && kafka_started_logged && tls_answers "$KAFKA_SASL_SSL_PORT"; then
			echo "kafka:   running, pid $pid, 127.0.0.1:$KAFKA_PORT, Apache Kafka $(kafka_running_version), serving, SASL_SSL :$KAFKA_SASL_SSL_PORT too (log $KF_LOG)"
		elif port_open "$KAFKA_PORT" && kafka_started_logged; then
			echo "kafka:   running, pid $pid, 127.0.0.1:$KAFKA_PORT, Apache Kafka $(kafka_running_version), serving but NOT over SASL_SSL :$KAFKA_SASL_SSL_PORT (log $KF_LOG)"
			all=1
		else
			echo "kafka:   running, pid $pid, 127.0.0.1:$KAFKA_PORT, NOT serving yet (log $KF_LOG)"
			all=1
		fi
	else
		echo "kafka:   not running"
		all=1
	fi
	echo "state dir: $DIR"
	return "$all"
}

cmd_stop() {
	if [[ ! -d $DIR ]]; then
		log "nothing to stop ($DIR does not exist)"
		return 0
	fi
	if [[ ! -e $MARKER ]] && [[ -n "$(ls -A "$DIR" 2>/dev/null)" ]]; then
		die "$DIR does not look like a services dir (no $(basename "$MARKER")); not touching it"
	fi
	take_lock
	local pid
	if pid="$(pid_of "$KF_PIDFILE")"; then stop_pid Kafka "$pid"; fi
	if pid="$(pid_of "$RD_PIDFILE")"; then stop_pid Redis "$pid"; fi
	if pid="$(pid_of "$MY_PIDFILE")"; then stop_pid MariaDB "$pid"; fi
	# SIGINT is PostgreSQL's fast shutdown (SIGTERM waits for clients to leave).
	if pid="$(pid_of "$PG_PIDFILE")"; then stop_pid PostgreSQL "$pid" INT; fi
	# Anything of ours left over (e.g. a pid file lost in a crash).
	local stray
	for stray in $(stray_pids); do
		stop_pid "$(cat "/proc/$stray/comm" 2>/dev/null || echo process)" "$stray"
	done
	rm -f "$(mysql_socket)" "$(pg_socket_dir)/.s.PGSQL.$PG_PORT" "$(pg_socket_dir)/.s.PGSQL.$PG_PORT.lock"
	case $DIR in
	/ | "$HOME" | "$REPO") die "refusing to remove $DIR" ;;
	esac
	rm -rf "$DIR"
	log "stopped; removed $DIR"
}

# Run a Kafka CLI class against the cached jars, e.g.
#   scripts/services.sh kafka-tool org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:19092 --list
cmd_kafka_tool() {
	(($#)) || die "usage: scripts/services.sh kafka-tool CLASS [ARGS...]  (e.g. org.apache.kafka.tools.TopicCommand, org.apache.kafka.tools.ConsoleProducer, org.apache.kafka.tools.consumer.ConsoleConsumer)"
	local libs conf=()
	libs="$(kafka_libs_dir "$(kafka_running_version)")"
	[[ -f $libs/.complete ]] || die "no Kafka jars in $libs yet; run scripts/services.sh start first"
	[[ -f $KF_DIR/tools-log4j2.xml ]] && conf=(-Dlog4j2.configurationFile="file:$KF_DIR/tools-log4j2.xml")
	exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "${conf[@]}" -cp "$libs/*" "$@"
}

# Print the directory of the cached Kafka jars (of the version running, or
# else of the wanted one), for tests that start a private broker of their own.
cmd_kafka_libs() {
	local libs
	libs="$(kafka_libs_dir "$(kafka_running_version)")"
	[[ -f $libs/.complete ]] || die "no Kafka jars in $libs yet; scripts/services.sh start installs them"
	printf '%s\n' "$libs"
}

usage() {
	sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

case "${1:-}" in
start) cmd_start ;;
env) cmd_env ;;
status) cmd_status ;;
stop) cmd_stop ;;
kafka-tool)
	shift
	cmd_kafka_tool "$@"
	;;
kafka-libs) cmd_kafka_libs ;;
-h | --help | help)
	usage
	exit 0
	;;
*)
	usage
	exit 2
	;;
esac
