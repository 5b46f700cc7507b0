package node

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/fencelock/fencelock/internal/node/raftport"
)

// Config is what an engine's Open needs; both engines take the same one.
// It has no defaults of its own: the server wiring fills every field from
// its Config (internal/server).
type Config struct {
	// DataDir holds the raft log (wal/), snapshots (snapshots/), the
	// state file and a LOCK file. Empty: in-memory stores.
	DataDir string
	// FS is the file system DataDir is on; nil: the operating system's
	// (the simulation gives its own disk).
	FS       FS
	NodeID   string
	RaftAddr string // empty: a raft port nobody can dial (in-memory)
	// Peers is the initial voter set when there is no raft state yet;
	// empty means this node alone. Join: bootstrap nothing and wait to
	// be added.
	Peers []Peer
	Join  bool
	// TLS, when set, runs the raft port over mutual TLS: with the node
	// certificates of a CA (a tlsconfig.Reloader) or of the cluster
	// secret's authority (a clustersecret.Credential). nil: plain TCP,
	// which needs InsecureRaft.
	TLS raftport.PeerTLS
	// InsecureRaft allows a raft port without TLS, where any process
	// that reaches it is taken for a member.
	InsecureRaft bool
	// Insecure allows a raft port on a non-loopback address without TLS.
	Insecure bool
	// Listener, if set, is what the raft port accepts on instead of a
	// listener on RaftAddr (tests: ports chosen first).
	Listener net.Listener
	// RaftPort bounds the raft port's connections and handshakes.
	RaftPort raftport.Limits
	// DialRaft checks that a raft address accepts connections before a
	// join; nil: a TCP (or TLS) dial (raftport.Probe).
	DialRaft func(ctx context.Context, addr string) error
	Logger   *slog.Logger

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64
	SnapshotInterval   time.Duration
	WALSegmentSize     int
	// TokenFloor is a floor this node commits, when it next leads,
	// before it serves a grant: every token it issues is above it. A
	// node with state takes it only when it is above the tokens its
	// state file shows issued (Storage.Boot).
	TokenFloor uint64
	// AsyncLogWrites has the etcd engine write its log and hard state
	// off raft's goroutine (etcd-io/raft's AsyncStorageWrites): raft
	// steps, sends and takes proposals while the last write syncs, and
	// the writes that queued meanwhile go to disk in one. The hashicorp
	// engine ignores it.
	AsyncLogWrites bool

	Hooks Hooks
}

// Hooks are told what the state machine did; each may be nil.
type Hooks struct {
	// Applied is how long each log entry took to apply.
	Applied func(time.Duration)
	// Restored runs after a snapshot replaced the state.
	Restored func()
}

// Peer is one voter of an initial cluster.
type Peer struct {
	ID       string
	RaftAddr string
}

// RaftPortConfig is what the raft port is opened and probed with.
func (c Config) RaftPortConfig() raftport.Config {
	return raftport.Config{Addr: c.RaftAddr, Listener: c.Listener, TLS: c.TLS, InsecureRaft: c.InsecureRaft,
		Insecure: c.Insecure, Limits: c.RaftPort, Dial: c.DialRaft, Logger: c.Logger}
}

// WALSegmentSize is the default size of each preallocated log segment
// file.
const WALSegmentSize = 16 << 20

// The snapshot policy a Config left zero takes, on both engines:
// hashicorp/raft's own defaults (its DefaultConfig).
const (
	DefaultSnapshotThreshold = 8192
	DefaultSnapshotInterval  = 120 * time.Second
)
