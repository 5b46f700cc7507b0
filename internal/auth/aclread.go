package auth

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/service"
)

// Reading the ACL tables for a call. A change is answered by the leader
// once applied there; a follower applies it a heartbeat or so later, and
// a joining node has none of them until it has the log. So a node that
// does not lead asks the leader, for every call that needs the tables,
// which ACL revision it has (a read index: the leader confirms with a
// quorum that it still leads), and answers only once it has applied that
// far. Calls that arrive while one such question is out share the next
// one, so a burst costs one round trip, not one each.

// Tables is where the guard reads the ACL tables from: this node's
// service (internal/service), which applies them, knows whether this
// node leads and can ask the leader. The guard confirms them with the
// leader itself (confirmedACL).
type Tables interface {
	// ACL is the tables as this node has applied them, and whether it
	// can vouch that they are current enough to believe "off".
	ACL() (st *acl.State, known bool)
	// ACLWatch is the tables and a channel closed once they change.
	ACLWatch() (*acl.State, <-chan struct{})
	// ReadyWatch reports whether this node is the ready leader (caught
	// up: its tables are the leader's), and a channel closed the next
	// time it becomes one; the channel is taken before the report, so a
	// change between the two is not missed.
	ReadyWatch() (ready bool, became <-chan struct{})
	// Alone reports whether this node is the only server of its
	// configuration and has applied all its log held at start: no other
	// node can have changed the tables it has.
	Alone() bool
	// LeaderACLRevision asks the leader for the revision of its ACL
	// tables. A *service.Error is answered to the call as it is.
	LeaderACLRevision(ctx context.Context) (uint64, error)
	// WaitApplied reports whether this node has applied index, waiting
	// for it until ctx ends or the node's apply timeout passes.
	WaitApplied(ctx context.Context, index uint64) bool
	// OwnACL is, for the calls that must answer when no leader can
	// (AuthenticatedHere), the tables confirmed by the leader this node
	// hears from or last knew, if one answers within a bound, else the
	// tables as this node has applied them, if it can vouch for them.
	OwnACL(ctx context.Context) (*acl.State, *service.Error)
}

// confirmedACL answers the ACL tables a call may be checked against: at
// least as new as the leader's when the call arrived. The leader, caught
// up, and a node alone in its configuration have them; any other node
// asks the leader first, and answers 503 when it cannot.
func (g *Guard) confirmedACL(ctx context.Context) (*acl.State, *service.Error) {
	ready, became := g.tables.ReadyWatch()
	if ready || g.tables.Alone() {
		st, _ := g.tables.ACL()
		return st, nil
	}
	if st, ok := neverBootstrapped(g.tables); ok {
		return st, nil
	}
	rev, err := g.reads.next(ctx, became, g.tables.LeaderACLRevision)
	if errors.Is(err, errBecameReady) {
		// This node leads now, caught up: its tables are the leader's.
		// (A question to a frozen former leader took up to
		// aclReadTimeout, and a keep-alive's whole failover allowance.)
		st, _ := g.tables.ACL()
		return st, nil
	}
	if err != nil {
		var e *service.Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, service.Unavailable("this node cannot confirm the cluster's ACLs with the leader (" + err.Error() + "); retry, or ask the leader")
	}
	if !g.tables.WaitApplied(ctx, rev) {
		return nil, service.Unavailable("this node has not yet applied the cluster's ACLs (revision " + api.Revision{Index: rev}.String() + "); retry, or ask the leader")
	}
	st, _ := g.tables.ACL()
	return st, nil
}

// confirmedOrOwnACL is confirmedACL for the routes that must answer when
// no leader can (the members view): the leader's tables if this node has
// them, else Tables.OwnACL.
func (g *Guard) confirmedOrOwnACL(ctx context.Context) (*acl.State, *service.Error) {
	if ready, _ := g.tables.ReadyWatch(); ready || g.tables.Alone() {
		st, _ := g.tables.ACL()
		return st, nil
	}
	if st, ok := neverBootstrapped(g.tables); ok {
		return st, nil
	}
	return g.tables.OwnACL(ctx)
}

// neverBootstrapped answers this node's tables, without asking the
// leader, when its applied log has never turned ACLs on and it can vouch
// for that (it has applied every entry its log held at start: Tables.ACL's
// known). ACLs once on stay on (acl.State.On), so a node that has applied
// the bootstrap asks from then on.
//
// A follower that has not yet applied a bootstrap the leader has already
// answered lets calls in without a credential for as long as it lags
// (a heartbeat or so; longer while cut off from the leader). That is not
// a hole: its applied state is a prefix of the log that ends before the
// bootstrap, written while anyone could read and change everything, so
// what it shows is what any caller could have read just before the
// bootstrap; and what a follower is asked to change it does not change
// (a write on a follower answers not_leader, and the leader checks the
// call again when it is retried there). Only its answer to "who am I"
// (ACLs off) is stale, as any follower's read may be (Service.Watch).
func neverBootstrapped(t Tables) (*acl.State, bool) {
	st, known := t.ACL()
	if st.On || !known {
		return nil, false
	}
	return st, true
}

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
		return 0, service.Unavailable("shutting down")
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
		return 0, causeOr(ctx, service.Unavailable("the call was given up while this node confirmed the cluster's ACLs"))
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

// causeOr is the error a call ended by its context answers: the refusal
// its context was ended with, if any (a transport's, or a guard's that
// revoked it), else fallback.
func causeOr(ctx context.Context, fallback *service.Error) *service.Error {
	var e *service.Error
	if errors.As(context.Cause(ctx), &e) {
		return e
	}
	return fallback
}
