#!/usr/bin/env bash
# Interleaved W1 runs of fencelock's two replication engines (issue 28): for
# each pair, a fresh three-node cluster on --engine hashicorp, then one on
# --engine etcd, each loaded for one `fencelock-bench run --workload w1` and
# stopped. Fresh clusters in turn keep the machine's drift out of the ratio.
#
#   bash bench/peers/engine-pairs.sh FENCELOCK_BIN FENCELOCK_BENCH_BIN [PAIRS] [DURATION]
#
# Ports: client 127.0.0.1:7581-7583, raft 7591-7593. Data under
# $PAIRS_DIR (default /tmp/fencelock-engine-pairs), removed between runs.
set -euo pipefail
bin=${1:?usage: $0 FENCELOCK_BIN FENCELOCK_BENCH_BIN [PAIRS] [DURATION]}
bench=${2:?usage: $0 FENCELOCK_BIN FENCELOCK_BENCH_BIN [PAIRS] [DURATION]}
pairs=${3:-5}
dur=${4:-8s}
dir=${PAIRS_DIR:-/tmp/fencelock-engine-pairs}
peers="n0=127.0.0.1:7591,n1=127.0.0.1:7592,n2=127.0.0.1:7593"
addrs="127.0.0.1:7581,127.0.0.1:7582,127.0.0.1:7583"
pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop EXIT
one() { # ENGINE
	rm -rf "$dir" && mkdir -p "$dir"
	(umask 077 && "$bin" cluster secret >"$dir/cluster.secret")
	local i
	for i in 0 1 2; do
		"$bin" server --id "n$i" --listen "127.0.0.1:$((7581 + i))" --raft "127.0.0.1:$((7591 + i))" \
			--peers "$peers" --data "$dir/n$i" --engine "$1" --cluster-secret-file "$dir/cluster.secret" \
			--log-level warn >"$dir/n$i.log" 2>&1 &
		pids+=($!)
	done
	for ((i = 0; i < 100; i++)); do
		curl -sf 127.0.0.1:7581/v1/cluster/members 2>/dev/null | grep -q '"ready":true' && break
		sleep 0.1
	done
	echo "$1 $("$bench" run --system fencelock --workload w1 --duration "$dur" --addr "$addrs" 2>&1 | grep '^w1')"
	stop
}
for ((p = 1; p <= pairs; p++)); do
	one hashicorp
	one etcd
done
