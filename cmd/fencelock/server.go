package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/membership"
	"github.com/fencelock/fencelock/internal/memorypolicy"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/server"
)

const defaultData = "fencelock-data"

// defaultListen is where a server listens, and where the client commands
// look for one, when nothing else is said. A variable only so that the
// tests can point it at a tripwire.
var defaultListen = client.DefaultAddr

const serverUsage = `Usage: fencelock server [--listen ADDR] [--data DIR]
       fencelock server --id ID --raft HOST:PORT --cluster-secret-file FILE
                        [--listen ADDR] [--data DIR] [--peers ID=HOST:PORT,... | --join ADDRS]

Runs a durable lock server whose raft log and snapshots live in DIR. It
answers the HTTP/JSON API of docs/API.md and shuts down gracefully on
SIGINT or SIGTERM.

Without --raft it is a single voter that talks to no one. With --raft it
is a cluster node listening for raft peers on that address; on first
start (an empty DIR) it bootstraps a cluster of itself, or of --peers
(start every node with the same list), or with --join it bootstraps
nothing and asks the nodes in ADDRS (client addresses) to add it. After
the first start these flags are ignored: the membership is in DIR. See
docs/OPERATIONS.md. --token-floor N makes every token issued from now on
above N: on first start (give it to every node of a new cluster), and
on a DIR with state whose tokens are below N (a data dir restored from
an old backup), committed when this node next leads; a floor at or
below the tokens issued changes nothing, so the flag may stay.

A node with --raft needs a credential for its raft port, the same on
every node: a cluster secret ('fencelock cluster secret' makes one; give
its file, mode 0600, with --cluster-secret-file), or peer TLS (--cert,
--key, --ca). A raft peer proves it before anything it sends is read,
then talks mutual TLS 1.3; a process without it is refused. The secret
file is read once, at start. --cluster-secret-previous-file accepts a
second, former secret too, while a rotation is rolled out
(docs/OPERATIONS.md). --insecure-raft runs the raft port with neither,
open to any process that reaches it (tests), and says so in a warning.
A node whose --data holds a cluster of several voters refuses to start
without its raft address and credential.

With --cert and --key the client port serves TLS (HTTP and framed
connections alike) and, with --raft and --ca but no cluster secret, raft
runs over mutual TLS with those certificates: a peer is refused at the
handshake unless it presents a node certificate signed by --ca that
names a member of the configuration (a client certificate never is a
peer). With a cluster secret, the secret is the raft port's credential
and the certificates serve the client port. SIGHUP rereads the
certificate files. Without TLS the client port serves loopback addresses
only, and so does the raft port without a credential, unless --insecure.
See docs/SECURITY.md.

--engine etcd runs the node on etcd-io/raft instead of hashicorp/raft
(experimental; measured no faster, docs/BENCHMARKS.md). Every member of
a cluster runs the same engine. DIR belongs to the engine that first ran
on it; the other refuses it.

A flag beats its environment variable.
`

