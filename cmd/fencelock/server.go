package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/memorypolicy"
	"github.com/fencelock/fencelock/internal/server"
)

func init() {
	register(command{name: "server", summary: "run a durable lock server (HTTP/JSON API)", run: runServer})
}

const defaultData = "fencelock-data"

// defaultListen is where a server listens, and where the client commands
// look for one, when nothing else is said. A variable only so that the
// tests can point it at a tripwire (main_test.go).
var defaultListen = client.DefaultAddr

const serverUsage = `Usage: fencelock server [--listen ADDR] [--data DIR]
       fencelock server --id ID --raft HOST:PORT [--listen ADDR] [--data DIR]
                        [--peers ID=HOST:PORT,... | --join ADDRS]

Runs a durable lock server whose raft log and snapshots live in DIR. It
answers the HTTP/JSON API of docs/API.md and shuts down gracefully on
SIGINT or SIGTERM.

Without --raft it is a single voter that talks to no one. With --raft it
is a cluster node listening for raft peers on that address; on first
start (an empty DIR) it bootstraps a cluster of itself, or of --peers
(start every node with the same list), or with --join it bootstraps
nothing and asks the nodes in ADDRS (client addresses) to add it. After
the first start these flags are ignored: the membership is in DIR. See
docs/OPERATIONS.md.

Flags (a flag beats its environment variable):
`

