package membership

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/replica"
)

// Members is this node's view of the configuration and of its own
// progress, with every member's health as the leader sees it (a follower
// asks the leader, for at most UnreachableAfter). A node that hears from
// no leader, or whose leader does not answer in time, answers at once
// with its own view: whom it heard from itself, and when.
func (c *Cluster) Members(ctx context.Context) (api.MembersResponse, *api.Error) {
	m, e := c.members()
	if e == nil {
		c.addHealth(ctx, &m)
	}
	return m, e
}

func (c *Cluster) members() (api.MembersResponse, *api.Error) {
	servers, err := c.node.Configuration()
	if err != nil {
		return api.MembersResponse{}, unavailable("reading the configuration: " + err.Error())
	}
	st := c.node.Status()
	leader := st.LeaderID
	if st.LeaderSilent {
		// raft names a dead leader until an election starts: a leader
		// this node has not heard from for a heartbeat timeout is none.
		leader = ""
	}
	out := []api.Member{}
	for _, srv := range servers {
		m := api.Member{ID: srv.ID, RaftAddr: srv.Addr, Suffrage: srv.Suffrage, Leader: srv.ID == leader}
		if rec, ok := c.fsm.Member(srv.ID); ok {
			m.ClientAddr = rec.ClientAddr
		}
		out = append(out, m)
	}
	// The answering node's own progress: its applied index and the
	// cluster time of its last applied entry (what a new leader resumes
	// from), so an operator can see a node catch up. A leader's standing
	// is confirmed with a quorum, so a deposed leader that has not
	// noticed yet (say, resumed after SIGSTOP), or one cut off from its
	// quorum, claims neither ready nor a leader.
	confirmed := st.State == replica.Leader && c.node.VerifyLeader() == nil
	ready := confirmed && c.svc.Ready()
	return api.MembersResponse{
		Leader: leader, LeaderAddr: c.LeaderClientAddr(), Members: out,
		Node: c.cfg.NodeID, Ready: ready, AppliedIndex: c.fsm.AppliedIndex(),
		AppliedTimeMs: int64(c.fsm.Now()) / int64(time.Millisecond), ClusterID: c.fsm.ClusterID(),
		UnreachableAfterMs: api.Ms(c.node.UnreachableAfter()),
		Removed:            c.removed.Load(),
		Role:               role(st.State),
		Term:               st.Term,
		NoLeader:           !c.removed.Load() && (leader == "" || leader == c.cfg.NodeID && !confirmed),
	}, nil
}

// role is s as the members answer names it.
func role(s replica.State) string {
	switch s {
	case replica.Leader:
		return api.RoleLeader
	case replica.Candidate:
		return api.RoleCandidate
	case replica.Shutdown:
		return api.RoleShutdown
	}
	return api.RoleFollower
}

// addHealth fills in every member's health as the leader sees it: this
// node's own view when it leads; else the leader's, asked for over its
// client port; else what this node heard itself (localHealth).
func (c *Cluster) addHealth(ctx context.Context, r *api.MembersResponse) {
	for i := range r.Members {
		r.Members[i].State = api.MemberUnknown
	}
	if peers, ok := c.node.Peers(); ok {
		r.HealthFrom = c.cfg.NodeID
		byID := make(map[string]replica.PeerStatus, len(peers))
		for _, p := range peers {
			byID[p.ID] = p
		}
		for i := range r.Members {
			m := &r.Members[i]
			if m.ID == c.cfg.NodeID {
				m.State = api.MemberLeader
				continue
			}
			if p, ok := byID[m.ID]; ok {
				setHealth(m, p)
			}
		}
		return
	}
	st := c.node.Status()
	leader, addr := r.Leader, r.LeaderAddr
	if c.removed.Load() {
		// A removed node hears from no leader, so its own view says
		// nothing of the others: the leader's, if it answers, or none.
		if leader = st.LeaderID; leader == "" {
			leader = st.FormerLeader
		}
		addr = ""
		if m, ok := c.fsm.Member(leader); ok {
			addr = m.ClientAddr
		}
	}
	if v, ok := c.leaderView(ctx, leader, addr); ok {
		// The leader answered for itself: it leads (a removed node, which
		// knows no leader, learns which one here).
		r.HealthFrom, r.Leader = v.HealthFrom, v.Node
		// A leader cut off from its quorum says so until it steps down.
		r.NoLeader = r.NoLeader || v.NoLeader
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
	if c.removed.Load() {
		return
	}
	c.localHealth(r, st)
}

// localHealth is every member's health as this node, which does not
// lead, heard from it itself (replica.Contacts): no leader's view could
// be had. This node is healthy; the leader it hears from is the leader;
// one it has stopped hearing from is unreachable from a heartbeat
// timeout on, as raft stops naming it.
func (c *Cluster) localHealth(r *api.MembersResponse, st replica.Status) {
	r.Local = true
	byID := map[string]replica.PeerStatus{}
	for _, p := range c.node.Contacts() {
		byID[p.ID] = p
	}
	for i := range r.Members {
		m := &r.Members[i]
		if p, ok := byID[m.ID]; ok {
			setHealth(m, p)
		}
		m.LagEntries = nil // this node's log need not be the leader's
		switch {
		case m.ID == c.cfg.NodeID:
			m.State, m.LastContactMs = api.MemberHealthy, nil
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
func (c *Cluster) leaderView(ctx context.Context, leader, addr string) (api.MembersResponse, bool) {
	if leader == "" || leader == c.cfg.NodeID || addr == "" || addr == c.cfg.ClientAddr || c.cfg.Peers == nil {
		return api.MembersResponse{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, c.node.UnreachableAfter())
	defer cancel()
	v, err := c.cfg.Peers.Members(ctx, addr)
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
