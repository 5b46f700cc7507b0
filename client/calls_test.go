package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/internal/testports"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPair starts a fake server on clk and a client for it.
func newPair(t *testing.T, clk client.Clock, opts ...client.Option) (*clienttest.Server, *client.Client) {
	t.Helper()
	srv := clienttest.NewServer(clk)
	c, err := client.New([]string{srv.Addr}, append([]client.Option{client.WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return srv, c
}

func TestPlainCalls(t *testing.T) {
	ctx := context.Background()
	_, c := newPair(t, newFakeClock())

	a, err := c.Grant(ctx, "jobs/a", "alice", 10*time.Second, 0)
	if err != nil || a.Token != 1 || a.Holder != "alice" || a.TTL != 10*time.Second || a.Remaining != 10*time.Second {
		t.Fatalf("Grant = %+v, %v", a, err)
	}
	_, err = c.Grant(ctx, "jobs/a", "bob", time.Second, 0)
	var ae *client.APIError
	if !errors.Is(err, client.ErrHeld) || !errors.As(err, &ae) || ae.Holder != "alice" {
		t.Fatalf("Grant by bob = %v, want ErrHeld naming alice", err)
	}
	if ok, err := c.Check(ctx, "jobs/a", 1); !ok || err != nil {
		t.Fatalf("Check(1) = %v, %v", ok, err)
	}
	if ok, err := c.Check(ctx, "jobs/a", 2); ok || err != nil {
		t.Fatalf("Check(2) = %v, %v", ok, err)
	}
	if e, err := c.Extend(ctx, "jobs/a", "alice", 1, 20*time.Second); err != nil || e.Token != 1 || e.TTL != 20*time.Second {
		t.Fatalf("Extend = %+v, %v", e, err)
	}
	if _, err := c.Extend(ctx, "jobs/a", "bob", 1, time.Second); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Extend by bob = %v, want ErrNotHeld", err)
	}
	r, err := c.Renew(ctx, "jobs/a", "alice", 10*time.Second)
	if err != nil || r.Token != 2 {
		t.Fatalf("Renew = %+v, %v; want token 2", r, err)
	}
	if _, err := c.Grant(ctx, "jobs/b", "bob", time.Second, 0); err != nil {
		t.Fatal(err)
	}
	res, err := c.ExtendBatch(ctx, "alice", 5*time.Second, []client.Held{{Key: "jobs/a", Token: 2}, {Key: "jobs/a", Token: 1}})
	if err != nil || len(res) != 2 || res[0].Err != nil || res[0].Lock.TTL != 5*time.Second || !errors.Is(res[1].Err, client.ErrNotHeld) {
		t.Fatalf("ExtendBatch = %+v, %v", res, err)
	}
	locks, err := c.List(ctx, "jobs/", 0)
	if err != nil || len(locks) != 2 || locks[0].Key != "jobs/a" || locks[1].Key != "jobs/b" {
		t.Fatalf("List = %+v, %v", locks, err)
	}
	if page, err := c.ListAfter(ctx, "jobs/", "jobs/a", 1); err != nil || len(page) != 1 || page[0].Key != "jobs/b" {
		t.Fatalf("ListAfter(jobs/a) = %+v, %v; want jobs/b", page, err)
	}
	if g, err := c.Get(ctx, "jobs/b"); err != nil || g.Holder != "bob" || g.Token != 3 {
		t.Fatalf("Get = %+v, %v", g, err)
	}
	if _, err := c.Get(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Get(nope) = %v, want ErrNotFound", err)
	}
	if ok, err := c.Release(ctx, "jobs/a", "alice", 1); ok || err != nil {
		t.Fatalf("Release with a superseded token = %v, %v; want false", ok, err)
	}
	if ok, err := c.Release(ctx, "jobs/a", "alice", 2); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	_, err = c.Grant(ctx, "", "alice", time.Second, 0)
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &ae) || ae.Field != "key" {
		t.Fatalf("Grant with no key = %v, want ErrInvalid on key", err)
	}
	if _, err := c.Grant(ctx, "k", "alice", 10*time.Millisecond, 0); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("Grant with a 10ms TTL = %v, want ErrInvalid", err)
	}
}