func runServer(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", envOr(e, "FENCELOCK_LISTEN", defaultListen), "HTTP `address` to listen on (env FENCELOCK_LISTEN)")
	data := fs.String("data", envOr(e, "FENCELOCK_DATA", defaultData), "data `directory` (env FENCELOCK_DATA)")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	logFormat := fs.String("log-format", envOr(e, "FENCELOCK_LOG_FORMAT", "text"), "log line `format`: text or json (env FENCELOCK_LOG_FORMAT)")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "how long in-flight requests may take at shutdown")
	id := fs.String("id", envOr(e, "FENCELOCK_ID", server.DefaultConfig().NodeID), "this node's `id` in the cluster (env FENCELOCK_ID)")
	raftAddr := fs.String("raft", envOr(e, "FENCELOCK_RAFT", ""), "raft `address` host:port for cluster peers (env FENCELOCK_RAFT); empty: single node")
	advertise := fs.String("advertise", "", "client `address` other nodes send clients to (default: the --listen address)")
	peersFlag := fs.String("peers", "", "initial voters `ID=HOST:PORT,...` (raft addresses, this node included)")
	join := fs.String("join", "", "client `addresses` of running nodes to ask to add this one")
	defaults := server.DefaultConfig()
	snapThreshold := fs.Uint64("snapshot-threshold", defaults.SnapshotThreshold, "take a snapshot once this many log `entries` follow the last one")
	trailing := fs.Uint64("trailing-logs", defaults.TrailingLogs, "log `entries` kept after a snapshot; a peer further behind is sent the snapshot")
	snapInterval := fs.Duration("snapshot-interval", defaults.SnapshotInterval, "how often to check the snapshot threshold")
	maxConns := fs.Int("max-connections", 0, "cap on open client `connections`; 0: the open-file limit less a reserve for the log and peers (env FENCELOCK_MAX_CONNECTIONS)")
	heartbeat := fs.String("heartbeat-timeout", envOr(e, "FENCELOCK_HEARTBEAT_TIMEOUT", defaults.HeartbeatTimeout.String()),
		"raft: a follower that hears no leader for this `duration` (randomized up to twice it) starts an election (env FENCELOCK_HEARTBEAT_TIMEOUT)")
	election := fs.String("election-timeout", envOr(e, "FENCELOCK_ELECTION_TIMEOUT", defaults.ElectionTimeout.String()),
		"raft: a candidate that wins no election in this `duration` (randomized up to twice it) starts another; >= --heartbeat-timeout (env FENCELOCK_ELECTION_TIMEOUT)")
	leaderLease := fs.String("leader-lease-timeout", envOr(e, "FENCELOCK_LEADER_LEASE_TIMEOUT", defaults.LeaderLeaseTimeout.String()),
		"raft: a leader that has not reached a quorum for this `duration` steps down; <= --heartbeat-timeout (env FENCELOCK_LEADER_LEASE_TIMEOUT)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(e.stdout, serverUsage)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return nil
		}
		return usageError("server: %v (run 'fencelock server -h')", err)
	}
	if fs.NArg() > 0 {
		return usageError("server: unexpected argument %q (run 'fencelock server -h')", fs.Arg(0))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError("server: --log-level: %v", err)
	}
	if *logFormat != "text" && *logFormat != "json" {
		name := "--log-format"
		if !flagGiven(fs, "log-format") {
			name = "FENCELOCK_LOG_FORMAT"
		}
		return usageError("server: %s must be text or json, got %q", name, *logFormat)
	}
	if *data == "" {
		return usageError("server: --data must not be empty")
	}
	peers, err := parsePeers(*peersFlag)
	if err != nil {
		return usageError("server: --peers: %v", err)
	}
	if *raftAddr == "" && (len(peers) > 0 || *join != "") {
		return usageError("server: --peers and --join need --raft")
	}
	if *join != "" && len(splitAddrs(*join)) == 0 {
		return usageError("server: --join %q names no address", *join)
	}
	if len(peers) > 0 && *join != "" {
		return usageError("server: --peers and --join exclude each other")
	}
	if *snapThreshold == 0 || *trailing == 0 || *snapInterval < 5*time.Millisecond {
		return usageError("server: --snapshot-threshold and --trailing-logs must be > 0, --snapshot-interval >= 5ms")
	}
	if v := e.getenv("FENCELOCK_MAX_CONNECTIONS"); v != "" && !flagGiven(fs, "max-connections") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return usageError("server: FENCELOCK_MAX_CONNECTIONS %q is not a number", v)
		}
		*maxConns = n
	}
	if *maxConns < 0 {
		return usageError("server: --max-connections must be >= 0")
	}
	timing, err := parseRaftTiming(*heartbeat, *election, *leaderLease)
	if err != nil {
		return usageError("server: %v", err)
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
	// and sealed itself for good (issue 11): raise the soft limit and keep
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
		return usageError("server: --max-connections %d leaves fewer than %d of the %d open files for the log and peers; lower it or raise the limit (ulimit -n)",
			*maxConns, server.FDReserve(fdLimit), fdLimit)
	}
	log.Info("open files", "limit", fdLimit, "max_connections", *maxConns)
	log.Info("raft timing", "heartbeat_timeout", timing.heartbeat, "election_timeout", timing.election,
		"leader_lease_timeout", timing.leaderLease)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	client := *advertise
	if client == "" {
		client = ln.Addr().String()
	}
	cfg := server.Config{DataDir: *data, Logger: log, NodeID: *id, RaftAddr: *raftAddr, ClientAddr: client,
		Peers: peers, Join: *join != "", SnapshotThreshold: *snapThreshold, TrailingLogs: *trailing,
		SnapshotInterval: *snapInterval, HeartbeatTimeout: timing.heartbeat, ElectionTimeout: timing.election,
		LeaderLeaseTimeout: timing.leaderLease, WALSegmentSize: testWALSegmentSize(e), MaxConnections: *maxConns}
	if *join == "" {
		return server.Serve(ctx, ln, cfg, *grace)
	}
	// Ask the cluster to add this node while it serves; a node that is
	// already a voter is simply confirmed. The leader checks this node's
	// addresses first (it may not answer yet) and promotes it only once
	// it has caught up: both are asked again until it is a voter.
	jctx, cancel := context.WithCancel(ctx)
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		c, err := newClusterClient(splitAddrs(*join))
		if err != nil {
			log.Error("joining the cluster failed", "join", *join, "err", err)
			return
		}
		defer c.Close()
		for {
			out, err := c.Join(jctx, *id, *raftAddr, client)
			switch {
			case err == nil && strings.EqualFold(out.Joined.Suffrage, "voter"):
				log.Info("joined the cluster", "via", *join)
				return
			case err == nil:
				log.Warn("joined as a non-voter; asking again to be promoted", "message", out.Message)
			case refusedWith(err, api.CodeNodeUnreachable):
				log.Warn("the leader cannot reach this node yet; asking again", "err", err)
			default:
				if jctx.Err() == nil {
					log.Error("joining the cluster failed", "join", *join, "err", err)
				}
				return
			}
			select {
			case <-jctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	err = server.Serve(ctx, ln, cfg, *grace)
	cancel()
	<-joined
	return err
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

// flagGiven says whether name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func envOr(e *env, name, def string) string {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		return v
	}
	return def
}
