package auth

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
	"github.com/fencelock/fencelock/internal/service"
)

// Calls that arrive while a question to the leader is out share the next
// one: they never take an answer the leader may have given before they
// arrived, and a burst costs two round trips, not one each.
func TestReadIndexSharesTheNextQuestion(t *testing.T) {
	ri := newReadIndex()
	defer ri.close()
	asked := make(chan chan uint64)
	ask := func(ctx context.Context) (uint64, error) {
		answer := make(chan uint64)
		asked <- answer
		return <-answer, nil
	}
	first := make(chan uint64)
	go func() { r, _ := ri.next(context.Background(), nil, ask); first <- r }()
	q1 := <-asked // the first question is out

	// Calls arriving now wait for the second question.
	const n = 5
	var wg sync.WaitGroup
	got := make([]uint64, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = ri.next(context.Background(), nil, ask) }()
	}
	eventually(t, "the calls to join the next question", func() bool {
		ri.mu.Lock()
		defer ri.mu.Unlock()
		return ri.pending != nil && ri.pending.calls == n
	})
	q1 <- 7
	if r := <-first; r != 7 {
		t.Fatalf("first call: %d", r)
	}
	q2 := <-asked
	q2 <- 9
	wg.Wait()
	for i, r := range got {
		if r != 9 {
			t.Errorf("call %d took %d, an answer from before it arrived", i, r)
		}
	}
	select {
	case q := <-asked:
		t.Fatalf("a third question was asked: %v", q)
	default:
	}
}

