package service

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/replica"
)

// lose takes leadership away and waits for the service to stop serving.
func lose(t *testing.T, s *Service, log interface{ Lose() }) {
	t.Helper()
	log.Lose()
	eventually(t, "the service to step down", func() bool { return !s.Ready() })
}

// A node that loses leadership refuses every write and read with
// not_leader, proposes nothing, and tells its waiters, whose queue places
// stay in the replicated table for the next leader.
func TestLostLeadershipRefusesWritesAndTellsWaiters(t *testing.T) {
	s, log, _ := newTestService(t)
	ctx := context.Background()
	a := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	b := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 1000, WaitMs: 60000}, 1)
	lose(t, s, log)

	wantCode(t, await(t, "b", b).err, api.CodeNotLeader)
	if got := s.Waiters("k"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("queue %v; b's place should stay for the next leader", got)
	}
	if _, ok := s.ClusterTime(); ok {
		t.Fatal("the cluster clock runs on a node that does not lead")
	}
	before := log.AppliedIndex()
	calls := map[string]func() error{
		"acquire": acq(s, api.AcquireRequest{Key: "x", Holder: "c", TTLMs: 1000}),
		"wait":    acq(s, api.AcquireRequest{Key: "k", Holder: "c", TTLMs: 1000, WaitMs: 1000}),
		"extend": func() error {
			_, err := s.Extend(ctx, api.ExtendRequest{Key: "k", Holder: "a", Token: a.Token, TTLMs: 1000})
			return err
		},
		"renew": func() error {
			_, err := s.Renew(ctx, api.RenewRequest{Key: "k", Holder: "a", TTLMs: 1000})
			return err
		},
		"release": func() error {
			_, err := s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a"})
			return err
		},
		"session": func() error {
			_, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "a", TTLMs: 1000})
			return err
		},
		"acquire-all": func() error {
			_, err := s.AcquireAll(ctx, "", api.AcquireAllRequest{Keys: []string{"x"}, Holder: "a", TTLMs: 1000})
			return err
		},
		"acl": func() error { _, err := s.ACLBootstrap(ctx); return err },
		"check": func() error {
			_, err := s.Check(ctx, "k", a.Token)
			return err
		},
		"get":   func() error { _, err := s.Get(ctx, "k"); return err },
		"list":  func() error { _, err := s.List(ctx, "", 0); return err },
		"ready": func() error { return s.CheckReady(ctx) },
	}
	for name, call := range calls {
		if e := wantCode(t, call(), api.CodeNotLeader); e.Leader != "" {
			t.Fatalf("%s: not_leader names %q; replicatest names no leader's address", name, e.Leader)
		}
	}
	if log.AppliedIndex() != before {
		t.Fatalf("a node that does not lead proposed %d entries", log.AppliedIndex()-before)
	}
}

// A new term resumes cluster time from the last applied time: the time
// without a leader is not counted (no lease is shortened by it), nor is
// the clock reset; tokens go on from the last one, and the new leader's
// tick expires leases where the old one would have.
func TestLeadAgainResumesClusterTimeFromTheLastApplied(t *testing.T) {
	s, log, fake := newTestService(t)
	ctx := context.Background()
	k := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	fake.Advance(10 * time.Second)
	mustAcquire(t, s, api.AcquireRequest{Key: "mark", Holder: "a", TTLMs: 3600000})
	applied := s.fsm.Now()
	if now, _ := s.ClusterTime(); now != applied || applied < locktable.Time(10*time.Second) {
		t.Fatalf("cluster time %v, applied %v; want them equal, 10 s in", now, applied)
	}

	lose(t, s, log)
	fake.Advance(time.Hour)
	log.Lead()
	waitReady(t, s)
	if now, ok := s.ClusterTime(); !ok || now != applied {
		t.Fatalf("cluster time after the new term %v (%v), want the last applied %v", time.Duration(now), ok, time.Duration(applied))
	}
	got, err := s.Get(ctx, "k")
	if err != nil || got.Token != k.Token || got.RemainingMs != 50000 {
		t.Fatalf("k after the new term: %+v %v; want 50000 ms left, as before the loss", got, err)
	}
	if l := mustAcquire(t, s, api.AcquireRequest{Key: "n", Holder: "a", TTLMs: 60000}); l.Token != 3 {
		t.Fatalf("the first token of the new term is %d, want 3", l.Token)
	}
	fake.Advance(50 * time.Second)
	eventually(t, "k expired by the new leader's tick", func() bool { return holderOf(s, "k") == "" })
	if c, _ := s.Check(ctx, "k", k.Token); c.Valid {
		t.Fatal("k is valid past its expiry")
	}
	if c, _ := s.Check(ctx, "n", 3); !c.Valid {
		t.Fatal("n, 10 s into its 60 s, is not valid")
	}
}

