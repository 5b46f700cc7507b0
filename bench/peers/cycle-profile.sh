#!/usr/bin/env bash
# What one W1 cycle (acquire + release) costs, server and driver apart:
# CPU, system calls, context switches, allocations and goroutine
# hand-offs per cycle, plus CPU profiles to read where it goes
# (docs/BENCHMARKS.md, issue 45).
#
#   bash bench/peers/cycle-profile.sh fencelock OUT [ADDR]   # a server built with -tags pprof, started with FENCELOCK_PPROF
#   bash bench/peers/cycle-profile.sh redis OUT              # the Redis of setup.sh
#
# Environment: FLBENCH (the fencelock-bench binary, default
# /tmp/flbench), WINDOW (seconds measured, default 8), SERVER_PPROF (the
# server's FENCELOCK_PPROF address, default 127.0.0.1:16060),
# CLIENT_PPROF (the driver's FLBENCH_PPROF, default 127.0.0.1:16061).
#
# The driver runs W1 (32 clients) for WINDOW+20 s. From 2 s in, for WINDOW
# s: perf stat of each process (task-clock, context switches, system
# calls), CPU profiles (pprof; perf record for Redis), allocations
# (runtime MemStats; none for Redis). Then 2 s of perf trace -s (system
# calls by name; it slows the run a little, so its counts are read per
# cycle of that window), then 1 s of runtime traces, whose
# Waiting->Runnable transitions are the goroutine hand-offs. Cycles are
# the server's own count: releases answered 200 (fencelock), EVALSHA
# calls / 2 (Redis). Needs perf, curl, go (for go tool trace), ss.
set -euo pipefail

sys=${1:?system: fencelock or redis}
out=${2:?output directory}
addr=${3:-127.0.0.1:17470}
FLBENCH=${FLBENCH:-/tmp/flbench}
WINDOW=${WINDOW:-8}
SERVER_PPROF=${SERVER_PPROF:-127.0.0.1:16060}
CLIENT_PPROF=${CLIENT_PPROF:-127.0.0.1:16061}
REDIS_PORT=${REDIS_PORT:-63790}
mkdir -p "$out"

listener_pid() { ss -Hltnp "sport = :$1" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1; }

case "$sys" in
fencelock)
	spid=$(listener_pid "${addr##*:}")
	cycles() { curl -s "http://$addr/metrics" | awk '/^fencelock_http_requests_total\{code="200",route="\/v1\/release"\}/ {print $2}'; }
	runargs=(--system fencelock --addr "$addr")
	;;
redis)
	spid=$(listener_pid "$REDIS_PORT")
	cycles() { redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' | awk '{print $1 / 2}'; }
	runargs=(--system redis --addr "127.0.0.1:$REDIS_PORT")
	;;
*)
	echo "cycle-profile: system must be fencelock or redis" >&2
	exit 2
	;;
esac
[[ -n "$spid" ]] || { echo "cycle-profile: no server listening for $sys" >&2; exit 1; }

mallocs() { curl -s "http://$1/debug/pprof/heap?debug=1" | sed -n 's/^# Mallocs = //p'; }

FLBENCH_PPROF=$CLIENT_PPROF "$FLBENCH" run "${runargs[@]}" --workload w1 --duration "$((WINDOW + 20))s" >"$out/run.txt" &
drv=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://$CLIENT_PPROF/debug/pprof/" && break; sleep 0.1; done
cpid=$(ss -Hltnp "sport = :${CLIENT_PPROF##*:}" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1)
sleep 2

uptime >"$out/load.txt"
c0=$(cycles)
cm0=$(mallocs "$CLIENT_PPROF")
[[ $sys == fencelock ]] && sm0=$(mallocs "$SERVER_PPROF")
ev=task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter
perf stat -x, -e "$ev" -p "$spid" -o "$out/server.perfstat" -- sleep "$WINDOW" &
p1=$!
perf stat -x, -e "$ev" -p "$cpid" -o "$out/client.perfstat" -- sleep "$WINDOW" &
p2=$!
curl -s -o "$out/client.cpu.pprof" "http://$CLIENT_PPROF/debug/pprof/profile?seconds=$WINDOW" &
p3=$!
if [[ $sys == fencelock ]]; then
	curl -s -o "$out/server.cpu.pprof" "http://$SERVER_PPROF/debug/pprof/profile?seconds=$WINDOW" &