// A call given up while waiting answers its context's error; a closed
// read index asks nothing.
func TestReadIndexGivenUpAndClosed(t *testing.T) {
	ri := newReadIndex()
	block := make(chan struct{})
	ask := func(ctx context.Context) (uint64, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return 0, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ri.next(ctx, nil, ask); err == nil {
		t.Fatal("a given-up call answered")
	}
	ri.close() // ends the question out
	if _, err := ri.next(context.Background(), nil, ask); err == nil {
		t.Fatal("a closed read index answered")
	}
	close(block)
}

// hungPeers is a former leader that never answers (SIGSTOP): every
// question to it waits until released.
type hungPeers struct{ asked, release chan struct{} }

func (h hungPeers) Identity(context.Context, string) (api.Identity, error) {
	return api.Identity{}, errors.New("hung")
}
func (h hungPeers) Announce(context.Context, string, api.JoinRequest) error {
	return errors.New("hung")
}
func (h hungPeers) Members(context.Context, string) (api.MembersResponse, error) {
	return api.MembersResponse{}, errors.New("hung")
}
func (h hungPeers) ACLRevision(ctx context.Context, _ string) (api.ACLRevision, error) {
	select {
	case h.asked <- struct{}{}:
	default:
	}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return api.ACLRevision{}, errors.New("hung")
}

// A follower's call waits on its question to the leader about the ACL
// tables. When that leader is frozen and this node is elected meanwhile,
// the call goes on with this node's own tables as soon as it is ready,
// not when the question to the frozen one times out (up to
// aclReadTimeout, more than a keep-alive's failover allowance: found by
// internal/sim, a lease lost at a failover).
func TestACLWaitEndsWhenThisNodeBecomesLeader(t *testing.T) {
	hung := hungPeers{asked: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(hung.release)
	s, log := newTestService(t, hung)
	g := NewGuard(s, slog.New(slog.DiscardHandler))
	defer g.Close()
	if _, err := s.ACLBootstrap(context.Background()); err != nil {
		t.Fatal(err) // with ACLs never on, a follower asks nobody
	}
	log.SetPeers([]replica.PeerStatus{{ID: "n2"}, {ID: "n3"}})
	if _, err := s.ProposeForTest(fsm.Command{Op: fsm.OpMember, NodeID: "n2", RaftAddr: "n2:1", ClientAddr: "n2:7470"}); err != nil {
		t.Fatal(err)
	}
	log.Follow("n2", false)
	eventually(t, "the service to step down", func() bool { return !s.Ready() })
	answered := make(chan *service.Error, 1)
	go func() {
		_, e := g.confirmedACL(context.Background())
		answered <- e
	}()
	select {
	case <-hung.asked:
	case e := <-answered:
		t.Fatalf("answered without asking the leader: %v", e)
	}
	log.Lead()
	waitReady(t, s)
	select {
	case e := <-answered:
		if e != nil {
			t.Fatalf("after this node became leader: %v", e)
		}
	case <-time.After(time.Minute): // a bound on a hang, not a timing
		t.Fatal("the call still waits on the question to the hung former leader")
	}
}

// newTestService is the real service over an in-memory log
// (internal/replica/replicatest) on a fake clock, ready, calling other
// nodes through peers.
func newTestService(t *testing.T, peers service.Peers) (*service.Service, *replicatest.Log) {
	t.Helper()
	s, err := service.New(service.Config{
		NodeID: "n1", Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Logger: slog.New(slog.DiscardHandler),
		Peers:        peers,
		ApplyTimeout: 5 * time.Second, MinTickInterval: time.Nanosecond, ClockCheckpoint: time.Hour,
		JoinCatchUp: time.Second, AnnounceEvery: time.Second,
		MaxWaitersPerKey: 1000, MaxWaiters: 100000,
		WatchHistory: 10000, WatchMaxWatchers: 10000, WatchMaxPerCaller: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	log := replicatest.New("n1", s.FSM())
	s.Start(log)
	t.Cleanup(s.Close)
	waitReady(t, s)
	return s, log
}

// waitReady waits for s to serve writes (a bound on a hang, not a timing).
func waitReady(t *testing.T, s *service.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// eventually waits for cond, failing t if it never holds (a bound on a
// hang, not a timing).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// countingPeers is a leader that answers every question about its ACL
// revision at once with revision, and counts them.
type countingPeers struct {
	hungPeers
	asked    *atomic.Int64
	revision func() uint64
}

func (c countingPeers) ACLRevision(context.Context, string) (api.ACLRevision, error) {
	c.asked.Add(1)
	return api.ACLRevision{Node: "n2", Revision: c.revision()}, nil
}

// A follower whose applied log never turned ACLs on answers without
// asking the leader; once it applies the bootstrap (from its own log, as
// every follower does) it asks again for every call, and a call without
// a credential is refused.
func TestFollowerAsksNobodyWhileACLsWereNeverOn(t *testing.T) {
	var asked atomic.Int64
	var s *service.Service
	s, log := newTestService(t, countingPeers{asked: &asked, revision: func() uint64 { return s.FSM().AppliedIndex() }})
	g := NewGuard(s, slog.New(slog.DiscardHandler))
	defer g.Close()
	log.SetPeers([]replica.PeerStatus{{ID: "n2"}, {ID: "n3"}})
	if _, err := s.ProposeForTest(fsm.Command{Op: fsm.OpMember, NodeID: "n2", RaftAddr: "n2:1", ClientAddr: "n2:7470"}); err != nil {
		t.Fatal(err)
	}
	log.Follow("n2", false)
	eventually(t, "the service to step down", func() bool { return !s.Ready() })

	for _, n := range []Need{Read("key"), LockAs("key"), Admin("key"), Authenticated(), AuthenticatedHere()} {
		if _, e := g.Authenticate(context.Background(), "", nil, n); e != nil {
			t.Fatalf("%v with ACLs never on: %v", n, e)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the follower asked the leader %d times with ACLs never on", n)
	}

	// The leader's bootstrap reaches this follower through its log.
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpACL, ACL: &fsm.ACLChange{Kind: fsm.ACLBootstrap,
		Principal: acl.Principal{TokenHash: acl.HashToken("admin-secret")}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.FSM().Apply(s.FSM().AppliedIndex()+1, 1, data); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, e := g.Authenticate(context.Background(), "", nil, Read("key")); e == nil || e.Code != api.CodeUnauthenticated {
		t.Fatalf("a call without a credential after the bootstrap: %v", e)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("after the bootstrap the follower asked the leader %d times, want 1", n)
	}
	if _, e := g.Authenticate(context.Background(), "Bearer admin-secret", nil, LockAs("key")); e != nil {
		t.Fatalf("the admin after the bootstrap: %v", e)
	}
}

// unknownTables are a follower's tables that say ACLs are off before it
// has applied its own log (a restarted node): the guard cannot believe
// "off" and asks the leader.
type unknownTables struct {
	fixedTables
	asked *atomic.Int64
}

func (u unknownTables) ACL() (*acl.State, bool)             { return u.st, false }
func (u unknownTables) ReadyWatch() (bool, <-chan struct{}) { return false, nil }
func (u unknownTables) Alone() bool                         { return false }
func (u unknownTables) LeaderACLRevision(context.Context) (uint64, error) {
	u.asked.Add(1)
	return 1, nil
}

func TestFollowerAsksWhileItCannotVouchForOff(t *testing.T) {
	var asked atomic.Int64
	g := NewGuard(unknownTables{fixedTables: fixedTables{st: acl.Empty()}, asked: &asked}, slog.New(slog.DiscardHandler))
	defer g.Close()
	if _, e := g.Authenticate(context.Background(), "", nil, Read("key")); e != nil {
		t.Fatal(e)
	}
	if asked.Load() != 1 {
		t.Fatalf("asked the leader %d times, want 1", asked.Load())
	}
}
