#!/bin/sh
# The fill attack of issue 24 (items 2 and 3), measured: start a fencelock
# server of our own on free loopback ports and a fresh data directory, run
# cmd/fillattack against it, print its figures, stop the server.
#
#   bench/fillattack.sh BINARY frames        # 100 x (4 MiB - 1 of a 4 MiB frame), ACLs off
#   bench/fillattack.sh BINARY frames-acl    # the same, ACLs bootstrapped
#   bench/fillattack.sh BINARY frames-tls    # 60 over TLS without a token, ACLs bootstrapped
#   bench/fillattack.sh BINARY small-acl     # 4,000 x (8 KiB - 1 of an 8 KiB frame), ACLs bootstrapped
#   bench/fillattack.sh BINARY raft-tls      # 1,100 idle connections to a mutual-TLS raft port, ulimit -n 1024
#
# Needs openssl (TLS cases), curl, python3 (a free port). Extra arguments
# go to fillattack.
set -eu
bin=$1; shift
case=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
(cd "$here" && go build -o "$dir/fillattack" ./cmd/fillattack)
listen=127.0.0.1:$(port)
raft=127.0.0.1:$(port)
scheme=http
tls=""
curltls=""
case $case in
*tls*)
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=fill CA" \
		-keyout "$dir/ca-key.pem" -out "$dir/ca.pem" -addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	printf 'subjectAltName = IP:127.0.0.1, URI:fencelock://node/n1\nextendedKeyUsage = serverAuth, clientAuth\nkeyUsage = critical, digitalSignature\n' >"$dir/node.ext"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=n1" -keyout "$dir/n1-key.pem" -out "$dir/n1.csr" 2>/dev/null
	openssl x509 -req -in "$dir/n1.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial -days 1 -extfile "$dir/node.ext" -out "$dir/n1.pem" 2>/dev/null
	tls="--cert $dir/n1.pem --key $dir/n1-key.pem --ca $dir/ca.pem"
	curltls="--cacert $dir/ca.pem"
	scheme=https
	;;
esac
# Without TLS the raft port's credential is a cluster secret.
[ -n "$tls" ] || { (umask 077 && "$bin" cluster secret >"$dir/cluster.secret") && tls="--cluster-secret-file $dir/cluster.secret"; }
files=$(ulimit -n)
case $case in
raft*) files=1024 ;; # the server's limit only: the attacker needs more
esac
# shellcheck disable=SC2086
(ulimit -n "$files" && exec "$bin" server --id n1 --listen "$listen" --raft "$raft" --data "$dir/data" $tls 2>"$dir/log") &
pid=$!
i=0
until curl -sf $curltls "$scheme://$listen/readyz" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 200 ] || { cat "$dir/log"; exit 1; }
	sleep 0.05
done
case $case in
*acl* | *tls*)
	curl -sf $curltls -X POST -H 'Content-Type: application/json' -d '{}' "$scheme://$listen/v1/acl/bootstrap" >/dev/null
	;;
esac
ca=""
[ -z "$curltls" ] || ca="--tls-ca $dir/ca.pem"
# shellcheck disable=SC2086
case $case in
frames | frames-acl) "$dir/fillattack" --addr "$listen" --pid $pid --conns 100 "$@" ;;
frames-tls) "$dir/fillattack" --addr "$listen" --pid $pid --conns 60 $ca "$@" ;;
small-acl) "$dir/fillattack" --addr "$listen" --pid $pid --conns 4000 --declare 8192 --send 8191 "$@" ;;
raft-tls)
	"$dir/fillattack" --mode raft --addr "$raft" --pid $pid --conns 1100 "$@" &
	attack=$!
	sleep 3 # the connections are open and held
	# Is the client port still answering while they are held?
	code=$(curl -s -m 5 $curltls -o /dev/null -w '%{http_code}' "$scheme://$listen/healthz" || true)
	echo "client port /healthz while they are held: ${code:-000} (000: no answer within 5 s)"
	wait $attack
	echo "server log lines: $(wc -l <"$dir/log"), of them about raft peers refused: $(grep -c 'raft peer refused\|raft port' "$dir/log" || true), 'too many open files': $(grep -c 'too many open files' "$dir/log" || true)"
	;;
*) echo "unknown case $case" >&2; exit 2 ;;
esac
