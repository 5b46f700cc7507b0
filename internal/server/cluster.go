package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
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
func (s *Server) leaderClientAddr() string {
	_, id := s.node.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	if s.node.raft.State() != raft.Leader && time.Since(s.node.raft.LastContact()) > s.cfg.HeartbeatTimeout {
		return ""
	}
	if m, ok := s.fsm.Member(string(id)); ok {
		return m.ClientAddr
	}
	return ""
}

// notReady is the 503 for a node that cannot serve: not_leader (naming the
// leader when known) unless this node leads and is still catching up.
func (s *Server) notReady() *apiError {
	if s.node.raft.State() == raft.Leader {
		return unavailable("not ready: this leader is catching up or has lost its quorum")
	}
	return s.notLeader(&apiError{Status: http.StatusServiceUnavailable, Code: codeNotLeader})
}

// notLeader completes a not_leader answer with where to go.
func (s *Server) notLeader(e *apiError) *apiError {
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
func (s *Server) verifyLeader() *apiError {
	if err := s.node.raft.VerifyLeader().Error(); err != nil {
		return s.notReady()
	}
	return nil
}

// recordSelf makes the raft configuration carry this node's current raft
// address (a single node restarted with --raft still has its old one) and
// the members table its client address, so followers can send clients
// here. Called by a new leader.
func (s *Server) recordSelf() error {
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == s.cfg.NodeID && srv.Address != s.node.addr {
			s.log.Info("updating this node's raft address", "from", srv.Address, "to", s.node.addr)
			if err := s.node.raft.AddVoter(srv.ID, s.node.addr, 0, s.cfg.ApplyTimeout).Error(); err != nil {
				return err
			}
		}
	}
	if s.cfg.ClientAddr == "" {
		return nil
	}
	raftAddr := string(s.node.addr)
	if m, ok := s.fsm.Member(s.cfg.NodeID); ok && m.ClientAddr == s.cfg.ClientAddr && m.RaftAddr == raftAddr {
		return nil
	}
	_, err := s.propose(fsm.Command{Op: fsm.OpMember, NodeID: s.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: s.cfg.ClientAddr})
	return err
}

// Wire shapes of the cluster calls.
type memberJSON struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr,omitempty"`
	Suffrage   string `json:"suffrage"`
	Leader     bool   `json:"leader"`
}

type joinRequest struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
}

type removeRequest struct {
	ID string `json:"id"`
}

// handleMembers answers from this node's view; any node answers.
func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) *apiError {
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return unavailable("reading the configuration: " + err.Error())
	}
	_, leader := s.node.raft.LeaderWithID()
	out := []memberJSON{}
	for _, srv := range f.Configuration().Servers {
		m := memberJSON{ID: string(srv.ID), RaftAddr: string(srv.Address), Suffrage: srv.Suffrage.String(),
			Leader: srv.ID == leader}
		if rec, ok := s.fsm.Member(string(srv.ID)); ok {
			m.ClientAddr = rec.ClientAddr
		}
		out = append(out, m)
	}
	// The answering node's own progress: its applied index and the
	// cluster time of its last applied entry (what a new leader resumes
	// from), so an operator can see a node catch up. ready is confirmed
	// with a quorum, so a deposed leader that has not noticed yet (say,
	// resumed after SIGSTOP) does not claim it.
	ready := s.Ready() && s.verifyLeader() == nil
	writeJSON(w, http.StatusOK, map[string]any{
		"leader": string(leader), "leader_addr": s.leaderClientAddr(), "members": out,
		"node": s.cfg.NodeID, "ready": ready, "applied_index": s.fsm.AppliedIndex(),
		"applied_time_ms": int64(s.fsm.Now()) / int64(time.Millisecond),
	})
	return nil
}

func checkNodeField(field, v string, limit int) *apiError {
	switch {
	case v == "":
		return invalid(field, "%s is required", field)
	case len(v) > limit:
		return invalid(field, "%s is %d bytes; the limit is %d", field, len(v), limit)
	}
	return nil
}

