package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
)

// What the guard reads the ACL tables through (auth.Tables). A node that
// does not lead checks a call against tables at least as new as the
// leader's when the call arrived: the guard asks the leader for its ACL
// revision, sharing one question among the calls that arrive while one
// is out, and waits until this node has applied that far. The service
// answers the question on the leader (ACLRevision) and asks it on the
// others (LeaderACLRevision).

// ACLWatch is the ACL tables as this node has applied them, and a channel
// closed once they change: open calls are checked again then.
func (s *Service) ACLWatch() (*acl.State, <-chan struct{}) { return s.fsm.ACLWatch() }

// ReadyWatch reports whether this node is the ready leader (caught up,
// its tables the cluster's), and a channel closed the next time it
// becomes one: a call waiting on a question to a former leader goes on
// with this node's own tables then. The channel is taken first, so a
// change between the two is not missed.
func (s *Service) ReadyWatch() (ready bool, became <-chan struct{}) {
	became = s.becameReady.wait()
	return s.ready.Load(), became
}

// Alone reports whether this node is the only server of its
// configuration and has applied every entry its log held at start: no
// other node can have changed the tables, and it has them all.
func (s *Service) Alone() bool {
	servers, err := s.node.Configuration()
	return err == nil && len(servers) == 1 && servers[0].ID == s.cfg.NodeID && s.aclKnown()
}

// LeaderACLRevision asks the leader for its ACL revision (its
// ACLRevision). Without a leader to ask it answers not_leader, as a write
// would be answered.
func (s *Service) LeaderACLRevision(ctx context.Context) (uint64, error) {
	addr := s.leaderClientAddr()
	if addr == "" && s.Removed() {
		// A removed node hears from no leader: it asks the one it last
		// knew, and answers only while it has every change that one has
		// (it applies none after its removal).
		st := s.node.Status()
		id := st.LeaderID
		if id == "" {
			id = st.FormerLeader
		}
		if m, ok := s.fsm.Member(id); ok {
			addr = m.ClientAddr
		}
	}
	if addr == "" || addr == s.cfg.ClientAddr {
		// No leader to ask (an election, a node not yet joined, a leader
		// catching up): not_leader, as a write would be answered.
		return 0, s.notReady()
	}
	if s.cfg.Peers == nil {
		return 0, Unavailable("this node cannot call the leader to confirm the cluster's ACLs; ask the leader at " + addr)
	}
	if leader := s.node.Status().LeaderID; leader != "" {
		// A leader that stops answering (frozen, cut off) would hold the
		// question, and every call waiting on it, for as long as the
		// question may take; once this node stops hearing from it (or
		// hears of another), not_leader says so, as a write is answered.
		qctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		go s.whileLeading(qctx, leader, func() { cancel(errLeaderLost) })
		ctx = qctx
	}
	r, err := s.cfg.Peers.ACLRevision(ctx, addr)
	if errors.Is(context.Cause(ctx), errLeaderLost) {
		return 0, s.notReady()
	}
	return r.Revision, err
}

// errLeaderLost ends a question to a leader this node no longer hears
// from.
var errLeaderLost = errors.New("the leader was lost")

// leaderCheckEvery is how often whileLeading looks at the node's view.
const leaderCheckEvery = 20 * time.Millisecond

// whileLeading calls lost once this node no longer takes leader for its
// leader (another leads, none does, or the one it has is silent past the
// heartbeat timeout), unless ctx ends first.
func (s *Service) whileLeading(ctx context.Context, leader string, lost func()) {
	t := time.NewTicker(leaderCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st := s.node.Status(); st.LeaderID != leader || st.LeaderSilent {
			lost()
			return
		}
	}
}

// WaitApplied reports whether this node has applied index, waiting for
// it until ctx ends or ApplyTimeout passes.
func (s *Service) WaitApplied(ctx context.Context, index uint64) bool {
	wait, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	return s.fsm.WaitApplied(index, wait.Done())
}

