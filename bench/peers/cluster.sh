#!/usr/bin/env bash
# Three-node clusters of fencelock, etcd and ZooKeeper on this machine, for
# the cluster benchmarks (issue 17): every node is our own process on
# 127.0.0.1 with a fresh data directory and the systems' default durability
# (fsync on commit). Redis has no consensus cluster to compare with.
#
#   bash bench/peers/cluster.sh [start]   install if missing, start, wait for a leader
#   bash bench/peers/cluster.sh stop      stop what start started, remove data
#   bash bench/peers/cluster.sh status    which nodes answer
#   bash bench/peers/cluster.sh pids SYSTEM     the node pids, one per line
#   bash bench/peers/cluster.sh leader SYSTEM   the index of the leading node
#   bash bench/peers/cluster.sh kill-leader SYSTEM   kill -9 it; prints its index
#   bash bench/peers/cluster.sh revive SYSTEM   restart dead nodes on their data
#   bash bench/peers/cluster.sh start-only SYSTEM   start one system's nodes, fresh
#   bash bench/peers/cluster.sh stop-only SYSTEM    stop one system's nodes, remove data
#
# start prints the --addr-* flags for fencelock-bench compare. FENCELOCK_BIN
# is the server binary (default: built from this checkout into $CLUSTER_DIR);
# FENCELOCK_ARGS are more server flags for every node, e.g. "--engine etcd".
# Ports, node i in 0..2:
#   fencelock client 127.0.0.1:(7481+i), raft 7491+i
#   etcd      client 127.0.0.1:(23791+i), peer 23801+i
#   ZooKeeper client 127.0.0.1:(21811+i), quorum 28881+i, election 38881+i
# Everything lives under $CLUSTER_DIR (default /tmp/fencelock-clusters).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

CLUSTER_DIR=${CLUSTER_DIR:-/tmp/fencelock-clusters}
PEERS_DIR=$CLUSTER_DIR # stop_one's root
nodes=(0 1 2)

# REVIVE=1 (the revive command) restarts dead nodes on their data; start
# gives every node it starts a fresh directory.
REVIVE=0
fresh() { # DIR
	if ((REVIVE)); then
		mkdir -p "$1"
	else
		rm -rf "$1" && mkdir -p "$1"
	fi
}

fl_client() { echo "127.0.0.1:$((7481 + $1))"; }
fl_raft() { echo "127.0.0.1:$((7491 + $1))"; }
etcd_client() { echo "127.0.0.1:$((23791 + $1))"; }
etcd_peer() { echo "127.0.0.1:$((23801 + $1))"; }
zk_client() { echo "127.0.0.1:$((21811 + $1))"; }

addrs() { # SYSTEM: the comma-separated client addresses
	local f=$1_client out="" i
	for i in "${nodes[@]}"; do out+="${out:+,}$($f "$i")"; done
	echo "$out"
}

start_fencelock() {
	local bin=${FENCELOCK_BIN:-} peers="" i
	if [[ -z $bin ]]; then
		bin="$CLUSTER_DIR/fencelock-server"
		if ! ((REVIVE)) || [[ ! -x $bin ]]; then
			(cd "$here/../.." && go build -o "$bin" ./cmd/fencelock)
		fi
	fi
	for i in "${nodes[@]}"; do peers+="${peers:+,}n$i=$(fl_raft "$i")"; done
	# The cluster's secret, made once, readable by its owner only; a
	# revived node keeps the one its cluster has.
	local secret="$CLUSTER_DIR/fencelock.secret"
	if [[ ! -s $secret ]] || ! ((REVIVE)); then
		mkdir -p "$CLUSTER_DIR"
		(umask 077 && "$bin" cluster secret >"$secret")
	fi
	for i in "${nodes[@]}"; do
		local d="$CLUSTER_DIR/fencelock$i"
		if pid_alive "$d/pid" && port_open "$((7481 + i))"; then continue; fi
		fresh "$d"
		nohup "$bin" server --id "n$i" --listen "$(fl_client "$i")" --raft "$(fl_raft "$i")" \
			--peers "$peers" --data "$d/data" --cluster-secret-file "$secret" --log-level warn ${FENCELOCK_ARGS:-} >>"$d/server.log" 2>&1 </dev/null &
		echo $! >"$d/pid"
	done
	for i in "${nodes[@]}"; do
		wait_port "fencelock n$i" "$((7481 + i))" "$CLUSTER_DIR/fencelock$i/pid" "$CLUSTER_DIR/fencelock$i/server.log"
	done
	wait_leader fencelock
	log "fencelock cluster up on $(addrs fl)"
}

start_etcd() {
	local initial="" i
	for i in "${nodes[@]}"; do initial+="${initial:+,}e$i=http://$(etcd_peer "$i")"; done
	for i in "${nodes[@]}"; do
		local d="$CLUSTER_DIR/etcd$i"
		if pid_alive "$d/pid" && port_open "$((23791 + i))"; then continue; fi
		fresh "$d"
		local state=new
		((REVIVE)) && state=existing
		nohup etcd --name "e$i" --data-dir "$d/data" \
			--listen-client-urls "http://$(etcd_client "$i")" \
			--advertise-client-urls "http://$(etcd_client "$i")" \
			--listen-peer-urls "http://$(etcd_peer "$i")" \
			--initial-advertise-peer-urls "http://$(etcd_peer "$i")" \
			--initial-cluster "$initial" --initial-cluster-token fencelock-bench \
			--initial-cluster-state "$state" >>"$d/etcd.log" 2>&1 </dev/null &
		echo $! >"$d/pid"
	done
	for i in "${nodes[@]}"; do
		wait_port "etcd e$i" "$((23791 + i))" "$CLUSTER_DIR/etcd$i/pid" "$CLUSTER_DIR/etcd$i/etcd.log"
	done
	wait_leader etcd
	log "etcd cluster up on $(addrs etcd)"
}

