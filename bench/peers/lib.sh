# Shared by setup.sh (one of each peer) and cluster.sh (three-node
# clusters): installing the packages, waiting for ports, stopping what we
# started. Source it; it defines functions only.

log() { printf 'peers: %s\n' "$*" >&2; }

# port_open PORT: true when something accepts TCP on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
	local missing=()
	command -v etcd >/dev/null || missing+=(etcd-server)
	command -v redis-server >/dev/null || missing+=(redis-server)
	[[ -f /usr/share/java/zookeeper.jar ]] || missing+=(zookeeper)
	command -v java >/dev/null || missing+=(default-jre-headless)
	((${#missing[@]} == 0)) && return 0
	log "installing ${missing[*]}"
	# Keep Debian's maintainer scripts from starting the packaged services on
	# their default ports (6379, 2379, 2181): a policy-rc.d that says no, for
	# the length of the install only, unless the machine already has one.
	local own_policy=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		own_policy=1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	((own_policy)) && rm -f /usr/sbin/policy-rc.d
	# On a machine run by systemd the units may still be enabled for the next
	# boot; turn them off so only our own processes run.
	if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
		systemctl disable --now etcd redis-server zookeeper >/dev/null 2>&1 || true
	fi
}

wait_port() { # NAME PORT PIDFILE LOG
	local i
	for ((i = 0; i < 300; i++)); do
		if port_open "$2"; then return 0; fi
		if ! pid_alive "$3"; then
			log "$1 exited; last lines of $4:"
			tail -20 "$4" >&2 || true
			return 1
		fi
		sleep 0.1
	done
	log "$1 did not open 127.0.0.1:$2 in 30 s; see $4"
	return 1
}

stop_one() { # NAME
	local d="$PEERS_DIR/$1" i
	if pid_alive "$d/pid"; then
		local pid
		pid=$(cat "$d/pid")
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
		log "$1 stopped (pid $pid)"
	fi
	rm -rf "$d"
}