// ACLRevision answers, on the leader, the revision of its ACL tables,
// once it has confirmed with a quorum that it still leads: a node that
// has applied that far has every change acknowledged before the question
// arrived.
func (s *Service) ACLRevision(ctx context.Context) (api.ACLRevision, error) {
	if !s.ready.Load() {
		return api.ACLRevision{}, s.fail(s.notReady())
	}
	rev := s.fsm.ACLRevision()
	if e := s.verifyLeader(); e != nil {
		return api.ACLRevision{}, s.fail(e)
	}
	return api.ACLRevision{Node: s.cfg.NodeID, Revision: rev}, nil
}

// broadcast is a channel closed on each fire and replaced by a new one.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait is the channel the next fire closes.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// OwnACL is, for the calls that must answer when no leader can (the
// members view: auth.AuthenticatedHere), the ACL tables this node checks
// them against, bounded by UnreachableAfter. The leader this node hears
// from, else the last one it knew (which may lead still, with this node
// cut off from it), is asked for its ACL revision; if one answers, this
// node answers once it has applied that far (503 until then); a former
// leader that names the new one sends the question there. Only when
// none answers — a leader gone or not leading any more, or one silent
// for ownACLAsk (frozen) —
// does it take the tables it has applied, and only if it can vouch for
// them: it has applied its own log, and is a member of a cluster (not a
// node still joining). A change of the tables committed by a quorum this
// node can reach neither by raft nor by client port does not reach it
// then; nothing else could have committed one.
func (s *Service) OwnACL(ctx context.Context) (*acl.State, *Error) {
	ctx, cancel := context.WithTimeout(ctx, max(s.node.UnreachableAfter(), ownACLAsk))
	defer cancel()
	asked := map[string]bool{"": true, s.cfg.ClientAddr: true}
	ask := []string{s.leaderClientAddr(), s.lastLeaderClientAddr()}
	for i := 0; i < len(ask); i++ {
		addr := ask[i]
		if asked[addr] || s.cfg.Peers == nil {
			continue
		}
		asked[addr] = true
		r, err := s.cfg.Peers.ACLRevision(ctx, addr)
		if err != nil {
			// Gone, frozen, or not the leader. One that no longer leads
			// may name the one that does (a leader elected while this
			// node was cut off): that one is asked too, or this node
			// would take its own tables with a leader there to ask.
			var e *Error
			if errors.As(err, &e) && e.Leader != "" {
				ask = append(ask, e.Leader)
			}
			continue
		}
		if !s.WaitApplied(context.Background(), r.Revision) {
			return nil, Unavailable("this node has not yet applied the cluster's ACLs (revision " + api.Revision{Index: r.Revision}.String() + ") of the leader at " + addr + "; retry, or ask the leader")
		}
		return s.fsm.ACL(), nil
	}
	if !s.aclKnown() || !s.member() {
		return nil, s.notReady()
	}
	return s.fsm.ACL(), nil
}

// ownACLAsk bounds OwnACL's questions to a leader. A leader that is gone
// refuses the connection and one that no longer leads says so, both at
// once; only a silent one costs the bound, which is generous so that a
// leader merely slow to answer a loaded node is never taken for gone
// (that would check a revoked credential against stale tables).
const ownACLAsk = 2 * time.Second

// lastLeaderClientAddr is the client address of the leader this node
// knew last, other than itself, even one it no longer hears from; "" if
// none.
func (s *Service) lastLeaderClientAddr() string {
	st := s.node.Status()
	id := st.LeaderID
	if id == "" {
		id = st.FormerLeader
	}
	if id == "" || id == s.cfg.NodeID {
		return ""
	}
	if m, ok := s.fsm.Member(id); ok && m.ClientAddr != s.cfg.ClientAddr {
		return m.ClientAddr
	}
	return ""
}

// member reports whether this node belongs to a cluster: the cluster has
// an identity and this node is in the configuration it has applied.
func (s *Service) member() bool {
	if s.fsm.ClusterID() == "" {
		return false
	}
	servers, err := s.node.Configuration()
	if err != nil {
		return false
	}
	for _, srv := range servers {
		if srv.ID == s.cfg.NodeID {
			return true
		}
	}
	return false
}