func runServer(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "server", serverUsage)
	defaults := server.DefaultConfig()
	listen := f.String("listen", defaultListen, "HTTP `ADDR` to listen on")
	f.Env("listen", "FENCELOCK_LISTEN")
	data := f.String("data", defaultData, "data `DIR`")
	f.Env("data", "FENCELOCK_DATA")
	logLevel := f.String("log-level", "info", "log `LEVEL`: debug, info, warn or error")
	logFormat := f.String("log-format", "text", "log line `FORMAT`: text or json")
	f.Env("log-format", "FENCELOCK_LOG_FORMAT")
	grace := f.Duration("shutdown-grace", 10*time.Second, "how long in-flight requests may take at shutdown")
	id := f.String("id", defaults.NodeID, "this node's `ID` in the cluster")
	f.Env("id", "FENCELOCK_ID")
	raftAddr := f.String("raft", "", "raft `HOST:PORT` for cluster peers; empty: single node")
	f.Env("raft", "FENCELOCK_RAFT")
	advertise := f.String("advertise", "", "client `ADDR` other nodes send clients to (default: the --listen address)")
	peersFlag := f.String("peers", "", "initial voters `ID=HOST:PORT,...` (raft addresses, this node included)")
	join := f.String("join", "", "client `ADDRS` of running nodes to ask to add this one")
	engine := f.String("engine", node.EngineHashicorp, "replication `ENGINE`: hashicorp, or etcd (experimental)")
	asyncWrites := f.Bool("etcd-async-writes", false, "with --engine etcd: write the raft log off raft's goroutine (experimental)")
	f.Env("etcd-async-writes", "FENCELOCK_ETCD_ASYNC_WRITES")
	tokenFloor := f.Uint64("token-floor", 0, "every token issued from now on is above `N` (it only ever raises them): rebuild a cluster above the tokens its fences have seen")
	snapThreshold := f.Uint64("snapshot-threshold", defaults.SnapshotThreshold, "take a snapshot once `N` log entries follow the last one")
	trailing := f.Uint64("trailing-logs", defaults.TrailingLogs, "keep `N` log entries after a snapshot; a peer further behind is sent the snapshot")
	snapInterval := f.Duration("snapshot-interval", defaults.SnapshotInterval, "how often to check the snapshot threshold")
	maxConns := f.Int("max-connections", 0, "at most `N` open client connections; 0: the open-file limit less a reserve for the log and peers")
	f.Env("max-connections", "FENCELOCK_MAX_CONNECTIONS")
	maxConnsPerAddr := f.Int("max-connections-per-address", 0, "at most `N` open client connections from one remote address; 0: a quarter of --max-connections")
	f.Env("max-connections-per-address", "FENCELOCK_MAX_CONNECTIONS_PER_ADDRESS")
	maxRaftConns := f.Int("max-raft-connections", 0, "raft port: at most `N` peer connections held past their handshake; 0: sized from the open-file limit (at most 128)")
	maxRaftHandshakes := f.Int("max-raft-handshakes", 0, "raft port: at most `N` handshakes in progress; past it the oldest of the busiest address that has not proved the credential is closed; 0: sized from the open-file limit (at most 32)")
	raftHandshake := f.Duration("raft-handshake-timeout", 0, "raft port: cut a peer whose handshake takes longer than `D` (1s at most to prove the cluster secret); 0: 5s")
	framedInFlight := f.Int("framed-max-in-flight", defaults.FramedMaxInFlight, "framed: at most `N` requests unanswered per connection (extends and releases aside); the Go client keeps to 1024")
	framedPriority := f.Int("framed-max-priority-in-flight", defaults.FramedMaxPriorityInFlight, "framed: at most `N` extends and releases unanswered per connection, a budget of their own")
	framedPending := f.Int64("framed-max-pending-bytes", defaults.FramedMaxPendingAnswerBytes, "framed: stop reading a connection with more than `BYTES` of answers waiting to be written")
	framedWrite := f.Duration("framed-write-timeout", defaults.FramedWriteTimeout, "framed: close a connection that takes no answer byte for this long (`D`) while answers wait")
	framedRead := f.Duration("framed-read-timeout", defaults.FramedReadTimeout, "framed: close a connection whose frame, once begun, takes longer than `D` to arrive")
	framedIdle := f.Duration("framed-idle-timeout", defaults.FramedIdleTimeout, "framed: close a connection with nothing in flight that sends nothing for `D`")
	framedUnauthFrame := f.Int("framed-max-unauthenticated-frame", framing.DefaultMaxUnauthenticatedFrame, "framed, ACLs on: at most `BYTES` a frame until the connection has authenticated")
	framedUnauthIdle := f.Duration("framed-unauthenticated-idle-timeout", framing.DefaultUnauthenticatedIdleTimeout, "framed, ACLs on: close a connection that has not authenticated and sends nothing for `D`")
	framedStall := f.Duration("framed-stall-timeout", framing.DefaultStallTimeout, "framed: close a connection whose frame, once begun, brings no byte for `D`")
	framedBufferedAddr := f.Int64("framed-max-buffered-per-address", framing.DefaultMaxBufferedPerAddr, "framed: at most `BYTES` of frames being read over one remote address's connections")
	headerBudgetAddr := f.Int64("header-budget-per-address", server.DefaultHeaderBudgetPerAddr, "HTTP: at most `BYTES` of request headers being read (past each request's first 4 KiB) over one remote address's connections")
	headerBudget := f.Int64("header-budget", server.DefaultHeaderBudget, "HTTP: at most `BYTES` of request headers being read (past each request's first 4 KiB) over all connections")
	maxWaitersKey := f.Int("max-waiters-per-key", defaults.MaxWaitersPerKey, "at most `N` waiting acquires queued on one key; -1: no cap")
	f.Env("max-waiters-per-key", "FENCELOCK_MAX_WAITERS_PER_KEY")
	maxWaiters := f.Int("max-waiters", defaults.MaxWaiters, "at most `N` waiting acquires queued in all; -1: no cap")
	f.Env("max-waiters", "FENCELOCK_MAX_WAITERS")
	watchHistory := f.Int("watch-history", defaults.WatchHistory, "keep the last `N` lock events for watches to resume from")
	f.Env("watch-history", "FENCELOCK_WATCH_HISTORY")
	maxWatchers := f.Int("max-watchers", defaults.WatchMaxWatchers, "at most `N` watches open on this node; -1: no cap")
	f.Env("max-watchers", "FENCELOCK_MAX_WATCHERS")
	maxWatchersCaller := f.Int("max-watchers-per-caller", defaults.WatchMaxPerCaller, "at most `N` watches open of one principal (or remote host without ACLs); -1: no cap")
	f.Env("max-watchers-per-caller", "FENCELOCK_MAX_WATCHERS_PER_CALLER")
	// Quotas of one principal once ACLs are on (docs/OPERATIONS.md).
	quotaSessions := f.Int("max-sessions-per-principal", defaults.MaxSessionsPerPrincipal, "with ACLs, at most `N` open sessions of one principal, whatever its holder names; -1: no quota")
	f.Env("max-sessions-per-principal", "FENCELOCK_MAX_SESSIONS_PER_PRINCIPAL")
	quotaLocks := f.Int("max-locks-per-principal", defaults.MaxLocksPerPrincipal, "with ACLs, at most `N` leases held plus queue places of one principal; -1: no quota")
	f.Env("max-locks-per-principal", "FENCELOCK_MAX_LOCKS_PER_PRINCIPAL")
	quotaWaiters := f.Int("max-waiters-per-principal", defaults.MaxWaitersPerPrincipal, "with ACLs, at most `N` queue places of one principal; -1: no quota")
	f.Env("max-waiters-per-principal", "FENCELOCK_MAX_WAITERS_PER_PRINCIPAL")
	quotaKeyWaiters := f.Int("max-waiters-per-key-per-principal", 0, "with ACLs, at most `N` places of one principal in one key's wait queue; 0: a quarter of --max-waiters-per-key; -1: no quota")
	heartbeat := f.String("heartbeat-timeout", defaults.HeartbeatTimeout.String(),
		"raft: a follower that hears no leader for this long (`D`, randomized up to twice it) starts an election")
	f.Env("heartbeat-timeout", "FENCELOCK_HEARTBEAT_TIMEOUT")
	election := f.String("election-timeout", defaults.ElectionTimeout.String(),
		"raft: a candidate that wins no election in this long (`D`, randomized up to twice it) starts another; >= --heartbeat-timeout")
	f.Env("election-timeout", "FENCELOCK_ELECTION_TIMEOUT")
	leaderLease := f.String("leader-lease-timeout", defaults.LeaderLeaseTimeout.String(),
		"raft: a leader that has not reached a quorum for this long (`D`) steps down; <= --heartbeat-timeout")
	f.Env("leader-lease-timeout", "FENCELOCK_LEADER_LEASE_TIMEOUT")
	var allowedHosts ruleList // repeatable, like acl's --rule
	f.Var(&allowedHosts, "allowed-host", "a `NAME` HTTP requests may carry as Host besides the --listen and --advertise hosts, localhost, IP addresses and the certificate's names; repeat for more; \"*\": any")
	secretFile := f.String("cluster-secret-file", "", "`FILE` (mode 0600) holding the cluster secret ('fencelock cluster secret'), which raft peers prove; needed with --raft unless peer TLS")
	f.Env("cluster-secret-file", "FENCELOCK_CLUSTER_SECRET_FILE")
	prevSecretFile := f.String("cluster-secret-previous-file", "", "`FILE` (mode 0600) holding the former cluster secret, accepted from peers too while a rotation is rolled out")
	f.Env("cluster-secret-previous-file", "FENCELOCK_CLUSTER_SECRET_PREVIOUS_FILE")
	insecureRaft := f.Bool("insecure-raft", false, "allow --raft with neither a cluster secret nor peer TLS: any process that reaches the raft port can forge the cluster's log")
	tlsFlags := addServerTLSFlags(f)
	authToken := authTokenFlag(f) // this node's own calls (announce, join)
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError("--log-level: %v", err)
	}
	if *logFormat != "text" && *logFormat != "json" {
		name := "--log-format"
		if !f.given("log-format") {
			name = "FENCELOCK_LOG_FORMAT"
		}
		return usageError("%s must be text or json, got %q", name, *logFormat)
	}
	if *data == "" {
		return usageError("--data must not be empty")
	}
	peers, err := parsePeers(*peersFlag)
	if err != nil {
		return usageError("--peers: %v", err)
	}
	if *raftAddr == "" && (len(peers) > 0 || *join != "") {
		return usageError("--peers and --join need --raft")
	}
	if *join != "" && len(splitAddrs(*join)) == 0 {
		return usageError("--join %q names no address", *join)
	}
	if len(peers) > 0 && *join != "" {
		return usageError("--peers and --join exclude each other")
	}
	if *snapThreshold == 0 || *trailing == 0 || *snapInterval < 5*time.Millisecond {
		return usageError("--snapshot-threshold and --trailing-logs must be > 0, --snapshot-interval >= 5ms")
	}
	if *maxConns < 0 {
		return usageError("--max-connections must be >= 0")
	}
	if *maxConnsPerAddr < 0 {
		return usageError("--max-connections-per-address must be >= 0")
	}
	if *framedUnauthFrame < 64 || *framedUnauthIdle <= 0 || *framedStall <= 0 || *framedBufferedAddr < framing.MaxRequestFrame {
		return usageError("--framed-max-unauthenticated-frame must be >= 64, --framed-unauthenticated-idle-timeout and --framed-stall-timeout > 0, --framed-max-buffered-per-address >= %d (one request)", framing.MaxRequestFrame)
	}
	if *headerBudgetAddr < 64<<10 || *headerBudget < 64<<10 {
		return usageError("--header-budget-per-address and --header-budget must be >= 65536 (one request's largest headers)")
	}
	if *maxRaftConns < 0 || *maxRaftHandshakes < 0 || *raftHandshake < 0 {
		return usageError("--max-raft-connections, --max-raft-handshakes and --raft-handshake-timeout must be >= 0")
	}
	if *framedInFlight <= 0 || *framedPriority <= 0 || *framedPending <= 0 {
		return usageError("--framed-max-in-flight, --framed-max-priority-in-flight and --framed-max-pending-bytes must be > 0")
	}
	if *framedWrite <= 0 || *framedRead <= 0 || *framedIdle <= 0 {
		return usageError("--framed-write-timeout, --framed-read-timeout and --framed-idle-timeout must be > 0")
	}
	if *maxWaitersKey < -1 || *maxWaitersKey == 0 || *maxWaiters < -1 || *maxWaiters == 0 {
		return usageError("--max-waiters-per-key and --max-waiters must be > 0, or -1 for no cap")
	}
	if *watchHistory < 1 || *maxWatchers < -1 || *maxWatchers == 0 || *maxWatchersCaller < -1 || *maxWatchersCaller == 0 {
		return usageError("--watch-history must be > 0, --max-watchers and --max-watchers-per-caller > 0 or -1 for no cap")
	}
	for _, q := range []struct {
		flag string
		v    int
	}{{"max-sessions-per-principal", *quotaSessions}, {"max-locks-per-principal", *quotaLocks}, {"max-waiters-per-principal", *quotaWaiters}} {
		if q.v < -1 || q.v == 0 {
			return usageError("--%s must be > 0, or -1 for no quota", q.flag)
		}
	}
	timing, err := parseRaftTiming(*heartbeat, *election, *leaderLease)
	if err != nil {
		return usageError("%v", err)
	}
	secrets, err := readClusterSecrets(*secretFile, *prevSecretFile, *insecureRaft)
	if err != nil {
		return err
	}
	if err := tlsFlags.check(*raftAddr != "" && secrets.current == nil); err != nil {
		return err
	}
	if *raftAddr != "" && secrets.current == nil && *tlsFlags.ca == "" && !*insecureRaft {
		return usageError("--raft needs a credential: give every node the same --cluster-secret-file FILE ('fencelock cluster secret' makes one) or peer TLS (--ca), or --insecure-raft to open the raft port to anyone who reaches it")
	}
	var handler slog.Handler = slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})
	if *logFormat == "json" {
		handler = slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(handler)
	if memorypolicy.Wanted(e.getenv) {
		// A process-wide setting, so it is made here and not by the
		// server package: see internal/memorypolicy.
		defer memorypolicy.Start()()
	} else {
		log.Info("GOGC or GOMEMLIMIT set: the server's memory policy is off")
	}

	// Out of file descriptors, the log could not open its next segment
	// and sealed itself for good: raise the soft limit and keep
	// client connections below it.
	fdLimit, err := server.RaiseFDLimit()
	if err != nil {
		log.Warn("open-file limit", "err", err)
	}
	if *maxConns == 0 && fdLimit > 0 {
		if *maxConns, err = server.ConnectionCap(fdLimit); err != nil {
			return err
		}
	} else if fdLimit > 0 && uint64(*maxConns) > fdLimit-min(fdLimit, server.FDReserve(fdLimit)) {
		return usageError("--max-connections %d leaves fewer than %d of the %d open files for the log and peers; lower it or raise the limit (ulimit -n)",
			*maxConns, server.FDReserve(fdLimit), fdLimit)
	}
	if *maxConnsPerAddr == 0 && *maxConns > 0 {
		*maxConnsPerAddr = max(*maxConns/4, 1)
	}
	if fdLimit > 0 {
		// The raft port's caps come out of the reserve kept for the log
		// and peers, not out of the clients' share.
		conns, handshakes := server.RaftConnectionCaps(fdLimit)
		if *maxRaftConns == 0 {
			*maxRaftConns = conns
		}
		if *maxRaftHandshakes == 0 {
			*maxRaftHandshakes = handshakes
		}
	}
	log.Info("open files", "limit", fdLimit, "max_connections", *maxConns, "max_connections_per_address", *maxConnsPerAddr,
		"max_raft_connections", *maxRaftConns, "max_raft_handshakes", *maxRaftHandshakes)
	log.Info("raft timing", "heartbeat_timeout", timing.heartbeat.String(), "election_timeout", timing.election.String(),
		"leader_lease_timeout", timing.leaderLease.String())

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	client := *advertise
	if client == "" {
		client = ln.Addr().String()
	}
	bv := readVersion()
	cfg := server.Config{DataDir: *data, Engine: *engine, AsyncLogWrites: *asyncWrites, Logger: log, BuildVersion: bv.Version, BuildCommit: bv.Commit, NodeID: *id, RaftAddr: *raftAddr, ClientAddr: client,
		Peers: peers, Join: *join != "", TokenFloor: *tokenFloor, SnapshotThreshold: *snapThreshold, TrailingLogs: *trailing,
		SnapshotInterval: *snapInterval, HeartbeatTimeout: timing.heartbeat, ElectionTimeout: timing.election,
		LeaderLeaseTimeout: timing.leaderLease, WALSegmentSize: testWALSegmentSize(e), MaxConnections: *maxConns,
		MaxConnectionsPerAddr: *maxConnsPerAddr, FramedMaxInFlight: *framedInFlight, FramedMaxPriorityInFlight: *framedPriority,
		FramedMaxPendingAnswerBytes: *framedPending, FramedWriteTimeout: *framedWrite, FramedReadTimeout: *framedRead,
		FramedIdleTimeout: *framedIdle, MaxWaitersPerKey: *maxWaitersKey, MaxWaiters: *maxWaiters,
		WatchHistory: *watchHistory, WatchMaxWatchers: *maxWatchers, WatchMaxPerCaller: *maxWatchersCaller,
		MaxSessionsPerPrincipal: *quotaSessions, MaxLocksPerPrincipal: *quotaLocks, MaxWaitersPerPrincipal: *quotaWaiters,
		TLS: tlsFlags.files(), Insecure: *tlsFlags.insecure, AuthToken: *authToken,
		ClusterSecret: secrets.current, PreviousClusterSecret: secrets.previous, InsecureRaft: *insecureRaft}
	cfg.MaxRaftConnections, cfg.MaxRaftHandshakes, cfg.RaftHandshakeTimeout = *maxRaftConns, *maxRaftHandshakes, *raftHandshake
	cfg.FramedMaxUnauthenticatedFrame, cfg.FramedUnauthenticatedIdleTimeout = *framedUnauthFrame, *framedUnauthIdle
	cfg.FramedStallTimeout, cfg.FramedMaxBufferedPerAddr = *framedStall, *framedBufferedAddr
	cfg.HeaderBudgetPerAddr, cfg.HeaderBudget = *headerBudgetAddr, *headerBudget
	cfg.MaxWaitersPerKeyPerPrincipal = *quotaKeyWaiters
	// The --listen host is a name of this server too (the advertised one
	// is Config.ClientAddr).
	if h, _, err := net.SplitHostPort(*listen); err == nil && h != "" {
		allowedHosts = append(allowedHosts, h)
	}
	cfg.AllowedHosts = allowedHosts
	if cfg.TLS.Enabled() {
		cfg.TLSReload = reloadOnHangup(ctx, log)
	}
	if *join == "" {
		return server.Serve(ctx, ln, cfg, *grace)
	}
	// Ask the cluster to add this node while it serves; a node that is
	// already a voter is simply confirmed. The leader checks this node's
	// addresses first (it may not answer yet) and promotes it only once
	// it has caught up: both are asked again until it is a voter. Each
	// attempt is short, so that a target nobody answers at is said in the
	// log and on /readyz, then tried again after a back-off.
	status := &membership.JoinStatus{}
	status.Set("asking %s to add this node to the cluster", *join)
	cfg.Joining = status
	jctx, cancel := context.WithCancel(ctx)
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		fail := func(err error) {
			log.Error("joining the cluster failed; not trying again", "join", *join, "err", err)
			status.Set("joining the cluster via %s failed and is not tried again: %s", *join, trimPrefix(err))
		}
		tlsCfg, err := tlsFlags.clientConfig()
		if err != nil {
			fail(err)
			return
		}
		c, err := newJoinClient(splitAddrs(*join), tlsCfg, authOption(*authToken)...)
		if err != nil {
			fail(err)
			return
		}
		defer c.Close()
		var b joinBackoff
		for {
			out, err := c.Join(jctx, *id, *raftAddr, client)
			if jctx.Err() != nil {
				return
			}
			wait := b.next()
			switch {
			case err == nil && strings.EqualFold(out.Joined.Suffrage, "voter"):
				log.Info("joined the cluster", "via", *join)
				status.Clear()
				return
			case err == nil:
				log.Warn("joined as a non-voter; asking again to be promoted", "message", out.Message, "retry_in", wait.String())
				status.Set("joined as a non-voter, not yet promoted (%s); asking again in %s", out.Message, wait)
			case refusedWith(err, api.CodeNodeUnreachable):
				log.Warn("the leader cannot reach this node yet; asking again", "err", err, "retry_in", wait.String())
				status.Set("the leader cannot reach this node yet (%s); asking again in %s", trimPrefix(err), wait)
			case unreachable(err):
				log.Error("cannot reach the cluster to join it; is --join right?", "join", *join, "err", err, "retry_in", wait.String())
				status.Set("cannot reach %s to join the cluster (%s); trying again in %s", *join, trimPrefix(err), wait)
			case unavailableOrUnknown(err):
				log.Warn("the cluster could not add this node now; asking again", "join", *join, "err", err, "retry_in", wait.String())
				status.Set("%s could not add this node now (%s); asking again in %s", *join, trimPrefix(err), wait)
			default:
				fail(err)
				return
			}
			select {
			case <-jctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
	err = server.Serve(ctx, ln, cfg, *grace)
	cancel()
	<-joined
	return err
}

type clusterSecrets struct{ current, previous *clustersecret.Secret }

// readClusterSecrets reads the secret files named (once, at start); an
// error is one line naming the flag and the file.
func readClusterSecrets(file, previous string, insecureRaft bool) (clusterSecrets, error) {
	var out clusterSecrets
	switch {
	case file == "" && previous != "":
		return out, usageError("--cluster-secret-previous-file needs --cluster-secret-file: the previous secret is accepted besides the current one")
	case file != "" && insecureRaft:
		return out, usageError("--insecure-raft and --cluster-secret-file exclude each other")
	case file == "":
		return out, nil
	}
	for _, f := range []struct {
		flag, file string
		dst        **clustersecret.Secret
	}{{"--cluster-secret-file", file, &out.current}, {"--cluster-secret-previous-file", previous, &out.previous}} {
		if f.file == "" {
			continue
		}
		s, err := clustersecret.ReadFile(f.file)
		if err != nil {
			return out, fmt.Errorf("%s: %w", f.flag, err)
		}
		*f.dst = &s
	}
	return out, nil
}

// joinBackoff is the wait between join attempts: 1s, doubling, at most
// 30s.
type joinBackoff struct{ d time.Duration }

func (b *joinBackoff) next() time.Duration {
	switch {
	case b.d == 0:
		b.d = time.Second
	case b.d < 30*time.Second:
		b.d = min(2*b.d, 30*time.Second)
	}
	return b.d
}

// testWALSegmentSize reads FENCELOCK_TEST_WAL_SEGMENT_SIZE, a knob for the
// tests only (not in the usage): small segments make the log rotate every
// few hundred entries. Anything but a positive byte count means the
// default.
func testWALSegmentSize(e *env) int {
	n, err := strconv.Atoi(e.getenv("FENCELOCK_TEST_WAL_SEGMENT_SIZE"))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

type raftTiming struct{ heartbeat, election, leaderLease time.Duration }

// parseRaftTiming reads the three raft timeouts and checks them against
// each other with the rules raft itself applies, named by their flags.
func parseRaftTiming(heartbeat, election, leaderLease string) (raftTiming, error) {
	var t raftTiming
	for _, f := range []struct {
		name, env, val string
		dst            *time.Duration
	}{
		{"heartbeat-timeout", "FENCELOCK_HEARTBEAT_TIMEOUT", heartbeat, &t.heartbeat},
		{"election-timeout", "FENCELOCK_ELECTION_TIMEOUT", election, &t.election},
		{"leader-lease-timeout", "FENCELOCK_LEADER_LEASE_TIMEOUT", leaderLease, &t.leaderLease},
	} {
		d, err := time.ParseDuration(f.val)
		if err != nil {
			return t, fmt.Errorf("--%s (or %s) %q is not a duration like 1s or 750ms", f.name, f.env, f.val)
		}
		if d < 5*time.Millisecond || d > time.Minute {
			return t, fmt.Errorf("--%s %s is out of range: 5ms to 1m", f.name, d)
		}
		*f.dst = d
	}
	if t.election < t.heartbeat {
		return t, fmt.Errorf("--election-timeout %s must be at least --heartbeat-timeout %s", t.election, t.heartbeat)
	}
	if t.leaderLease > t.heartbeat {
		return t, fmt.Errorf("--leader-lease-timeout %s must not exceed --heartbeat-timeout %s", t.leaderLease, t.heartbeat)
	}
	return t, nil
}

// parsePeers reads ID=HOST:PORT,...
func parsePeers(s string) ([]server.Peer, error) {
	var peers []server.Peer
	seen := map[string]bool{}
	for _, item := range splitAddrs(s) {
		id, addr, ok := strings.Cut(item, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q is not ID=HOST:PORT", item)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %v", item, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("id %q given twice", id)
		}
		seen[id] = true
		peers = append(peers, server.Peer{ID: id, RaftAddr: addr})
	}
	return peers, nil
}