func TestErrorsMatchOneSentinel(t *testing.T) {
	sentinels := []error{client.ErrHeld, client.ErrNotHeld, client.ErrNotFound, client.ErrInvalid, client.ErrUnavailable, client.ErrInternal, client.ErrQuotaExceeded, client.ErrNoSpace}
	for _, code := range []string{"held", "not_held", "not_found", "invalid_argument", "unavailable", "internal", "quota_exceeded", "no_space"} {
		err := &client.APIError{Status: api.Status(code), Code: code}
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("code %q matches %d sentinels, want 1", code, n)
		}
	}
}

// A full disk is not a bug of the server: 507 no_space is ErrNoSpace,
// not ErrInternal (the simulation's prober met it as ErrInternal).
func TestNoSpaceIsNotInternal(t *testing.T) {
	err := error(&client.APIError{Status: 507, Code: api.CodeNoSpace, Message: "write log: no space left on device"})
	if !errors.Is(err, client.ErrNoSpace) || errors.Is(err, client.ErrInternal) {
		t.Fatalf("no_space matches ErrNoSpace %v, ErrInternal %v; want true, false", errors.Is(err, client.ErrNoSpace), errors.Is(err, client.ErrInternal))
	}
}

// deadAddr returns a loopback address nobody listens on. It is not a
// port from net.Listen("127.0.0.1:0") closed again: such a port goes back
// to the ephemeral pool, and a connect can take it as its own source port
// — a dial to it then connects to itself instead of being refused, or
// another test's listener takes it. testports hands out ports below that
// pool, each once per test binary.
func deadAddr(t *testing.T) string { return testports.Loopback(t) }

func TestUnreachable(t *testing.T) {
	c, err := client.New([]string{deadAddr(t)}, client.WithRetries(2), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(context.Background(), "k")
	if !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("Get = %v, want ErrUnreachable", err)
	}
}

// A deadline that ends the retries keeps the reason for retrying: the
// error matches both ErrUnreachable and the context's error. (The node
// answered once, so its refusals are worth retrying: a restart.)
func TestUnreachableUntilDeadline(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	c, err := client.New([]string{srv.Addr}, client.WithRetries(1000), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Get(context.Background(), "k"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Get before the node went away = %v, want ErrNotFound", err)
	}
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Get(ctx, "k")
	if !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get = %v, want ErrUnreachable and DeadlineExceeded", err)
	}
}

func TestFailoverToNextAddress(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	c, err := client.New([]string{deadAddr(t) + "," + srv.Addr}, client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Grant(context.Background(), "k", "h", time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if got := c.Addrs()[0]; got != srv.URL {
		t.Fatalf("preferred address = %s, want the one that answered, %s", got, srv.URL)
	}
}

func TestFollowsNotLeader(t *testing.T) {
	leader := clienttest.NewServer(client.SystemClock{})
	defer leader.Close()
	follower := clienttest.NewServer(client.SystemClock{})
	defer follower.Close()
	follower.NotLeader(&leader.Addr)
	c, err := client.New([]string{follower.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Grant(context.Background(), "k", "h", time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if h, _, ok := leader.Holder("k"); !ok || h != "h" {
		t.Fatalf("the leader does not have the grant (holder %q)", h)
	}
	if follower.Count("acquire") != 1 || leader.Count("acquire") != 1 {
		t.Fatalf("requests: follower %d, leader %d; want 1 and 1", follower.Count("acquire"), leader.Count("acquire"))
	}
}

func TestNotLeaderWithoutLeaderIsUnavailable(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	empty := ""
	srv.NotLeader(&empty)
	c, err := client.New([]string{srv.Addr}, client.WithRetries(1), client.WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Get(context.Background(), "k"); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Get = %v, want ErrUnavailable", err)
	}
}

func TestNewRejectsBadAddresses(t *testing.T) {
	for _, addrs := range [][]string{nil, {""}, {" , "}, {"ftp://x:1"}} {
		if _, err := client.New(addrs); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("New(%q) = %v, want ErrInvalid", addrs, err)
		}
	}
}
