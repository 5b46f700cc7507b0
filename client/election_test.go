package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/clock"
)

func nextLeader(t *testing.T, clk *clock.Fake, o *client.Observer) client.Leadership {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case l, ok := <-o.Leaders():
			if !ok {
				t.Fatalf("the observer ended: %v", o.Err())
			}
			return l
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatal("no leadership reported")
	return client.Leadership{}
}

type elected struct {
	l   *client.Leader
	err error
}

func campaign(c *client.Client, name, candidate string) chan elected {
	ch := make(chan elected, 1)
	go func() {
		l, err := c.Campaign(context.Background(), name, candidate, client.WithTTL(ttl))
		ch <- elected{l, err}
	}()
	return ch
}

// Two candidates: the first resigns and the second is elected with a
// larger token; the second is lost (its extensions fail), stops at its
// give-up point, and a third is elected only once the server let the lease
// run out, with a larger token still. The observer sees each leader.
func TestElectionHandsOnLeadershipWithLargerTokens(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	const name = "elect/web"
	obs := c.Observe(ctx, name)
	defer obs.Close()
	if l := nextLeader(t, clk, obs); l.Candidate != "" {
		t.Fatalf("before any campaign: %+v", l)
	}
	first := <-campaign(c, name, "a")
	if first.err != nil {
		t.Fatal(first.err)
	}
	a := first.l
	if l := nextLeader(t, clk, obs); l.Candidate != "a" || l.Token != a.Token() {
		t.Fatalf("observed %+v, leader a %d", l, a.Token())
	}
	bc := campaign(c, name, "b")
	waitFor(t, "b to queue", func() bool { return slices.Equal(srv.Waiters(name), []string{"b"}) })
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-bc
	if second.err != nil {
		t.Fatal(second.err)
	}
	b := second.l
	if b.Token() <= a.Token() || !errors.Is(a.Err(), client.ErrReleased) {
		t.Fatalf("b token %d after a %d; a.Err %v", b.Token(), a.Token(), a.Err())
	}
	if l := nextLeader(t, clk, obs); l.Candidate != "" {
		t.Fatalf("a resigned: %+v", l)
	}
	if l := nextLeader(t, clk, obs); l.Candidate != "b" || l.Token != b.Token() {
		t.Fatalf("observed %+v, leader b %d", l, b.Token())
	}

	// b's keep-alive fails: it stops first, then the server elects c.
	srv.Fail("extend", api.CodeUnavailable)
	cc := campaign(c, name, "c")
	waitFor(t, "c to queue", func() bool { return slices.Equal(srv.Waiters(name), []string{"c"}) })
	start := clk.Now()
	for !isDoneCtx(b.Context()) {
		clk.Advance(50 * time.Millisecond)
		time.Sleep(time.Millisecond)
		if clk.Now().Sub(start) > ttl {
			t.Fatal("b still leads a TTL after its extensions began to fail")
		}
	}
	if h, tok, _ := srv.Holder(name); h != "b" || tok != b.Token() {
		t.Fatalf("b stopped at %v, but the server already moved on: %s %d", clk.Now().Sub(start), h, tok)
	}
	if !errors.Is(b.Err(), client.ErrLeaseLost) {
		t.Fatalf("b.Err = %v", b.Err())
	}
	srv.Fail("extend", "") // c's own keep-alive must work
	var third elected
	for done := false; !done; {
		select {
		case third = <-cc:
			done = true
		case <-time.After(5 * time.Millisecond):
			clk.Advance(50 * time.Millisecond)
		}
	}
	if third.err != nil || third.l.Token() <= b.Token() {
		t.Fatalf("c: %v", third.err)
	}
	defer third.l.Resign(ctx)
	if l := nextLeader(t, clk, obs); l.Candidate != "" {
		t.Fatalf("b lost: %+v", l)
	}
	if l := nextLeader(t, clk, obs); l.Candidate != "c" || l.Token != third.l.Token() {
		t.Fatalf("observed %+v, leader c %d", l, third.l.Token())
	}
}

func isDoneCtx(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}
