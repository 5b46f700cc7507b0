package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// Where the leader is. One leader serves: a follower answers every call
// with 503 not_leader naming the leader's client address, from the
// members table the leaders keep in the replicated state, and clients
// retry there.

// LeaderClientAddr is the leader's client address, if this node knows
// it. A follower that has not heard from the leader for a heartbeat
// timeout names none: raft keeps naming a dead leader until an election
// starts, and sending clients there only makes them fail faster.
func (c *Cluster) LeaderClientAddr() string {
	st := c.node.Status()
	if st.LeaderID == "" || st.LeaderSilent {
		return ""
	}
	if m, ok := c.fsm.Member(st.LeaderID); ok {
		return m.ClientAddr
	}
	return ""
}

// NotReady is the 503 for a node that cannot serve: removed on a removed
// node, what its join says on a node not yet a member, not_leader
// (naming the leader when known) unless this node leads and is still
// catching up.
func (c *Cluster) NotReady() *api.Error {
	if c.removed.Load() {
		return removedError()
	}
	if msg := c.cfg.Join.String(); msg != "" && !c.member.Load() {
		return unavailable("not ready: " + msg)
	}
	if c.node.Status().State == replica.Leader {
		return unavailable("not ready: this leader is catching up or has lost its quorum")
	}
	return c.notLeader(&api.Error{Code: api.CodeNotLeader})
}

// Redirect is e as a transport answers it: a not_leader on a removed node
// is removed, and one that names no leader yet is completed with where
// to go. Any other e is answered as it is.
func (c *Cluster) Redirect(e *api.Error) *api.Error {
	if e.Code == api.CodeNotLeader && c.removed.Load() {
		return removedError()
	}
	if e.Code == api.CodeNotLeader && e.Leader == "" {
		return c.notLeader(e)
	}
	return e
}

// notLeader completes a not_leader answer with where to go.
func (c *Cluster) notLeader(e *api.Error) *api.Error {
	addr := c.LeaderClientAddr()
	if addr == c.cfg.ClientAddr {
		addr = "" // this node's view is stale; do not send the client in a loop
	}
	e.Leader = addr
	if addr != "" {
		e.Message = "this node is not the leader; the leader is at " + addr
	} else {
		e.Message = "this node is not the leader and knows no leader yet; retry"
	}
	return e
}

// RecordSelf gives a cluster its identity if it has none yet (its first
// leader, or the first leader after an upgrade from a version without
// one), makes the raft configuration carry this node's current raft
// address (a single node restarted with --raft still has its old one) and
// the members table its client address, so followers can send clients
// here. A new leader calls it before it serves.
func (c *Cluster) RecordSelf() error {
	if c.fsm.ClusterID() == "" {
		id, err := newClusterID()
		if err != nil {
			return err
		}
		if err := c.svc.Propose(fsm.Command{Op: fsm.OpClusterID, ClusterID: id}); err != nil {
			return err
		}
		c.log.Info("cluster identity", "cluster_id", c.fsm.ClusterID())
	}
	servers, err := c.node.Configuration()
	if err != nil {
		return err
	}
	for _, srv := range servers {
		if srv.ID == c.cfg.NodeID && srv.Addr != c.node.Addr() {
			c.log.Info("updating this node's raft address", "from", srv.Addr, "to", c.node.Addr())
			if err := c.node.AddVoter(srv.ID, c.node.Addr(), c.cfg.ApplyTimeout); err != nil {
				return err
			}
		}
	}
	if c.cfg.ClientAddr == "" {
		return nil
	}
	raftAddr := c.node.Addr()
	if m, ok := c.fsm.Member(c.cfg.NodeID); ok && m.ClientAddr == c.cfg.ClientAddr && m.RaftAddr == raftAddr {
		return nil
	}
	return c.svc.Propose(fsm.Command{Op: fsm.OpMember, NodeID: c.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: c.cfg.ClientAddr})
}

// newClusterID is 128 random bits in hex.
func newClusterID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("membership: choosing a cluster id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// announceLoop runs on every node with a client address: while this node
// follows and the members table lacks its current client address, it asks
// the leader to record it, so every node's address is known however the
// cluster was formed.
func (c *Cluster) announceLoop() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	t := time.NewTicker(c.cfg.AnnounceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.node.Status().State != replica.Follower || c.cfg.Peers == nil {
			continue
		}
		raftAddr := c.node.Addr()
		if m, ok := c.fsm.Member(c.cfg.NodeID); ok && m.ClientAddr == c.cfg.ClientAddr && m.RaftAddr == raftAddr {
			continue
		}
		leader := c.LeaderClientAddr()
		if leader == "" {
			continue
		}
		_ = c.cfg.Peers.Announce(ctx, leader, api.JoinRequest{ID: c.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: c.cfg.ClientAddr})
		// Whatever the answer, the next tick looks at the members table.
	}
}
