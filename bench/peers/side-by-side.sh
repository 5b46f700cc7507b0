#!/usr/bin/env bash
# W1-W5 side by side (issue 45 item 6): one node, then three, fencelock on
# both engines beside Redis, etcd and ZooKeeper; each table in OUTDIR, a
# log of what ran when (with the load average) in OUTDIR/log.
#
#   FL=/tmp/fl FLBENCH=/tmp/flbench bash bench/peers/side-by-side.sh OUTDIR [DURATION ROUNDS W4LOCKS]
#
# One node: fresh servers of both engines and setup.sh's peers; W1-W3 and
# W5 (ZooKeeper and Redis have no W5), then W4 (fencelock on each engine
# and Redis; etcd and ZooKeeper are left out: a million keys take them
# minutes). Three nodes: cluster.sh's clusters; W1-W3, then W5 with a 60 s
# TTL (100,000 leases take etcd's cluster longer than 30 s to open).
# Everything lives under /tmp/sbs; ports are setup.sh's and cluster.sh's
# plus 17470-17471.
set -u
OUT=$1; D=${2:-5s}; R=${3:-3}; W4=${4:-1000000}
mkdir -p "$OUT"; B=$(cd "$(dirname "$0")/.." && pwd)
FL=${FL:?the fencelock binary}; FB=${FLBENCH:?the fencelock-bench binary}
ld() { cut -d' ' -f1-3 /proc/loadavg; }
waitfl() { for k in $(seq 100); do curl -sf -o /dev/null -H 'Content-Type: application/json' -d '{"key":"sbs-probe","holder":"p","ttl_ms":1000}' http://$1/v1/acquire && return 0; sleep 0.1; done; echo "no server at $1"; }
log() { echo "[$(date -u +%H:%M:%S) load $(ld)] $*" | tee -a $OUT/log; }
cd "$B"
export PEERS_DIR=/tmp/sbs/peers CLUSTER_DIR=/tmp/sbs/clusters
# ---- one node
rm -rf /tmp/sbs/d1 /tmp/sbs/d2; mkdir -p /tmp/sbs/d1 /tmp/sbs/d2
$FL server --listen 127.0.0.1:17470 --data /tmp/sbs/d1 --log-level warn > $OUT/srv1.log 2>&1 & P1=$!
$FL server --listen 127.0.0.1:17471 --data /tmp/sbs/d2 --engine etcd --log-level warn > $OUT/srv2.log 2>&1 & P2=$!
bash peers/setup.sh start > $OUT/setup.log 2>&1
waitfl 127.0.0.1:17470; waitfl 127.0.0.1:17471
log "one node W1-W3: fencelock(hashicorp),etcd,redis,zookeeper"
$FB compare --systems fencelock,etcd,redis,zookeeper --workloads w1,w2,w3 --duration $D --rounds $R --markdown --addr-fencelock 127.0.0.1:17470 > $OUT/one-w123.md 2>$OUT/one-w123.err
log "one node W1-W3: fencelock(etcd engine)"
$FB compare --systems fencelock --workloads w1,w2,w3 --duration $D --rounds $R --markdown --addr-fencelock 127.0.0.1:17471 > $OUT/one-w123-etcdengine.md 2>$OUT/one-w123-etcdengine.err
log "one node W5: fencelock(hashicorp),etcd"
$FB compare --systems fencelock,etcd --workloads w5 --duration 10s --rounds $R --markdown --addr-fencelock 127.0.0.1:17470 > $OUT/one-w5.md 2>$OUT/one-w5.err
log "one node W5: fencelock(etcd engine)"
$FB compare --systems fencelock --workloads w5 --duration 10s --rounds $R --markdown --addr-fencelock 127.0.0.1:17471 > $OUT/one-w5-etcdengine.md 2>$OUT/one-w5-etcdengine.err
kill $P1 $P2; wait $P1 $P2 2>/dev/null
log "one node W4: fencelock(hashicorp) fresh"
rm -rf /tmp/sbs/d1 /tmp/sbs/d2; mkdir -p /tmp/sbs/d1 /tmp/sbs/d2
$FL server --listen 127.0.0.1:17470 --data /tmp/sbs/d1 --log-level warn > $OUT/srv1b.log 2>&1 & P1=$!
waitfl 127.0.0.1:17470
$FB compare --systems fencelock --workloads w4 --w4-locks $W4 --markdown --addr-fencelock 127.0.0.1:17470 --data-fencelock /tmp/sbs/d1 > $OUT/one-w4-hashicorp.md 2>$OUT/one-w4-hashicorp.err
kill $P1; wait $P1 2>/dev/null
log "one node W4: fencelock(etcd engine) fresh"
$FL server --listen 127.0.0.1:17471 --data /tmp/sbs/d2 --engine etcd --log-level warn > $OUT/srv2b.log 2>&1 & P2=$!
waitfl 127.0.0.1:17471
$FB compare --systems fencelock --workloads w4 --w4-locks $W4 --markdown --addr-fencelock 127.0.0.1:17471 --data-fencelock /tmp/sbs/d2 > $OUT/one-w4-etcdengine.md 2>$OUT/one-w4-etcdengine.err
kill $P2; wait $P2 2>/dev/null
log "one node W4: redis"
$FB compare --systems redis --workloads w4 --w4-locks $W4 --markdown > $OUT/one-w4-redis.md 2>$OUT/one-w4-redis.err
bash peers/setup.sh stop >> $OUT/setup.log 2>&1
# ---- three nodes
log "three nodes: start clusters"
FENCELOCK_BIN=$FL bash peers/cluster.sh start > $OUT/cluster.log 2>&1
A3="--addr-fencelock 127.0.0.1:7481,127.0.0.1:7482,127.0.0.1:7483 --addr-etcd 127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793 --addr-zookeeper 127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813"
log "three nodes W1-W3: fencelock(hashicorp),etcd,zookeeper"
$FB compare --systems fencelock,etcd,zookeeper --workloads w1,w2,w3 --duration $D --rounds $R --markdown $A3 > $OUT/three-w123.md 2>$OUT/three-w123.err
log "three nodes W5: fencelock(hashicorp),etcd"
$FB compare --systems fencelock,etcd --workloads w5 --w5-ttl 60s --duration 10s --rounds $R --markdown $A3 > $OUT/three-w5.md 2>$OUT/three-w5.err
bash peers/cluster.sh stop-only fencelock >> $OUT/cluster.log 2>&1
log "three nodes: fencelock etcd engine"
FENCELOCK_BIN=$FL FENCELOCK_ARGS="--engine etcd" bash peers/cluster.sh start-only fencelock >> $OUT/cluster.log 2>&1
$FB compare --systems fencelock --workloads w1,w2,w3 --duration $D --rounds $R --markdown $A3 > $OUT/three-w123-etcdengine.md 2>$OUT/three-w123-etcdengine.err
$FB compare --systems fencelock --workloads w5 --w5-ttl 60s --duration 10s --rounds $R --markdown $A3 > $OUT/three-w5-etcdengine.md 2>$OUT/three-w5-etcdengine.err
bash peers/cluster.sh stop >> $OUT/cluster.log 2>&1
log "done"
