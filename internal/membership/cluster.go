package membership

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// Config is what membership needs, as the lock service resolves it from
// its own (internal/service.Config): every duration is set.
type Config struct {
	NodeID string
	// ClientAddr is where clients reach this node; "" means none, and
	// then it announces nothing.
	ClientAddr string
	Logger     *slog.Logger
	// Peers calls other nodes' client ports; nil: this node cannot reach
	// any, so it can probe no node and add none.
	Peers Peers

	ApplyTimeout time.Duration // how long a configuration change waits
	JoinCatchUp  time.Duration // how long a joining node may take to catch up
	// AnnounceEvery is how often a follower checks that the members table
	// has its client address, and how often any node checks that it is
	// still in the configuration (a second if 0).
	AnnounceEvery time.Duration
	// Join, for a node started to join a cluster, is how its join goes;
	// nil: not joining.
	Join *JoinStatus
	// Engine names this node's replication engine in its identity; a
	// join of a node that reports another is refused ("": not said).
	Engine string
}

// Peers is how this node calls the client port of another node.
type Peers interface {
	// Identity asks the node at clientAddr who it is.
	Identity(ctx context.Context, clientAddr string) (api.Identity, error)
	// Announce asks the leader at clientAddr to record this node's
	// addresses.
	Announce(ctx context.Context, clientAddr string, req api.JoinRequest) error
	// Members asks the node at clientAddr for its members answer (a
	// follower asks the leader for its view of the members' health).
	Members(ctx context.Context, clientAddr string) (api.MembersResponse, error)
}

// Service is what membership asks of the lock service on the same node.
type Service interface {
	// Ready reports whether this node is the leader, caught up, serving.
	Ready() bool
	// Writable is nil when this node takes writes now, else the answer a
	// write gets.
	Writable() *api.Error
	// Propose stamps cmd with cluster time, proposes it and waits until it
	// is applied here.
	Propose(cmd fsm.Command) error
	// ProposalError is a failed Propose as the service answers it.
	ProposalError(err error) *api.Error
}

// Cluster is this node's membership: its view of the configuration and
// the members table, the changes to them, and its own standing. Create it
// with New and Start it over the node; Close stops what Start started.
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	fsm  *fsm.FSM
	svc  Service
	node replica.Replicator

	// change serialises membership changes: each probes, then changes.
	// A one-slot channel, not a mutex: a change waits on the network and
	// raft while it holds it, and a goroutine waiting on a channel is one
	// a testing/synctest bubble (the simulation) can tell is blocked.
	change  chan struct{}
	member  atomic.Bool // this node has been in the configuration, in this process
	removed atomic.Bool // ... and has been taken out of it since
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// New makes the membership of the node whose state machine is f, for the
// service svc. Nothing runs until Start.
func New(cfg Config, f *fsm.FSM, svc Service) *Cluster {
	return &Cluster{cfg: cfg, log: cfg.Logger, fsm: f, svc: svc, stop: make(chan struct{}), change: make(chan struct{}, 1)}
}

// Start runs membership over n: the check that this node is still in the
// configuration and, with a client address, the announcements that keep
// the members table current.
func (c *Cluster) Start(n replica.Replicator) {
	c.node = n
	if c.cfg.ClientAddr != "" {
		c.wg.Add(1)
		go c.announceLoop()
	}
	c.wg.Add(1)
	go c.membershipLoop()
}

// Close stops what Start started and waits for it.
func (c *Cluster) Close() {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
}

// Identity answers who this node is, which cluster it belongs to ("" on
// a node no cluster has added yet) and how far it has applied the log. A
// leader asks it of a node before adding it and of the members before a
// change (the strict reconfiguration check).
func (c *Cluster) Identity() api.Identity {
	return api.Identity{Node: c.cfg.NodeID, RaftAddr: c.node.Addr(), ClientAddr: c.cfg.ClientAddr,
		ClusterID: c.fsm.ClusterID(), AppliedIndex: c.node.AppliedIndex(), Raft: c.node.Dialable(), Engine: c.cfg.Engine}
}

// Clustered reports whether the configuration has other voters.
func (c *Cluster) Clustered() bool {
	servers, err := c.node.Configuration()
	if err != nil {
		return false
	}
	voters := 0
	for _, srv := range servers {
		if srv.Voter {
			voters++
		}
	}
	return voters > 1
}

// newError is an error answer with code and a message.
func newError(code, format string, args ...any) *api.Error {
	return &api.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// refused is a membership change refused with code; nothing changed.
func refused(code, format string, args ...any) *api.Error {
	return newError(code, format, args...)
}

// invalid is invalid_argument naming the field at fault.
func invalid(field, format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// unavailable is a 503 that says why.
func unavailable(msg string) *api.Error {
	return &api.Error{Code: api.CodeUnavailable, Message: msg}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