// On a single node nobody can re-send a wait elsewhere: at takeover every
// queued waiter that no request on this node serves is cancelled before
// the node serves, so a release afterwards hands the key to nobody.
func TestTakeoverCancelsOrphanedWaitersOnASingleNode(t *testing.T) {
	s, log, _ := newTestService(t)
	ctx := context.Background()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	mustAcquire(t, s, api.AcquireRequest{Key: "k2", Holder: "a", TTLMs: 60000})
	// b's request is told not_leader at the loss (it leaves its place);
	// ghost's Wait was planted with no request behind it at all.
	b := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 60000, WaitMs: 60000}, 1)
	now, _ := s.ClusterTime()
	if res, err := s.ProposeForTest(fsm.Command{Op: fsm.OpWait, Key: "k2", Holder: "ghost", TTL: locktable.Second * 60,
		Deadline: now + locktable.Time(time.Hour)}); err != nil || !res.Queued {
		t.Fatalf("planting ghost: %+v %v", res, err)
	}
	lose(t, s, log)
	wantCode(t, await(t, "b", b).err, api.CodeNotLeader)
	log.Lead()
	waitReady(t, s)
	for _, k := range []string{"k", "k2"} {
		if got := s.Waiters(k); len(got) != 0 {
			t.Fatalf("%s's orphaned waiters %v were not cancelled at takeover", k, got)
		}
	}
	for _, k := range []string{"k", "k2"} {
		if r, err := s.Release(ctx, api.ReleaseRequest{Key: k, Holder: "a"}); err != nil || !r.Released {
			t.Fatalf("release %s: %+v %v", k, r, err)
		}
		if h := holderOf(s, k); h != "" {
			t.Fatalf("%s was handed to the orphan %q", k, h)
		}
	}
	// A waiter of the new term is served as usual.
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "c", TTLMs: 60000})
	d := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "d", TTLMs: 60000, WaitMs: 60000}, 1)
	s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "c"})
	if got := await(t, "d", d); got.err != nil || got.l.Holder != "d" {
		t.Fatalf("d: %+v %v", got.l, got.err)
	}
}

// A new leader of a cluster releases, after orphanGrace, the grants its
// queues handed to waiters nobody came back for. A semaphore or read/write
// try-once acquire is remembered like a wait; one granted during the grace
// was taken for such a grant and released behind its holder, who had been
// answered with it (found by internal/sim, seed 29). The orphan's hand-off
// is still released; the try-once grants are kept.
func TestTryOnceSharedGrantsSurviveTheOrphanGrace(t *testing.T) {
	s, log, fake := newTestService(t)
	ctx := context.Background()
	log.SetPeers([]replica.PeerStatus{{ID: "n2"}, {ID: "n3"}})
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "x", TTLMs: 60000})
	now, _ := s.ClusterTime()
	if res, err := s.ProposeForTest(fsm.Command{Op: fsm.OpWait, RequestID: "ghost-1", Key: "k", Holder: "ghost", TTL: locktable.Second * 60,
		Deadline: now + locktable.Time(time.Hour)}); err != nil || !res.Queued {
		t.Fatalf("planting ghost: %+v %v", res, err)
	}
	lose(t, s, log)
	log.Lead()
	waitReady(t, s)
	sem := mustAcquire(t, s, api.AcquireRequest{Key: "sem", Holder: "a", TTLMs: 60000, Permits: 2, RequestID: "a-1"})
	rd := mustAcquire(t, s, api.AcquireRequest{Key: "rw", Holder: "r", TTLMs: 60000, Mode: api.ModeRead, RequestID: "r-1"})
	// x lets go: the queue hands k to ghost, whose request is not here.
	if r, err := s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "x"}); err != nil || !r.Released {
		t.Fatalf("release k: %+v %v", r, err)
	}
	if h := holderOf(s, "k"); h != "ghost" {
		t.Fatalf("k went to %q, want the orphan ghost", h)
	}
	fake.Advance(orphanGrace + time.Second)
	eventually(t, "the orphan's grant released after the grace", func() bool { return holderOf(s, "k") == "" })
	for _, l := range []api.Lease{sem, rd} {
		if c, err := s.Check(ctx, l.Key, l.Token); err != nil || !c.Valid {
			t.Fatalf("%s's try-once grant %d after the grace: %+v %v", l.Key, l.Token, c, err)
		}
	}
}