else
	perf record -q -e cpu-clock -g -p "$spid" -o "$out/server.perf.data" -- sleep "$WINDOW" 2>/dev/null &
fi
p4=$!
wait $p1 $p2 $p3 $p4
c1=$(cycles)
cm1=$(mallocs "$CLIENT_PPROF")
[[ $sys == fencelock ]] && sm1=$(mallocs "$SERVER_PPROF")

# System calls by name, 2 s.
t0=$(cycles)
perf trace -s -p "$spid" -o "$out/server.trace-s" -- sleep 2 2>/dev/null &
q1=$!
perf trace -s -p "$cpid" -o "$out/client.trace-s" -- sleep 2 2>/dev/null &
q2=$!
wait $q1 $q2
t1=$(cycles)

# Goroutine hand-offs, 1 s of runtime trace.
sleep 0.5
g0=$(cycles)
curl -s -o "$out/client.trace" "http://$CLIENT_PPROF/debug/pprof/trace?seconds=1" &
r1=$!
if [[ $sys == fencelock ]]; then
	curl -s -o "$out/server.trace" "http://$SERVER_PPROF/debug/pprof/trace?seconds=1" &
else
	sleep 1 &
fi
r2=$!
wait $r1 $r2
g1=$(cycles)
uptime >>"$out/load.txt"
wait $drv || true

handoffs() { # trace file
	[[ -s $1 ]] || { echo "n/a"; return; }
	go tool trace -d=parsed "$1" 2>/dev/null | grep -c 'GoID=[0-9]* Waiting->Runnable' || true
}

per() { awk -v a="$1" -v n="$2" 'BEGIN { if (n > 0 && a != "n/a") printf "%.2f", a / n; else print "n/a" }'; }
stat() { # file event
	awk -F, -v e="$2" '$3 == e { print $1 }' "$1"
}
cyc=$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')
tcyc=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
gcyc=$(awk -v a="$g0" -v b="$g1" 'BEGIN { print b - a }')
{
	echo "system=$sys window=${WINDOW}s cycles=$cyc ($(per "$cyc" "$WINDOW")/s)"
	cat "$out/load.txt"
	for side in server client; do
		f="$out/$side.perfstat"
		cpu_ms=$(stat "$f" task-clock)
		echo "$side: cpu_us/cycle=$(per "$(awk -v m="$cpu_ms" 'BEGIN { print m * 1000 }')" "$cyc")" \
			"cores=$(awk -v m="$cpu_ms" -v w="$WINDOW" 'BEGIN { printf "%.2f", m / 1000 / w }')" \
			"cs/cycle=$(per "$(stat "$f" context-switches)" "$cyc")" \
			"migrations/cycle=$(per "$(stat "$f" cpu-migrations)" "$cyc")" \
			"syscalls/cycle=$(per "$(stat "$f" raw_syscalls:sys_enter)" "$cyc")"
	done
	echo "server: allocs/cycle=$( [[ $sys == fencelock ]] && per "$((sm1 - sm0))" "$cyc" || echo n/a)"
	echo "client: allocs/cycle=$(per "$((cm1 - cm0))" "$cyc")"
	echo "handoffs (Waiting->Runnable) over $gcyc cycles: server=$(per "$(handoffs "$out/server.trace")" "$gcyc") client=$(per "$(handoffs "$out/client.trace")" "$gcyc")"
	echo "syscalls by name over $tcyc cycles (perf trace -s; per cycle):"
	for side in server client; do
		awk -v n="$tcyc" -v s="$side" '$2 ~ /^[0-9]+$/ && $1 ~ /^[a-z_0-9]+$/ { c[$1] += $2 } END { for (k in c) if (c[k] / n >= 0.05) printf "  %s %s %.2f\n", s, k, c[k] / n }' "$out/$side.trace-s" | sort -k3 -rn
	done
	tail -1 "$out/run.txt"
} | tee "$out/summary.txt"
