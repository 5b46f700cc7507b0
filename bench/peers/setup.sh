#!/usr/bin/env bash
# Install and run the systems fencelock is compared with (issue 7), each as our
# own process on 127.0.0.1 with its own config and a fresh data directory, so
# nothing depends on (or collides with) Debian's packaged services.
#
#   bash bench/peers/setup.sh [start]   install if missing, start, wait until ready
#   bash bench/peers/setup.sh stop      stop what start started, remove data
#   bash bench/peers/setup.sh status    which peers answer
#
# Idempotent: start leaves a peer that already answers alone; stop ignores
# peers that are not running. Ports (override with the environment):
#   etcd 3.4     client 127.0.0.1:$ETCD_PORT (23790), peer $ETCD_PEER_PORT (23800)
#   Redis 7      127.0.0.1:$REDIS_PORT (63790), appendonly yes, appendfsync always
#   ZooKeeper 3.8 127.0.0.1:$ZK_PORT (21810), standalone, admin server off
# Everything lives under $PEERS_DIR (default /tmp/fencelock-peers).
set -euo pipefail

PEERS_DIR=${PEERS_DIR:-/tmp/fencelock-peers}
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
REDIS_PORT=${REDIS_PORT:-63790}
ZK_PORT=${ZK_PORT:-21810}

# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

start_etcd() {
	local d="$PEERS_DIR/etcd"
	if pid_alive "$d/pid" && port_open "$ETCD_PORT"; then log "etcd already up on 127.0.0.1:$ETCD_PORT"; return; fi
	rm -rf "$d" && mkdir -p "$d"
	# Default fsync behaviour (no --unsafe-no-fsync), one member, loopback only.
	nohup etcd --name bench --data-dir "$d/data" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "bench=http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster-state new >"$d/etcd.log" 2>&1 </dev/null &
	echo $! >"$d/pid"
	wait_port etcd "$ETCD_PORT" "$d/pid" "$d/etcd.log"
	log "etcd $(etcd --version | head -1 | awk '{print $3}') up on 127.0.0.1:$ETCD_PORT (pid $(cat "$d/pid"))"
}

start_redis() {
	local d="$PEERS_DIR/redis"
	if pid_alive "$d/pid" && port_open "$REDIS_PORT"; then log "redis already up on 127.0.0.1:$REDIS_PORT"; return; fi
	rm -rf "$d" && mkdir -p "$d/data"
	# Every write is fsynced before the reply (appendfsync always); RDB
	# snapshots are off so a background save never lands inside a run.
	cat >"$d/redis.conf" <<CONF
bind 127.0.0.1
port $REDIS_PORT
protected-mode yes
daemonize no
dir $d/data
appendonly yes
appendfsync always
save ""
logfile $d/redis.log
CONF
	nohup redis-server "$d/redis.conf" >"$d/stdout.log" 2>&1 </dev/null &
	echo $! >"$d/pid"
	wait_port redis "$REDIS_PORT" "$d/pid" "$d/redis.log"
	log "redis $(redis-server --version | awk '{print $3}' | sed s/^v=//) up on 127.0.0.1:$REDIS_PORT (pid $(cat "$d/pid"))"
}

start_zookeeper() {
	local d="$PEERS_DIR/zookeeper"
	if pid_alive "$d/pid" && port_open "$ZK_PORT"; then log "zookeeper already up on 127.0.0.1:$ZK_PORT"; return; fi
	rm -rf "$d" && mkdir -p "$d/data" "$d/conf"
	# Standalone, loopback only; the admin server (Jetty on *:8080) is off;
	# maxClientCnxns 0 lifts the per-IP limit of 60 since every client is
	# 127.0.0.1. forceSync stays at its default (yes): the txn log is fsynced.
	cat >"$d/conf/zoo.cfg" <<CONF
tickTime=2000
dataDir=$d/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr
maxSessionTimeout=120000
CONF
	# Debian's zookeeper.jar finds no SLF4J binding on this classpath, so the
	# server logs nothing beyond stdout.log; that is fine for a benchmark.
	nohup java -Xmx1g \
		-cp "$d/conf:/usr/share/java/zookeeper.jar" \
		org.apache.zookeeper.server.ZooKeeperServerMain "$d/conf/zoo.cfg" \
		>"$d/stdout.log" 2>&1 </dev/null &
	echo $! >"$d/pid"
	wait_port zookeeper "$ZK_PORT" "$d/pid" "$d/stdout.log"
	log "zookeeper up on 127.0.0.1:$ZK_PORT (pid $(cat "$d/pid"))"
}

status() {
	local name port rc=0
	for pair in "etcd:$ETCD_PORT" "redis:$REDIS_PORT" "zookeeper:$ZK_PORT"; do
		name=${pair%%:*} port=${pair##*:}
		if port_open "$port"; then echo "$name up 127.0.0.1:$port"; else echo "$name down"; rc=1; fi
	done
	return $rc
}

case "${1:-start}" in
start)
	install_packages
	mkdir -p "$PEERS_DIR"
	start_etcd
	start_redis
	start_zookeeper
	echo "--addr-etcd 127.0.0.1:$ETCD_PORT --addr-redis 127.0.0.1:$REDIS_PORT --addr-zookeeper 127.0.0.1:$ZK_PORT"
	;;
stop)
	stop_one zookeeper
	stop_one redis
	stop_one etcd
	;;
status) status ;;
*)
	echo "usage: $0 [start|stop|status]" >&2
	exit 2
	;;
esac
