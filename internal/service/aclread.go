package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
)

// Reading the ACL tables for a call. A change is answered by the leader
// once applied there; a follower applies it a heartbeat or so later, and
// a joining node has none of them until it has the log. So a node that
// does not lead asks the leader, for every call that needs the tables,
// which ACL revision it has (a read index: the leader confirms with a
// quorum that it still leads), and answers only once it has applied that
// far. Calls that arrive while one such question is out share the next
// one, so a burst costs one round trip, not one each.

// ConfirmedACL answers the ACL tables a call may be checked against: at
// least as new as the leader's when the call arrived. The leader, caught
// up, and a node alone in its configuration have them; any other node
// asks the leader first, and answers 503 when it cannot.
func (s *Service) ConfirmedACL(ctx context.Context) (*acl.State, *Error) {
	ready := s.becameReady.wait()
	if s.ready.Load() || (s.alone() && s.aclKnown()) {
		return s.fsm.ACL(), nil
	}
	rev, err := s.aclReads.next(ctx, ready, s.leaderACLRevision)
	if errors.Is(err, errBecameReady) {
		// This node leads now, caught up: its tables are the leader's.
		// (A question to a frozen former leader took up to
		// aclReadTimeout, and a keep-alive's whole failover allowance.)
		return s.fsm.ACL(), nil
	}
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, Unavailable("this node cannot confirm the cluster's ACLs with the leader (" + err.Error() + "); retry, or ask the leader")
	}
	wait, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	if !s.fsm.WaitApplied(rev, wait.Done()) {
		return nil, Unavailable("this node has not yet applied the cluster's ACLs (revision " + api.Revision{Index: rev}.String() + "); retry, or ask the leader")
	}
	return s.fsm.ACL(), nil
}

// ConfirmedOrOwnACL is ConfirmedACL for the calls that must answer when
// no leader can (auth.AuthenticatedHere: the members view), bounded by
// UnreachableAfter. The leader this node hears from, else the last one
// it knew (which may lead still, with this node cut off from it), is
// asked for its ACL revision; if one answers, the tables are confirmed
// as ConfirmedACL does (a node behind it answers 503 until it has caught
// up). Only when none answers in time — a leader gone, frozen or not
// leading any more — does it take the tables it has applied, and only if
// it can vouch for them: it has applied its own log, and is a member of
// a cluster (not a node still joining). A change of the tables committed
// by a quorum this node can reach neither by raft nor by client port
// does not reach it then; nothing else could have committed one.
func (s *Service) ConfirmedOrOwnACL(ctx context.Context) (*acl.State, *Error) {
	if s.ready.Load() || s.alone() {
		return s.ConfirmedACL(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, s.node.UnreachableAfter())
	defer cancel()
	asked := map[string]bool{"": true, s.cfg.ClientAddr: true}
	for _, addr := range []string{s.leaderClientAddr(), s.lastLeaderClientAddr()} {
		if asked[addr] || s.cfg.Peers == nil {
			continue
		}
		asked[addr] = true
		r, err := s.cfg.Peers.ACLRevision(ctx, addr)
		if err != nil {
			continue // gone, frozen, or not the leader
		}
		wait, cancel := context.WithTimeout(context.Background(), s.cfg.ApplyTimeout)
		defer cancel()
		if !s.fsm.WaitApplied(r.Revision, wait.Done()) {
			return nil, Unavailable("this node has not yet applied the cluster's ACLs (revision " + api.Revision{Index: r.Revision}.String() + ") of the leader at " + addr + "; retry, or ask the leader")
		}
		return s.fsm.ACL(), nil
	}
	if !s.aclKnown() || !s.member() {
		return nil, s.notReady()
	}
	return s.fsm.ACL(), nil
}

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

// alone reports whether this node is the only server of its
// configuration: no other node can have changed the tables.
func (s *Service) alone() bool {
	servers, err := s.node.Configuration()
	return err == nil && len(servers) == 1 && servers[0].ID == s.cfg.NodeID
}

// leaderACLRevision asks the leader for its ACL revision.
func (s *Service) leaderACLRevision(ctx context.Context) (uint64, error) {
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
	r, err := s.cfg.Peers.ACLRevision(ctx, addr)
	return r.Revision, err
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

// ACLWatch is the ACL tables as this node has applied them, and a channel
// closed once they change: open calls are checked again then.
func (s *Service) ACLWatch() (*acl.State, <-chan struct{}) { return s.fsm.ACLWatch() }

// aclReadTimeout bounds one question to the leader.
const aclReadTimeout = 2 * time.Second

// readIndex shares questions to the leader among the calls that need an
// answer given after they arrived: a call joins the next question, which
// starts when the one out (if any) is answered.
type readIndex struct {
	ctx     context.Context // ended by close
	cancel  context.CancelFunc
	mu      sync.Mutex
	running bool
	pending *readRound // the next question, asked once the one out is answered
	wg      sync.WaitGroup
}

type readRound struct {
	done  chan struct{}
	rev   uint64
	err   error
	calls int // the calls waiting on it, under readIndex.mu
}

func newReadIndex() *readIndex {
	ri := &readIndex{}
	ri.ctx, ri.cancel = context.WithCancel(context.Background())
	return ri
}

// close ends the question out, refuses new ones and waits.
func (ri *readIndex) close() {
	ri.mu.Lock()
	ri.cancel()
	ri.mu.Unlock()
	ri.wg.Wait()
}

// errBecameReady ends a call's wait for a question when its node became
// a ready leader meanwhile.
var errBecameReady = errors.New("this node became the leader")

// next answers a revision asked for after the call; ask is the question.
// A call stops waiting with errBecameReady once ready is closed (the
// question goes on for the others).
func (ri *readIndex) next(ctx context.Context, ready <-chan struct{}, ask func(context.Context) (uint64, error)) (uint64, error) {
	ri.mu.Lock()
	if ri.ctx.Err() != nil {
		ri.mu.Unlock()
		return 0, Unavailable("shutting down")
	}
	if ri.pending == nil {
		ri.pending = &readRound{done: make(chan struct{})}
	}
	r := ri.pending
	r.calls++
	if !ri.running {
		ri.running = true
		ri.pending = nil
		ri.wg.Add(1)
		go ri.run(r, ask)
	}
	ri.mu.Unlock()
	select {
	case <-r.done:
		return r.rev, r.err
	case <-ready:
		return 0, errBecameReady
	case <-ctx.Done():
		return 0, ctxError(ctx, Unavailable("the call was given up while this node confirmed the cluster's ACLs"))
	}
}

// run asks r, then each round that gathered calls meanwhile.
func (ri *readIndex) run(r *readRound, ask func(context.Context) (uint64, error)) {
	defer ri.wg.Done()
	for r != nil {
		ctx, cancel := context.WithTimeout(ri.ctx, aclReadTimeout)
		r.rev, r.err = ask(ctx)
		cancel()
		close(r.done)
		ri.mu.Lock()
		r, ri.pending = ri.pending, nil
		ri.running = r != nil
		ri.mu.Unlock()
	}
}

// ctxError is the error a call ended by its context answers: the cause
// the transport gave (a credential revoked while the call ran), else
// fallback.
func ctxError(ctx context.Context, fallback *Error) *Error {
	var e *Error
	if errors.As(context.Cause(ctx), &e) {
		return e
	}
	return fallback
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