// handleJoin adds a voter (or updates its address) and records its
// client address. Only the leader does it.
func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) *apiError {
	return s.join(w, r, true)
}

// handleAnnounce records the client address of a node that is already a
// voter and changes no voter: a node started from a static peer list
// announces itself this way, and a removed node cannot re-add itself.
func (s *Server) handleAnnounce(w http.ResponseWriter, r *http.Request) *apiError {
	return s.join(w, r, false)
}

func (s *Server) join(w http.ResponseWriter, r *http.Request, add bool) *apiError {
	var req joinRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	if e := firstErr(checkNodeField("id", req.ID, fsm.MaxNodeIDLen), checkNodeField("raft_addr", req.RaftAddr, fsm.MaxAddrLen),
		checkNodeField("client_addr", req.ClientAddr, fsm.MaxAddrLen), s.writable()); e != nil {
		return e
	}
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return s.raftError(err)
	}
	voter := false
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == req.ID {
			voter = srv.Suffrage == raft.Voter && string(srv.Address) == req.RaftAddr
		}
	}
	switch {
	case !voter && !add:
		return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no voter " + req.ID + " at " + req.RaftAddr}
	case !voter:
		if err := s.node.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
			return s.raftError(err)
		}
	}
	if m, ok := s.fsm.Member(req.ID); ok && m.RaftAddr == req.RaftAddr && m.ClientAddr == req.ClientAddr {
		return s.handleMembers(w, r)
	}
	if _, err := s.propose(fsm.Command{Op: fsm.OpMember, NodeID: req.ID, RaftAddr: req.RaftAddr, ClientAddr: req.ClientAddr}); err != nil {
		return proposalError(err)
	}
	if voter {
		s.log.Info("recorded a member's client address", "id", req.ID, "client", req.ClientAddr)
	} else {
		s.log.Info("added a voter", "id", req.ID, "raft", req.RaftAddr, "client", req.ClientAddr)
	}
	return s.handleMembers(w, r)
}

// handleRemove forgets a node's client address and removes it from the
// voters. Removing the leader itself makes it step down once committed.
func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) *apiError {
	var req removeRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	if e := firstErr(checkNodeField("id", req.ID, fsm.MaxNodeIDLen), s.writable()); e != nil {
		return e
	}
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return s.raftError(err)
	}
	found := false
	for _, srv := range f.Configuration().Servers {
		found = found || string(srv.ID) == req.ID
	}
	if !found {
		return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no member with id " + req.ID}
	}
	if _, err := s.propose(fsm.Command{Op: fsm.OpMember, NodeID: req.ID}); err != nil {
		return proposalError(err)
	}
	if err := s.node.raft.RemoveServer(raft.ServerID(req.ID), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return s.raftError(err)
	}
	s.log.Info("removed a voter", "id", req.ID)
	writeJSON(w, http.StatusOK, map[string]any{"removed": req.ID})
	return nil
}

func (s *Server) raftError(err error) *apiError {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return s.notReady()
	}
	return unavailable(err.Error())
}

// announceLoop runs on every node with a client address: while this node
// follows and the members table lacks its current client address, it asks
// the leader to record it, so every node's address is known however the
// cluster was formed.
func (s *Server) announceLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	t := time.NewTicker(s.cfg.HeartbeatTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.node.raft.State() != raft.Follower {
			continue
		}
		raftAddr := string(s.node.addr)
		if m, ok := s.fsm.Member(s.cfg.NodeID); ok && m.ClientAddr == s.cfg.ClientAddr && m.RaftAddr == raftAddr {
			continue
		}
		leader := s.leaderClientAddr()
		if leader == "" {
			continue
		}
		body, _ := json.Marshal(joinRequest{ID: s.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: s.cfg.ClientAddr})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+leader+"/v1/cluster/announce", bytes.NewReader(body))
		if err != nil {
			continue
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		// Whatever the answer, the next tick looks at the members table.
	}
}