start_zookeeper() {
	local servers="" i
	for i in "${nodes[@]}"; do servers+="server.$((i + 1))=127.0.0.1:$((28881 + i)):$((38881 + i))"$'\n'; done
	for i in "${nodes[@]}"; do
		local d="$CLUSTER_DIR/zookeeper$i"
		if pid_alive "$d/pid" && port_open "$((21811 + i))"; then continue; fi
		fresh "$d"
		mkdir -p "$d/data" "$d/conf"
		echo $((i + 1)) >"$d/data/myid"
		# As setup.sh's standalone server (admin server off, no per-IP
		# client limit, fsync on), plus the ensemble.
		cat >"$d/conf/zoo.cfg" <<CONF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$d/data
clientPort=$((21811 + i))
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr
maxSessionTimeout=120000
$servers
CONF
		nohup java -Xmx512m -cp "$d/conf:/usr/share/java/zookeeper.jar" \
			org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/conf/zoo.cfg" \
			>>"$d/stdout.log" 2>&1 </dev/null &
		echo $! >"$d/pid"
	done
	for i in "${nodes[@]}"; do
		wait_port "zookeeper z$i" "$((21811 + i))" "$CLUSTER_DIR/zookeeper$i/pid" "$CLUSTER_DIR/zookeeper$i/stdout.log"
	done
	wait_leader zookeeper
	log "zookeeper ensemble up on $(addrs zk)"
}


# leader SYSTEM: the index of the node that leads, from the nodes' own
# answers (fencelock's members, etcd's maintenance status over its JSON
# gateway, ZooKeeper's srvr four-letter word).
leader() {
	local i
	for i in "${nodes[@]}"; do
		case $1 in
		fencelock)
			if curl -fsS -m 1 "http://$(fl_client "$i")/v1/cluster/members" 2>/dev/null | grep -q "\"leader\":\"n$i\""; then
				echo "$i"
				return 0
			fi
			;;
		etcd)
			local st
			st=$(curl -fsS -m 1 -X POST -d '{}' "http://$(etcd_client "$i")/v3/maintenance/status" 2>/dev/null) || continue
			local me lead
			me=$(grep -o '"member_id":"[0-9]*"' <<<"$st" | head -1 | grep -o '[0-9]*')
			lead=$(grep -o '"leader":"[0-9]*"' <<<"$st" | head -1 | grep -o '[0-9]*')
			if [[ -n $me && $me == "$lead" ]]; then
				echo "$i"
				return 0
			fi
			;;
		zookeeper)
			local out
			out=$({ exec 3<>"/dev/tcp/127.0.0.1/$((21811 + i))" && printf srvr >&3 && cat <&3; } 2>/dev/null) || continue
			if grep -q '^Mode: leader' <<<"$out"; then
				echo "$i"
				return 0
			fi
			;;
		esac
	done
	return 1
}

wait_leader() { # SYSTEM
	local k
	for ((k = 0; k < 300; k++)); do
		leader "$1" >/dev/null && return 0
		sleep 0.1
	done
	log "$1 has no leader after 30 s; see its logs under $CLUSTER_DIR"
	return 1
}

case "${1:-start}" in
start)
	install_packages
	mkdir -p "$CLUSTER_DIR"
	start_fencelock
	start_etcd
	start_zookeeper
	echo "--addr-fencelock $(addrs fl) --addr-etcd $(addrs etcd) --addr-zookeeper $(addrs zk)"
	;;
stop)
	for s in zookeeper etcd fencelock; do
		for i in "${nodes[@]}"; do stop_one "$s$i"; done
	done
	rm -f "$CLUSTER_DIR/fencelock-server"
	;;
status)
	rc=0
	for pair in fencelock:7481 etcd:23791 zookeeper:21811; do
		name=${pair%%:*} port=${pair##*:}
		for i in "${nodes[@]}"; do
			if port_open "$((port + i))"; then echo "$name$i up 127.0.0.1:$((port + i))"; else echo "$name$i down"; rc=1; fi
		done
	done
	exit $rc
	;;
leader)
	leader "${2:?usage: $0 leader fencelock|etcd|zookeeper}"
	;;
kill-leader)
	# kill -9 the leader of SYSTEM; prints its index.
	sys=${2:?usage: $0 kill-leader fencelock|etcd|zookeeper}
	l=$(leader "$sys") || { log "$sys has no leader"; exit 1; }
	kill -9 "$(cat "$CLUSTER_DIR/$sys$l/pid")"
	echo "$l"
	;;
revive)
	# Restart the dead nodes of SYSTEM on their own data; wait for a leader.
	sys=${2:?usage: $0 revive fencelock|etcd|zookeeper}
	REVIVE=1
	"start_$sys" 2>/dev/null
	;;
start-only)
	sys=${2:?usage: $0 start-only fencelock|etcd|zookeeper}
	mkdir -p "$CLUSTER_DIR"
	"start_$sys"
	;;
stop-only)
	sys=${2:?usage: $0 stop-only fencelock|etcd|zookeeper}
	for i in "${nodes[@]}"; do stop_one "$sys$i"; done
	;;
pids)
	for i in "${nodes[@]}"; do cat "$CLUSTER_DIR/${2:?usage: $0 pids fencelock|etcd|zookeeper}$i/pid"; done
	;;
*)
	echo "usage: $0 [start|stop|status|pids SYSTEM]" >&2
	exit 2
	;;
esac
