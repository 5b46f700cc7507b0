#!/usr/bin/env bash
# Raft timing on this machine (docs/OPERATIONS.md, "Raft timing"): a
# 3-node cluster of real server processes on 127.0.0.1, each run on fresh
# data directories under a temp dir, with the raft timeout flags given
# after the mode.
#
#   bash bench/raft-timing.sh BIN flap SECONDS [SERVER FLAGS...]
#       CPU hogs (HOGS busy loops, default 4 per core) and a light write load
#       (fencelock bench, 4 clients) for SECONDS; then counts, over all
#       three logs, the elections started ("heartbeat timeout reached") and
#       the leaders that stepped down ("failed to contact quorum").
#   bash bench/raft-timing.sh BIN failover RUNS [SERVER FLAGS...]
#       RUNS times: start the cluster, wait for a leader, kill -9 it, and
#       time until one of the other two answers a write (POST /v1/acquire
#       with 200). Prints each time and the min/median/max.
#
# Ports: BASE (default a random one in 20000-59000) .. BASE+5.
set -euo pipefail

bin=${1:?usage: $0 BIN flap SECONDS|failover RUNS [FLAGS...]}
mode=${2:?mode: flap or failover}
n=${3:?SECONDS or RUNS}
shift 3
flags=("$@")
hogn=${HOGS:-$((4 * $(nproc)))}
base=${BASE:-$((20000 + RANDOM % 39000))}
work=$(mktemp -d /tmp/raft-timing.XXXXXX)
pids=()
hogs=()
skip=()
trap 'echo "raft-timing: failed at line $LINENO" >&2' ERR

cleanup() {
	for p in "${hogs[@]}" "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }
client() { echo "127.0.0.1:$((base + $1))"; }
raft() { echo "127.0.0.1:$((base + 3 + $1))"; }
peers="n0=$(raft 0),n1=$(raft 1),n2=$(raft 2)"

(umask 077 && "$bin" cluster secret >"$work/cluster.secret")

start_node() { # I RUN
	"$bin" server --id "n$1" --listen "$(client "$1")" --raft "$(raft "$1")" --peers "$peers" \
		--data "$work/$2/n$1" --cluster-secret-file "$work/cluster.secret" "${flags[@]}" 2>>"$work/n$1.log" &
	pids[$1]=$!
}

start_cluster() { # RUN
	for i in 0 1 2; do start_node "$i" "$1"; done
}

stop_cluster() {
	{
		for i in 0 1 2; do kill -9 "${pids[$i]}" || true; done
		for i in 0 1 2; do wait "${pids[$i]}" || true; done
	} 2>/dev/null
}

leader() { # prints the index of the node that reports fencelock_is_leader 1
	for i in 0 1 2; do
		if curl -s -m 1 "http://$(client "$i")/metrics" 2>/dev/null | grep -q '^fencelock_is_leader 1'; then
			echo "$i"
			return 0
		fi
	done
	return 1
}

wait_leader() {
	local deadline=$(($(now_ms) + 30000)) l
	until l=$(leader); do
		(($(now_ms) < deadline)) || { echo "no leader after 30s" >&2; exit 1; }
		sleep 0.05
	done
	echo "$l"
}

write_ok() { # I KEY: one try-once acquire; true on 200
	[[ $(curl -s -m 1 -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' "http://$(client "$1")/v1/acquire" \
		-d "{\"key\":\"$2\",\"holder\":\"probe\",\"ttl_ms\":1000}" 2>/dev/null) == 200 ]]
}

case "$mode" in
flap)
	start_cluster flap
	wait_leader >/dev/null
	# Count only what happens under load, not the first election.
	for i in 0 1 2; do skip[$i]=$(wc -l <"$work/n$i.log"); done
	for _ in $(seq 1 "$hogn"); do
		sh -c 'while :; do :; done' &
		hogs+=($!)
	done
	"$bin" bench --addr "$(client 0),$(client 1),$(client 2)" --clients 4 --duration "${n}s" >"$work/bench.out" 2>&1 || true
	for p in "${hogs[@]}"; do { kill -9 "$p" && wait "$p"; } 2>/dev/null || true; done
	hogs=()
	loaded() { for i in 0 1 2; do tail -n "+$((skip[i] + 1))" "$work/n$i.log"; done; }
	elections=$(loaded | grep -c 'heartbeat timeout reached, starting election' || true)
	stepdowns=$(loaded | grep -c 'failed to contact quorum of nodes, stepping down' || true)
	echo "flags: ${flags[*]:-(defaults)}"
	echo "window ${n}s, $hogn busy loops on $(nproc) cores: elections started $elections, leader step-downs $stepdowns"
	echo "bench: $(tail -1 "$work/bench.out")"
	;;
failover)
	times=()
	for run in $(seq 1 "$n"); do
		start_cluster "run$run"
		l=$(wait_leader)
		others=()
		for i in 0 1 2; do [[ $i == "$l" ]] || others+=("$i"); done
		# A write first, so that the cluster is serving before the kill.
		until write_ok "$l" "warm/$run"; do sleep 0.02; done
		t0=$(now_ms)
		kill -9 "${pids[$l]}" 2>/dev/null
		served=""
		until [[ -n $served ]]; do
			for i in "${others[@]}"; do
				if write_ok "$i" "after/$run"; then served=$i; break; fi
			done
			(($(now_ms) - t0 < 60000)) || { echo "run $run: no new leader after 60s" >&2; exit 1; }
		done
		t=$(($(now_ms) - t0))
		times+=("$t")
		echo "run $run: leader n$l killed, n$served served a write after ${t} ms"
		stop_cluster
	done
	sorted=($(printf '%s\n' "${times[@]}" | sort -n))
	echo "flags: ${flags[*]:-(defaults)}"
	echo "failover over $n runs (ms): min ${sorted[0]} median ${sorted[$((n / 2))]} max ${sorted[$((n - 1))]}"
	;;
*)
	echo "unknown mode $mode" >&2
	exit 2
	;;
esac
