package service

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

// Replicated mode. One leader serves: a follower answers every write and
// every read with 503 not_leader naming the leader's client address (from
// the members table the leaders keep in the replicated state), and clients
// retry there. Reads on the leader are linearizable: VerifyLeader confirms
// with a quorum that no newer leader exists before the answer.

// leaderClientAddr is the leader's client address, if this node knows it.
// A follower that has not heard from the leader for a heartbeat timeout
// names none: raft keeps naming a dead leader until an election starts,
// and sending clients there only makes them fail faster.
func (s *Service) leaderClientAddr() string {
	st := s.node.Status()
	if st.LeaderID == "" || st.LeaderSilent {
		return ""
	}
	if m, ok := s.fsm.Member(st.LeaderID); ok {
		return m.ClientAddr
	}
	return ""
}

// notReady is the 503 for a node that cannot serve: not_leader (naming the
// leader when known) unless this node leads and is still catching up.
func (s *Service) notReady() *Error {
	if s.removed.Load() {
		return removedError()
	}
	if msg := s.cfg.Join.String(); msg != "" && !s.member.Load() {
		return Unavailable("not ready: " + msg)
	}
	if s.node.Status().State == replica.Leader {
		return Unavailable("not ready: this leader is catching up or has lost its quorum")
	}
	return s.notLeader(&Error{Code: api.CodeNotLeader})
}

// notLeader completes a not_leader answer with where to go.
func (s *Service) notLeader(e *Error) *Error {
	addr := s.leaderClientAddr()
	if addr == s.cfg.ClientAddr {
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

// verifyLeader confirms with a quorum that this node still leads, so a
// read answered now is not a stale leader's.
func (s *Service) verifyLeader() *Error {
	if err := s.node.VerifyLeader(); err != nil {
		return s.notReady()
	}
	return nil
}

// recordSelf gives a cluster its identity if it has none yet (its first
// leader, or the first leader after an upgrade from a version without
// one), makes the raft configuration carry this node's current raft
// address (a single node restarted with --raft still has its old one) and
// the members table its client address, so followers can send clients
// here. Called by a new leader.
func (s *Service) recordSelf() error {
	if s.fsm.ClusterID() == "" {
		id, err := newClusterID()
		if err != nil {
			return err
		}
		if _, err := s.propose(fsm.Command{Op: fsm.OpClusterID, ClusterID: id}); err != nil {
			return err
		}
		s.log.Info("cluster identity", "cluster_id", s.fsm.ClusterID())
	}
	servers, err := s.node.Configuration()
	if err != nil {
		return err
	}
	for _, srv := range servers {
		if srv.ID == s.cfg.NodeID && srv.Addr != s.node.Addr() {
			s.log.Info("updating this node's raft address", "from", srv.Addr, "to", s.node.Addr())
			if err := s.node.AddVoter(srv.ID, s.node.Addr(), s.cfg.ApplyTimeout); err != nil {
				return err
			}
		}
	}
	if s.cfg.ClientAddr == "" {
		return nil
	}
	raftAddr := s.node.Addr()
	if m, ok := s.fsm.Member(s.cfg.NodeID); ok && m.ClientAddr == s.cfg.ClientAddr && m.RaftAddr == raftAddr {
		return nil
	}
	_, err = s.propose(fsm.Command{Op: fsm.OpMember, NodeID: s.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: s.cfg.ClientAddr})
	return err
}

// newClusterID is 128 random bits in hex.
func newClusterID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("server: choosing a cluster id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// announceLoop runs on every node with a client address: while this node
// follows and the members table lacks its current client address, it asks
// the leader to record it, so every node's address is known however the
// cluster was formed.
func (s *Service) announceLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	t := time.NewTicker(s.cfg.AnnounceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.node.Status().State != replica.Follower || s.cfg.Peers == nil {
			continue
		}
		raftAddr := s.node.Addr()
		if m, ok := s.fsm.Member(s.cfg.NodeID); ok && m.ClientAddr == s.cfg.ClientAddr && m.RaftAddr == raftAddr {
			continue
		}
		leader := s.leaderClientAddr()
		if leader == "" {
			continue
		}
		_ = s.cfg.Peers.Announce(ctx, leader, api.JoinRequest{ID: s.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: s.cfg.ClientAddr})
		// Whatever the answer, the next tick looks at the members table.
	}
}
