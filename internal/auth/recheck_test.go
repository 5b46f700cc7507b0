package auth

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/service"
)

// changingTables are the leader's tables, changed by the test; a change
// armed with during is applied inside the next read of the tables, as a
// change committed while the guard rechecks its calls.
type changingTables struct {
	mu      sync.Mutex
	st      *acl.State
	ch      chan struct{}
	during  func()
	watched chan struct{} // told each time the guard takes a channel
}

func (c *changingTables) set(st *acl.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st = st
	close(c.ch)
	c.ch = make(chan struct{})
}

func (c *changingTables) ACL() (*acl.State, bool) {
	c.mu.Lock()
	st, f := c.st, c.during
	c.during = nil
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return st, true
}

func (c *changingTables) ACLWatch() (*acl.State, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case c.watched <- struct{}{}:
	default:
	}
	return c.st, c.ch
}

func (c *changingTables) ReadyWatch() (bool, <-chan struct{})               { return true, nil }
func (c *changingTables) Alone() bool                                       { return true }
func (c *changingTables) LeaderACLRevision(context.Context) (uint64, error) { return 0, nil }
func (c *changingTables) WaitApplied(context.Context, uint64) bool          { return true }
func (c *changingTables) OwnACL(context.Context) (*acl.State, *service.Error) {
	st, _ := c.ACL()
	return st, nil
}

// A change of the tables committed while the guard rechecks its calls
// after an earlier one is checked too: the guard takes the channel of
// the next change before it reads the tables. It took it after, so a
// token deleted during a recheck never ended the calls made with it (an
// event stream under a deleted token ran on, once, on a loaded machine:
// TestRevokedTokenEndsEventStream).
func TestGuardRechecksAChangeMadeDuringARecheck(t *testing.T) {
	st, err := acl.Empty().Bootstrap(acl.HashToken("admin-secret"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err = st.SetPrincipal(acl.Principal{Name: "bob", TokenHash: acl.HashToken("bob-secret")}, false); err != nil {
		t.Fatal(err)
	}
	tables := &changingTables{st: st, ch: make(chan struct{}), watched: make(chan struct{}, 1)}
	g := NewGuard(tables, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, e := g.Authenticate(context.Background(), "Bearer bob-secret", nil, Authenticated())
	if e != nil {
		t.Fatal(e)
	}
	stop := make(chan struct{})
	defer close(stop)
	go g.Run(stop)
	<-tables.watched // the guard waits for the next change

	other, err := st.SetPolicy(acl.Policy{Name: "other", Rules: []acl.Rule{{Prefix: "o/", Verbs: acl.Read}}})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := other.DeletePrincipal("bob")
	if err != nil {
		t.Fatal(err)
	}
	tables.mu.Lock()
	tables.during = func() { tables.set(gone) }
	tables.mu.Unlock()
	tables.set(other) // a change that leaves bob's call allowed; bob goes during its recheck

	select {
	case <-ctx.Done():
		if g.Revoked() != 1 {
			t.Errorf("revoked %d calls, want 1", g.Revoked())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bob's call ran on after his principal was deleted during a recheck")
	}
}
