package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// The cluster operations of the service: any node answers Identity and
// Members from its own view; only the leader changes the membership
// (checkNewNode and checkQuorum probe them first).

// Identity answers who this node is, which cluster it belongs to ("" on
// a node no cluster has added yet) and how far it has applied the log. A
// leader asks it of a node before adding it and of the members before a
// change (the strict reconfiguration check).
func (s *Service) Identity(ctx context.Context) api.Identity {
	return api.Identity{Node: s.cfg.NodeID, RaftAddr: s.node.Addr(), ClientAddr: s.cfg.ClientAddr,
		ClusterID: s.fsm.ClusterID(), AppliedIndex: s.node.AppliedIndex(), Raft: s.node.Dialable()}
}

// Members is this node's view of the configuration and of its own
// progress, with every member's health as the leader sees it (a follower
// asks the leader, for at most UnreachableAfter).
func (s *Service) Members(ctx context.Context) (api.MembersResponse, error) {
	m, e := s.members()
	if e == nil {
		s.addHealth(ctx, &m)
	}
	return m, s.fail(e)
}

func (s *Service) members() (api.MembersResponse, *Error) {
	servers, err := s.node.Configuration()
	if err != nil {
		return api.MembersResponse{}, Unavailable("reading the configuration: " + err.Error())
	}
	st := s.node.Status()
	leader := st.LeaderID
	if st.LeaderSilent {
		// raft names a dead leader until an election starts: a leader
		// this node has not heard from for a heartbeat timeout is none.
		leader = ""
	}
	out := []api.Member{}
	for _, srv := range servers {
		m := api.Member{ID: srv.ID, RaftAddr: srv.Addr, Suffrage: srv.Suffrage, Leader: srv.ID == leader}
		if rec, ok := s.fsm.Member(srv.ID); ok {
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
	return api.MembersResponse{
		Leader: leader, LeaderAddr: s.leaderClientAddr(), Members: out,
		Node: s.cfg.NodeID, Ready: ready, AppliedIndex: s.fsm.AppliedIndex(),
		AppliedTimeMs: int64(s.fsm.Now()) / int64(time.Millisecond), ClusterID: s.fsm.ClusterID(),
		UnreachableAfterMs: api.Ms(s.node.UnreachableAfter()),
		Removed:            s.removed.Load(),
	}, nil
}

// addHealth fills in every member's health as the leader sees it: this
// node's own view when it leads; else the leader's, asked for over its
// client port; else only what this node knows itself (the leader it hears
// from, or the one it has stopped hearing from, which is unreachable).
func (s *Service) addHealth(ctx context.Context, r *api.MembersResponse) {
	for i := range r.Members {
		r.Members[i].State = api.MemberUnknown
	}
	if peers, ok := s.node.Peers(); ok {
		r.HealthFrom = s.cfg.NodeID
		byID := make(map[string]replica.PeerStatus, len(peers))
		for _, p := range peers {
			byID[p.ID] = p
		}
		for i := range r.Members {
			m := &r.Members[i]
			if m.ID == s.cfg.NodeID {
				m.State = api.MemberLeader
				continue
			}
			if p, ok := byID[m.ID]; ok {
				setHealth(m, p)
			}
		}
		return
	}
	st := s.node.Status()
	leader, addr := r.Leader, r.LeaderAddr
	if s.removed.Load() {
		// A removed node hears from no leader, so its own view says
		// nothing of the others: the leader's, if it answers, or none.
		if leader = st.LeaderID; leader == "" {
			leader = st.FormerLeader
		}
		addr = ""
		if m, ok := s.fsm.Member(leader); ok {
			addr = m.ClientAddr
		}
	}
	if v, ok := s.leaderView(ctx, leader, addr); ok {
		// The leader answered for itself: it leads (a removed node, which
		// knows no leader, learns which one here).
		r.HealthFrom, r.Leader = v.HealthFrom, v.Node
		if v.LeaderAddr != "" {
			r.LeaderAddr = v.LeaderAddr
		}
		byID := make(map[string]api.Member, len(v.Members))
		for _, m := range v.Members {
			byID[m.ID] = m
		}
		for i := range r.Members {
			m := &r.Members[i]
			m.Leader = m.ID == v.Node
			if lm, ok := byID[m.ID]; ok {
				m.State, m.LastContactMs, m.LagEntries = lm.State, lm.LastContactMs, lm.LagEntries
			}
		}
		return
	}
	if s.removed.Load() {
		return
	}
	for i := range r.Members {
		switch m := &r.Members[i]; {
		case m.ID == r.Leader:
			m.State = api.MemberLeader
		case st.LeaderSilent && (m.ID == st.LeaderID || m.ID == st.FormerLeader):
			m.State = api.MemberUnreachable
		}
	}
}

// leaderView is the leader's members answer, when this node hears from a
// leader at a known client address and it answers for itself within
// UnreachableAfter. A node that is not the leader answers with a view at
// second hand, which is not taken.
func (s *Service) leaderView(ctx context.Context, leader, addr string) (api.MembersResponse, bool) {
	if leader == "" || leader == s.cfg.NodeID || addr == "" || addr == s.cfg.ClientAddr || s.cfg.Peers == nil {
		return api.MembersResponse{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, s.node.UnreachableAfter())
	defer cancel()
	v, err := s.cfg.Peers.Members(ctx, addr)
	if err != nil || v.Node != leader || v.HealthFrom != leader {
		return api.MembersResponse{}, false
	}
	return v, true
}

// setHealth is p as the API carries it.
func setHealth(m *api.Member, p replica.PeerStatus) {
	switch p.State {
	case replica.PeerHealthy:
		m.State = api.MemberHealthy
	case replica.PeerUnreachable:
		m.State = api.MemberUnreachable
	default:
		m.State = api.MemberUnknown
	}
	if p.Contacted {
		last := api.Ms(p.LastContact)
		m.LastContactMs = &last
	}
	if p.LagKnown {
		lag := p.Lag
		m.LagEntries = &lag
	}
}

// Join adds a node: it must answer at the addresses given and belong to
// no cluster or this one; it is added as a non-voter, and promoted to
// voter once it has caught up with the log, if the new configuration has
// a reachable quorum. Only the leader does it.
func (s *Service) Join(ctx context.Context, req api.JoinRequest) (api.JoinResponse, error) {
	r, e := s.join(ctx, req, true)
	return r, s.fail(e)
}

// Announce records the client address of a node that is already in the
// configuration and changes no server: a node started from a static peer
// list announces itself this way, and a removed node cannot re-add
// itself.
func (s *Service) Announce(ctx context.Context, req api.JoinRequest) (api.JoinResponse, error) {
	r, e := s.join(ctx, req, false)
	return r, s.fail(e)
}

// Remove takes a node out of the configuration and forgets its client
// address, unless the voters left would have no reachable quorum. Asked
// to remove itself, the leader hands leadership to another voter first
// and answers not_leader naming it: the new leader does the removal when
// the call is sent there (the CLI follows).
func (s *Service) Remove(ctx context.Context, req api.RemoveRequest) (api.RemoveResponse, error) {
	r, e := s.remove(ctx, req)
	return r, s.fail(e)
}

func (s *Service) join(ctx context.Context, req api.JoinRequest, add bool) (api.JoinResponse, *Error) {
	var none api.JoinResponse
	if e := firstErr(checkNodeField("id", req.ID, api.MaxNodeIDLen), checkNodeField("raft_addr", req.RaftAddr, api.MaxAddrLen),
		checkClientAddr(req.ClientAddr)); e != nil {
		return none, e
	}
	if add && !s.node.Dialable() {
		return none, refused(api.CodeNoRaft, "refused, nothing changed: this node has no raft transport (it was started without --raft), so no other node can reach it; restart it with --raft HOST:PORT (same --id and --data) before adding nodes")
	}
	if e := s.writable(); e != nil {
		return none, e
	}
	s.change <- struct{}{}
	defer func() { <-s.change }()
	servers, err := s.node.Configuration()
	if err != nil {
		return none, s.raftError(err)
	}
	var (
		cur    *replica.Server
		voters []replica.Server // the voters other than this node
	)
	for _, srv := range servers {
		if srv.ID == req.ID {
			cur = &srv
			continue
		}
		if srv.Voter {
			voters = append(voters, srv)
		}
	}
	inPlace := cur != nil && cur.Addr == req.RaftAddr
	if !add {
		if !inPlace {
			return none, NewError(api.CodeNotFound, "no member %s at %s", req.ID, req.RaftAddr)
		}
		if e := s.recordMember(req); e != nil {
			return none, e
		}
		return s.answerJoin(ctx, req.ID, "")
	}
	if inPlace && cur.Voter {
		// Already there: a retried join, or a node started with --join
		// confirming it. Record its client address if it changed.
		if e := s.recordMember(req); e != nil {
			return none, e
		}
		return s.answerJoin(ctx, req.ID, "")
	}
	if _, e := s.checkNewNode(ctx, req); e != nil {
		return none, e
	}
	self := req.ID
	after := append(voters, replica.Server{ID: self, Addr: req.RaftAddr, Voter: true})
	what := "adding " + req.ID + " as a voter"
	if e := s.checkQuorum(ctx, what, after, map[string]bool{self: true}); e != nil {
		return none, e
	}
	if !inPlace {
		// A new node, or a known one at a new raft address: as a
		// non-voter first, so that it counts for no quorum until it has
		// the log.
		if err := s.node.AddNonvoter(self, req.RaftAddr, s.cfg.ApplyTimeout); err != nil {
			return none, s.changeError("adding "+req.ID+" as a non-voter", err)
		}
		s.log.Info("added a non-voter", "id", req.ID, "raft", req.RaftAddr, "client", req.ClientAddr)
	}
	if e := s.recordMember(req); e != nil {
		// The node is in the configuration; only its client address and
		// the promotion are missing: the same join sent again finishes.
		return none, NewError(api.CodeChangeUnknown, "%s is in the configuration as a non-voter, but recording its client address failed (%s); send the same join again",
			req.ID, e.Message)
	}
	if !s.caughtUp(ctx, req) {
		s.log.Warn("a joining node did not catch up; it stays a non-voter", "id", req.ID, "within", s.cfg.JoinCatchUp)
		return s.answerJoin(ctx, req.ID, fmt.Sprintf("%s joined as a non-voter but did not catch up with the log within %s; it is not promoted: run the same join again to promote it, or remove it",
			req.ID, s.cfg.JoinCatchUp))
	}
	// The quorum may have changed while it caught up.
	if e := s.checkQuorum(ctx, what, after, map[string]bool{self: true}); e != nil {
		e.Message = strings.Replace(e.Message, "refused, nothing changed", "refused to promote "+req.ID+", which stays a non-voter", 1)
		return none, e
	}
	if err := s.node.AddVoter(self, req.RaftAddr, s.cfg.ApplyTimeout); err != nil {
		return none, s.changeError("promoting "+req.ID+" to voter", err)
	}
	s.log.Info("promoted to voter", "id", req.ID)
	return s.answerJoin(ctx, req.ID, "")
}

// answerJoin is the members answer plus the joined node's suffrage and,
// when it is not a voter, why.
func (s *Service) answerJoin(ctx context.Context, id, note string) (api.JoinResponse, *Error) {
	m, e := s.members()
	if e != nil {
		return api.JoinResponse{}, e
	}
	s.addHealth(ctx, &m)
	out := api.JoinResponse{MembersResponse: m, Joined: api.Joined{ID: id}, Message: note}
	for _, mem := range m.Members {
		if mem.ID == id {
			out.Joined.Suffrage = mem.Suffrage
		}
	}
	return out, nil
}

func (s *Service) remove(ctx context.Context, req api.RemoveRequest) (api.RemoveResponse, *Error) {
	var none api.RemoveResponse
	if e := firstErr(checkNodeField("id", req.ID, api.MaxNodeIDLen), s.writable()); e != nil {
		return none, e
	}
	s.change <- struct{}{}
	defer func() { <-s.change }()
	servers, err := s.node.Configuration()
	if err != nil {
		return none, s.raftError(err)
	}
	var (
		target *replica.Server
		after  []replica.Server
	)
	for _, srv := range servers {
		switch {
		case srv.ID == req.ID:
			target = &srv
		case srv.Voter:
			after = append(after, srv)
		}
	}
	if target == nil {
		return none, NewError(api.CodeNotFound, "no member with id %s", req.ID)
	}
	if target.Voter {
		if e := s.checkQuorum(ctx, "removing "+req.ID, after, nil); e != nil {
			return none, e
		}
	}
	if req.ID == s.cfg.NodeID {
		return none, s.handOver(ctx, req.ID)
	}
	if err := s.node.RemoveServer(req.ID, s.cfg.ApplyTimeout); err != nil {
		return none, s.changeError("removing "+req.ID, err)
	}
	if _, err := s.propose(fsm.Command{Op: fsm.OpMember, NodeID: req.ID}); err != nil {
		// The node is out; only its client address is left behind.
		s.log.Warn("forgetting a removed node's client address failed", "id", req.ID, "err", err)
	}
	s.log.Info("removed a node", "id", req.ID, "suffrage", target.Suffrage)
	return api.RemoveResponse{Removed: req.ID}, nil
}
