#!/usr/bin/env bash
# W4 restart time: kill -9 a server that holds many locks (left by
# 'fencelock-bench compare --workloads w4 --w4-keep'), start it again on the same
# data, and time until it serves a WRITE. A write is the honest finish line:
# it commits after everything before it is applied, where a health or
# leader check may answer while the state is still loading.
#
#   bash bench/peers/restart-time.sh redis
#   bash bench/peers/restart-time.sh fencelock BIN DATA_DIR [ADDR]
#   bash bench/peers/restart-time.sh fencelock-copy BIN DATA_DIR [ADDR]
#
# Redis must have been started by setup.sh (its config and pid file are
# reused). For fencelock the server listening on ADDR (default
# 127.0.0.1:7470) is killed and BIN server --listen ADDR --data DATA_DIR is
# started in its place, logging to DATA_DIR/../fencelock-restart.log; its pid
# is printed for the caller to stop it. FENCELOCK_ARGS is added to the server's
# arguments (FENCELOCK_ARGS="--engine etcd" for a data dir of the etcd engine).
#
# fencelock-copy restarts from the same state every time: DATA_DIR (left
# by a server killed with -9) is copied to a fresh directory beside it,
# BIN is started on the copy (nothing need listen on ADDR), and besides
# the time it prints the process's CPU time up to the first write (user +
# sys), which says more than the wall time on a loaded machine, and its
# RSS then and 5 s later; the server is then killed and the copy removed.
set -euo pipefail

PEERS_DIR=${PEERS_DIR:-/tmp/fencelock-peers}
REDIS_PORT=${REDIS_PORT:-63790}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

listener_pid() { # PORT
	ss -Hltnp "sport = :$1" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

# start_fencelock BIN ADDR DATA_DIR LOG starts BIN's server on DATA_DIR,
# sets newpid, and returns once the server has answered a write, its time
# in t1.
start_fencelock() {
	# shellcheck disable=SC2086 # FENCELOCK_ARGS is a list of words
	nohup "$1" server --listen "$2" --data "$3" --log-level warn ${FENCELOCK_ARGS:-} >>"$4" 2>&1 </dev/null &
	newpid=$!
	local probe='{"key":"flbench/restart-probe","holder":"restart-probe","ttl_ms":1000}'
	until curl -sf -o /dev/null -H 'Content-Type: application/json' -d "$probe" "http://$2/v1/acquire"; do
		kill -0 "$newpid" 2>/dev/null || { echo "server exited; see $4" >&2; exit 1; }
		sleep 0.01
	done
	t1=$(now)
}

case "${1:-}" in
redis)
	d="$PEERS_DIR/redis"
	pid=$(cat "$d/pid")
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
	t0=$(now)
	nohup redis-server "$d/redis.conf" >>"$d/stdout.log" 2>&1 </dev/null &
	echo $! >"$d/pid"
	# PING answers LOADING until the AOF is replayed; SET needs it loaded.
	until [[ $(redis-cli -p "$REDIS_PORT" SET flbench:restart-probe 1 2>/dev/null) == OK ]]; do sleep 0.01; done
	t1=$(now)
	echo "redis restart: $(elapsed "$t0" "$t1") s to the first write; keys $(redis-cli -p "$REDIS_PORT" DBSIZE)"
	;;
fencelock)
	bin=${2:?usage: $0 fencelock BIN DATA_DIR [ADDR]}
	data=${3:?usage: $0 fencelock BIN DATA_DIR [ADDR]}
	addr=${4:-127.0.0.1:7470}
	pid=$(listener_pid "${addr##*:}")
	[[ -n $pid ]] || { echo "nothing listens on $addr" >&2; exit 1; }
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
	t0=$(now)
	start_fencelock "$bin" "$addr" "$data" "$(dirname "$data")/fencelock-restart.log"
	echo "fencelock restart: $(elapsed "$t0" "$t1") s to the first write; rss $(awk '/VmRSS/ {print $2, $3}' "/proc/$newpid/status"); pid $newpid"
	;;
fencelock-copy)
	bin=${2:?usage: $0 fencelock-copy BIN DATA_DIR [ADDR]}
	src=${3:?usage: $0 fencelock-copy BIN DATA_DIR [ADDR]}
	addr=${4:-127.0.0.1:7470}
	copy="$(dirname "$src")/restart-copy"
	rm -rf "$copy"
	cp -a "$src" "$copy"
	sync
	load=$(cut -d' ' -f1 /proc/loadavg)
	t0=$(now)
	start_fencelock "$bin" "$addr" "$copy" "$(dirname "$src")/fencelock-restart.log"
	read -r ut st < <(awk '{print $14, $15}' "/proc/$newpid/stat")
	tick=$(getconf CLK_TCK)
	rss=$(awk '/VmRSS/ {print $2, $3}' "/proc/$newpid/status")
	sleep 5
	rss5=$(awk '/VmRSS/ {print $2, $3}' "/proc/$newpid/status")
	kill -9 "$newpid"
	wait "$newpid" 2>/dev/null || true
	rm -rf "$copy"
	echo "fencelock restart: $(elapsed "$t0" "$t1") s to the first write; cpu $(awk -v u="$ut" -v s="$st" -v t="$tick" 'BEGIN { printf "%.2f s (user %.2f, sys %.2f)", (u + s) / t, u / t, s / t }'); load $load; rss $rss, $rss5 5 s later"
	;;
*)
	echo "usage: $0 redis | fencelock BIN DATA_DIR [ADDR] | fencelock-copy BIN DATA_DIR [ADDR]" >&2
	exit 2
	;;
esac
