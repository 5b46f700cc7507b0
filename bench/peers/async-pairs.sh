#!/usr/bin/env bash
# Interleaved W1 runs of fencelock's engine variants on fresh servers
# (issue 45 item 4): for each round, one fresh server (or three-node
# cluster) per variant in turn, each loaded for one `fencelock-bench run
# --workload w1` and stopped. Beside each rate: the servers' CPU per cycle
# (user + system time of every server process over the run, from
# /proc/PID/stat, divided by the cycles the run completed) and the load
# average as the run ended, since the machine may be shared.
#
#   bash bench/peers/async-pairs.sh FENCELOCK_BIN FENCELOCK_BENCH_BIN [ROUNDS] [DURATION]
#
# NODES (1 or 3, default 3); VARIANTS (default "hashicorp etcd etcd-async"):
# hashicorp is --engine hashicorp, etcd is --engine etcd, etcd-async is
# --engine etcd --etcd-async-writes. Ports: client BASE+1.., raft
# BASE+11.. (BASE default 7680). Data under $PAIRS_DIR (default
# /tmp/fencelock-async-pairs), removed between runs. One line per run:
#   VARIANT cycles/s p99 server-CPU-µs/cycle load1
set -euo pipefail
bin=${1:?usage: $0 FENCELOCK_BIN FENCELOCK_BENCH_BIN [ROUNDS] [DURATION]}
bench=${2:?usage: $0 FENCELOCK_BIN FENCELOCK_BENCH_BIN [ROUNDS] [DURATION]}
rounds=${3:-3}
dur=${4:-8s}
nodes=${NODES:-3}
variants=${VARIANTS:-hashicorp etcd etcd-async}
base=${BASE:-7680}
dir=${PAIRS_DIR:-/tmp/fencelock-async-pairs}
tck=$(getconf CLK_TCK)
peers="" addrs=""
for ((i = 0; i < nodes; i++)); do
	peers+="${peers:+,}n$i=127.0.0.1:$((base + 11 + i))"
	addrs+="${addrs:+,}127.0.0.1:$((base + 1 + i))"
done
pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop EXIT
cpu() { # the user + system ticks of every server
	local t=0 p
	for p in "${pids[@]}"; do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
one() { # VARIANT
	local args=(--engine hashicorp) i
	case $1 in
	etcd) args=(--engine etcd) ;;
	etcd-async) args=(--engine etcd --etcd-async-writes) ;;
	esac
	rm -rf "$dir" && mkdir -p "$dir"
	(umask 077 && "$bin" cluster secret >"$dir/cluster.secret")
	for ((i = 0; i < nodes; i++)); do
		local cl=(--peers "$peers" --raft "127.0.0.1:$((base + 11 + i))" --cluster-secret-file "$dir/cluster.secret")
		((nodes > 1)) || cl=()
		"$bin" server --id "n$i" --listen "127.0.0.1:$((base + 1 + i))" "${cl[@]}" --data "$dir/n$i" "${args[@]}" \
			--log-level warn >"$dir/n$i.log" 2>&1 &
		pids+=($!)
	done
	for ((i = 0; i < 100; i++)); do
		curl -sf "127.0.0.1:$((base + 1))/v1/cluster/members" 2>/dev/null | grep -q '"ready":true' && break
		sleep 0.1
	done
	local c0 line c1 rate p99 secs
	c0=$(cpu)
	line=$("$bench" run --system fencelock --workload w1 --duration "$dur" --addr "$addrs" 2>&1 | grep '^w1')
	c1=$(cpu)
	rate=$(awk '{print $3}' <<<"$line")
	p99=$(awk '{print $7}' <<<"$line")
	secs=${dur%s}
	echo "$1 $rate $p99 $(awk -v d=$((c1 - c0)) -v t="$tck" -v r="$rate" -v s="$secs" \
		'BEGIN { if (r > 0) printf "%.0f", d / t * 1e6 / (r * s); else print "-" }') $(cut -d' ' -f1 /proc/loadavg)"
	stop
}
for ((r = 1; r <= rounds; r++)); do
	for v in $variants; do
		one "$v"
	done
done
